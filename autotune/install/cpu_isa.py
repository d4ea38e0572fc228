"""The x86-64 instruction sets this machine lets a process run, and the ggml build flags that use
exactly those, never AMX.

Why not ggml's default native build: `GGML_NATIVE` compiles with `-march=native`, which turns on
every extension the CPU *reports*, AMX included. A VM can report AMX (`amx_tile` in /proc/cpuinfo)
yet refuse it: there the first `ldtilecfg` faults and llama-server dies of SIGILL before its first
token. The Linux kernel lists in /proc/cpuinfo only the AVX and AVX-512 extensions whose register
state it enabled (XSAVE), so those flags are what a process can run; AMX, alone among them, also
needs a per-process permission the kernel may refuse, and its ggml path only serves prompt
processing of a few quant types on a CPU. So every AMX flag stays OFF.

This module is plain standard library: `python -m autotune.install` runs it before anything else of
autotune is installed. `autotune doctor` uses the same reading to say what a build was compiled for.
"""

from __future__ import annotations

import platform
from pathlib import Path

#: ggml's CMake option for each x86 extension, with the /proc/cpuinfo flags that must all be present.
GGML_X86_OPTIONS: dict[str, tuple[str, ...]] = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_AVX": ("avx",),
    "GGML_AVX2": ("avx2",),
    "GGML_FMA": ("fma",),
    "GGML_F16C": ("f16c",),
    "GGML_BMI2": ("bmi2",),
    "GGML_AVX_VNNI": ("avx_vnni",),
    # ggml's GGML_AVX512 compiles with -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512f", "avx512vbmi"),
    "GGML_AVX512_VNNI": ("avx512f", "avx512_vnni"),
    "GGML_AVX512_BF16": ("avx512f", "avx512_bf16"),
}
#: Off in every build autotune makes, whatever the CPU reports (see the module docstring).
GGML_NEVER = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
#: The AMX instructions: what a build that would fault on such a VM contains (tdpb* covers
#: tdpbssd/tdpbsud/tdpbusd/tdpbuud/tdpbf16ps).
AMX_MNEMONICS = ("ldtilecfg", "sttilecfg", "tileloadd", "tileloaddt1", "tilestored", "tilezero", "tilerelease", "tdpb")

CPUINFO = Path("/proc/cpuinfo")


def is_x86_64(machine: str | None = None) -> bool:
    return (machine or platform.machine()).lower() in ("x86_64", "amd64")


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str] | None:
    """The `flags` of the first processor in /proc/cpuinfo; None where there is no such file (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.split("\n"):
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def ggml_cpu_options(flags: frozenset[str]) -> dict[str, bool]:
    """Every x86 ggml option, ON exactly when the CPU lists all its flags; AMX always OFF."""
    options = {name: all(f in flags for f in needs) for name, needs in GGML_X86_OPTIONS.items()}
    options.update({name: False for name in GGML_NEVER})
    return options


def portable_cmake_args(flags: frozenset[str] | None = None, machine: str | None = None) -> list[str]:
    """The CMake arguments of a build that runs every instruction it has on this machine.

    On Linux x86-64: `-DGGML_NATIVE=OFF` and each extension set ON or OFF explicitly (with NATIVE off,
    ggml turns SSE4.2/AVX/AVX2/BMI2/FMA/F16C on by default, which a CPU without them would refuse).
    Elsewhere (ARM, macOS, no /proc/cpuinfo): nothing, llama.cpp's own defaults, which compile no AMX.
    """
    if not is_x86_64(machine):
        return []
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return []
    options = ggml_cpu_options(flags)
    return ["-DGGML_NATIVE=OFF"] + [f"-D{name}={'ON' if on else 'OFF'}" for name, on in options.items()]


def enabled_extensions(flags: frozenset[str] | None = None) -> list[str]:
    """The ggml option names this CPU gets ON (`GGML_AVX2`, …), for one-line reports."""
    flags = cpu_flags() if flags is None else flags
    if flags is None or not is_x86_64():
        return []
    return [name for name, on in ggml_cpu_options(flags).items() if on]
