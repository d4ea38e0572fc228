"""`examine`: everything `autotune doctor` reports, gathered in one pass."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.doctor import decodes
from autotune.doctor.decodes import Decode
from autotune.doctor.findings import Finding, assess
from autotune.errors import ModelFileError
from autotune.hardware import hardware_detail, visible_gpus
from autotune.install.cpu_isa import cpu_flags, enabled_extensions, is_x86_64
from autotune.llamacpp.builds import Build
from autotune.llamacpp.server_binary import INSTALL_HINT, resolve_server_binary, server_binary_available
from autotune.models.files import resolve_model_files
from autotune.spec.space import load_model_space


@dataclass(frozen=True)
class DoctorReport:
    """The machine, its llama.cpp builds, a decode on each, and the warnings they call for."""

    model: str
    target: Path | None  # None: no file of the model to decode (a finding says why)
    cpu: str
    cpu_extensions: tuple[str, ...] | None  # the x86 extensions this CPU enables; None: not x86-64 Linux
    gpus: tuple[dict, ...]
    builds: tuple[Build, ...]
    decodes: tuple[Decode, ...]
    findings: tuple[Finding, ...]

    @property
    def usable(self) -> bool:
        return not any(f.unusable for f in self.findings)

    def to_dict(self) -> dict:
        return {
            "usable": self.usable, "model": self.model, "target": str(self.target) if self.target else None,
            "cpu": self.cpu, "cpu_extensions": list(self.cpu_extensions) if self.cpu_extensions is not None else None,
            "gpus": list(self.gpus), "builds": [b.to_dict() for b in self.builds],
            "decodes": [d.to_dict() for d in self.decodes], "warnings": [f.to_dict() for f in self.findings],
        }


def examine(model: str, models_dir: Path, server_bin: str | None = None, space_file: Path | None = None) -> DoctorReport:
    """Read the builds, decode 4 tokens of `model`'s target on each engine, and judge.

    A model name or space file that does not exist, or a `server_bin` that is no executable, is bad
    input (UsageError); a missing model file or llama-server is a finding."""
    space = load_model_space(model, space_file)
    findings: list[Finding] = []
    try:
        target = resolve_model_files(space, models_dir).target
    except ModelFileError as exc:
        target = None
        findings.append(Finding(f"nothing to decode: {exc}", True))
    results = [decodes.in_process(target)]
    if server_binary_available(server_bin):
        results.append(decodes.on_server(resolve_server_binary(server_bin), target))
    else:
        findings.append(Finding(f"no llama-server: the search measures in-process only; {INSTALL_HINT}", False))
    builds = tuple(build for build, _ in results)
    done = tuple(decode for _, decode in results if decode is not None)
    gpus = tuple(visible_gpus())
    flags = cpu_flags() if is_x86_64() else None
    extensions = None if flags is None else tuple(e.removeprefix("GGML_") for e in enabled_extensions(flags))
    findings = assess(builds, done, gpus, extensions) + findings
    return DoctorReport(model, target, hardware_detail()["cpu"], extensions, gpus, builds, done, tuple(findings))
