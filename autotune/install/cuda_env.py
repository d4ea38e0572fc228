"""The environment a CUDA build of llama.cpp needs besides its CMake arguments.

CMake looks for nvcc in CUDACXX, `-DCMAKE_CUDA_COMPILER` and on PATH only. The toolkit's installers put it in
/usr/local/cuda/bin and leave that folder off PATH; `cuda_compiler()` finds it there and chooses CUDA, and the
build then stopped at "No CMAKE_CUDA_COMPILER could be found". So the build gets CUDACXX (the nvcc that
`cuda_compiler()` found) and, where `nvcc` on PATH is not that one, its folder in front of PATH.

nvcc compiles the host half of each .cu file with the `gcc` on PATH unless CMake names another (CUDAHOSTCXX,
passed as `-ccbin`; the CXX that CMake compiles C++ with never reaches nvcc), and each CUDA release refuses a
GCC whose major version is newer than it supports ("unsupported GNU version! gcc versions later than 13 are
not supported!": gcc 14 under CUDA 12.4). Where the default gcc is too new, the newest `g++-N` on PATH that the
toolkit accepts becomes CUDAHOSTCXX. A CUDAHOSTCXX or `-DCMAKE_CUDA_HOST_COMPILER` of the user's is kept.
Both variables are in the wheelhouse's build key (`wheelhouse.BUILD_ENV`), so another compiler builds anew.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from autotune.install.build_args import TOOLKIT_NVCC, cuda_compiler, defined

#: (the CUDA release from which on, the newest GCC major version its nvcc accepts as host compiler), from
#: NVIDIA's CUDA Installation Guide for Linux, "Host Compiler Support Policy", of each release
#: (https://docs.nvidia.com/cuda/archive/<release>/cuda-installation-guide-linux/): 12.4 to 12.6 accept
#: GCC 6 to 13, 12.8 and 12.9 up to 14, 13.x up to 15 (as 13.0's host_config.h says: "gcc versions later
#: than 15 are not supported"); 11.4.0 itself still stopped at GCC 10. nvcc checks the major version only.
#: Add a row when a CUDA release raises its GCC.
NEWEST_GCC = (((11, 0), 9), ((11, 1), 10), ((11, 4), 11), ((12, 0), 12), ((12, 4), 13), ((12, 8), 14), ((13, 0), 15))
#: The oldest GCC every release from 11.0 on accepts (the same guide: "GCC 6.x - ...")
OLDEST_GCC = 6
#: The values that turn a CMake option on (a number other than 0 does too; nobody writes -DGGML_CUDA=2)
ON = {"ON", "YES", "TRUE", "Y", "1"}


def builds_cuda(cmake_args: list[str]) -> bool:
    """Whether `cmake_args` turn GGML_CUDA on: autotune's `--backend cuda` or the user's own CMAKE_ARGS (the
    last `-DGGML_CUDA=` wins, as in CMake)."""
    value = ""
    for arg in cmake_args:
        if defined([arg]) == {"GGML_CUDA"}:
            value = arg.split("=", 1)[1]
    return value.upper() in ON


def _printed(*command: str) -> str:
    """What `command` prints, or "" where it cannot run or fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def nvcc_release(nvcc: str) -> tuple[int, int] | None:
    """The toolkit's release from `nvcc --version` ("Cuda compilation tools, release 12.4, V12.4.131")."""
    found = re.search(r"release (\d+)\.(\d+)", _printed(nvcc, "--version"))
    return (int(found[1]), int(found[2])) if found else None


def newest_gcc(release: tuple[int, int]) -> int | None:
    """The newest GCC major version nvcc of this CUDA release accepts; None for a release the table does not
    cover (before 11.0, or of a CUDA major version newer than its last row), which is not judged."""
    rows = [newest for since, newest in NEWEST_GCC if since <= release]
    if not rows or release[0] > NEWEST_GCC[-1][0][0]:
        return None
    return rows[-1]


def gcc_major(gcc: str) -> int | None:
    """The major version `gcc -dumpversion` prints ("14", or "9.4.0" from older GCC)."""
    found = re.match(r"\s*(\d+)", _printed(gcc, "-dumpversion"))
    return int(found[1]) if found else None


def accepted_gxx(newest: int, path: str) -> str | None:
    """The newest `g++-N` on `path` (Debian's, Ubuntu's and Fedora's name for a second GCC) with N at most
    `newest`, as a full path."""
    for major in range(newest, OLDEST_GCC - 1, -1):
        found = shutil.which(f"g++-{major}", path=path)
        if found:
            return found
    return None


def host_compiler(cmake_args: list[str], release: tuple[int, int] | None, path: str) -> tuple[str | None, str]:
    """(the CUDAHOSTCXX to set, or None to leave nvcc's host compiler as it is; words that say which it is)."""
    if "CMAKE_CUDA_HOST_COMPILER" in defined(cmake_args):
        return None, "host compiler your CMAKE_CUDA_HOST_COMPILER"
    if os.environ.get("CUDAHOSTCXX"):
        return None, f"host compiler {os.environ['CUDAHOSTCXX']} (your CUDAHOSTCXX)"
    gcc = shutil.which("gcc", path=path)
    major = gcc_major(gcc) if gcc else None
    if major is None:
        return None, "host compiler nvcc's default (no gcc on PATH says its version)"
    newest = newest_gcc(release) if release else None
    if newest is None:
        return None, f"host compiler the default gcc {major} (a CUDA release autotune has no GCC limit for)"
    if major <= newest:
        return None, f"host compiler the default gcc {major}"
    too_new = f"the default gcc {major} is newer than CUDA {release[0]}.{release[1]} accepts"
    chosen = accepted_gxx(newest, path)
    if chosen is None:
        return None, (
            f"host compiler: {too_new} (gcc {newest} at most) and no g++-{newest} or older is on PATH; "
            f"install g++-{newest} or set CUDAHOSTCXX to an accepted g++"
        )
    return chosen, f"host compiler {Path(chosen).name} ({too_new})"


def cuda_environment(cmake_args: list[str]) -> tuple[dict[str, str], str | None]:
    """The variables a build with `cmake_args` needs on top of this process's environment, and one line that
    says what they chose; nothing for a build without CUDA."""
    if not builds_cuda(cmake_args):
        return {}, None
    nvcc = cuda_compiler()
    if nvcc is None:
        folder = Path(TOOLKIT_NVCC).parent
        return {}, f"CUDA: no nvcc in CUDACXX, on PATH or in {folder}; CMake looks for one itself"
    path = os.environ.get("PATH", os.defpath)
    env = {"CUDACXX": nvcc}
    added = ""
    on_path = shutil.which("nvcc", path=path)
    if on_path is None or not os.path.samefile(on_path, nvcc):
        env["PATH"] = os.pathsep.join(filter(None, [str(Path(nvcc).parent), path]))
        added = " (added to PATH)"
    release = nvcc_release(nvcc)
    host, host_words = host_compiler(cmake_args, release, env.get("PATH", path))
    if host:
        env["CUDAHOSTCXX"] = host
    named = f"nvcc {release[0]}.{release[1]}" if release else "nvcc (release unread)"
    return env, f"CUDA: {named} at {nvcc}{added}, {host_words}"
