"""The CMake arguments autotune builds llama.cpp with on this machine.

Three parts, in this order, each leaving alone what the user's own `CMAKE_ARGS` already sets:
1. what the build needs offline and no more (no tests, no examples, no web-UI download);
2. the GPU backend: CUDA where `nvidia-smi` lists a GPU and a CUDA compiler is found, compiled for
   the GPUs present (`CMAKE_CUDA_ARCHITECTURES=native`: without native CPU flags ggml would
   otherwise compile for every architecture, several times longer);
3. the CPU's instruction sets, explicitly and never AMX (`cpu_isa.portable_cmake_args`), unless the
   user set `GGML_NATIVE` themselves.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from autotune.hardware import listed_gpus
from autotune.install.cpu_isa import portable_cmake_args

OFFLINE_ARGS = ("-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF")
GPU_BACKENDS = ("GGML_CUDA", "GGML_HIP", "GGML_VULKAN", "GGML_METAL", "GGML_SYCL", "GGML_MUSA")
BACKENDS = ("auto", "cpu", "cuda")
#: Where the CUDA toolkit's installers put nvcc, a folder they leave off PATH
TOOLKIT_NVCC = "/usr/local/cuda/bin/nvcc"


def defined(args: list[str]) -> set[str]:
    """The CMake variables `-DNAME=…` / `-DNAME:TYPE=…` that `args` set."""
    names = set()
    for arg in args:
        if arg.startswith("-D") and "=" in arg:
            names.add(arg[2:].split("=", 1)[0].split(":", 1)[0])
    return names


def cuda_compiler() -> str | None:
    """nvcc on PATH, in CUDACXX or in the toolkit's usual place."""
    for candidate in (os.environ.get("CUDACXX"), shutil.which("nvcc"), TOOLKIT_NVCC):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def choose_backend(requested: str, user_args: list[str]) -> tuple[str, str | None]:
    """(`cpu` or `cuda`, a one-line note or None). `auto` is CUDA where a GPU and nvcc are both here."""
    if defined(user_args) & set(GPU_BACKENDS):
        return "user", None
    if requested == "cpu":
        return "cpu", None
    gpus = listed_gpus()
    compiler = cuda_compiler()
    if requested == "cuda" or (gpus and compiler):
        return "cuda", None
    if gpus:
        return "cpu", (
            f"{len(gpus)} NVIDIA GPU(s) seen but no CUDA compiler (nvcc): building for the CPU; install "
            "the CUDA toolkit and rerun with --backend cuda for a CUDA build"
        )
    return "cpu", None


def cmake_args(backend: str, user_args_text: str | None = None) -> list[str]:
    """The user's `CMAKE_ARGS`, then what autotune adds for this machine and `backend`."""
    user = shlex.split(os.environ.get("CMAKE_ARGS", "") if user_args_text is None else user_args_text)
    args = list(user)
    args += [a for a in OFFLINE_ARGS if defined([a]).isdisjoint(defined(args))]
    if backend == "cuda":
        args.append("-DGGML_CUDA=ON")
        if "CMAKE_CUDA_ARCHITECTURES" not in defined(args) and listed_gpus():
            args.append("-DCMAKE_CUDA_ARCHITECTURES=native")
    if "GGML_NATIVE" not in defined(user):
        args += [a for a in portable_cmake_args() if defined([a]).isdisjoint(defined(user))]
    return args
