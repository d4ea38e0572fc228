"""`python -m autotune.install [EXTRA ...]`: install llama.cpp's two packages built for this machine,
then (from a checkout) autotune itself with those extras.

    python -m autotune.install demo            # the demo: + Gemma 3 270M and llama-server
    python -m autotune.install test            # what the tests need
    python -m autotune.install server --backend cuda

Each build is made once per source and flags (`wheelhouse`); an install whose flags did not change
compiles nothing. `--rebuild` compiles again anyway; `--print-cmake-args` only prints the flags.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from autotune.install.build_args import BACKENDS, choose_backend, cmake_args
from autotune.install.cpu_isa import enabled_extensions
from autotune.install.cuda_env import cuda_environment
from autotune.install.wheelhouse import (
    LLAMA_CPP_PACKAGES,
    InstallError,
    build_wheel,
    installed_from,
    pip,
    wheelhouse_root,
)

CHECKOUT = Path(__file__).resolve().parents[2]


def say(line: str) -> None:
    print(f"autotune install: {line}", file=sys.stderr, flush=True)


def is_checkout(root: Path = CHECKOUT) -> bool:
    pyproject = root / "pyproject.toml"
    return pyproject.is_file() and 'name = "autotune"' in pyproject.read_text()


def install(extras: list[str], backend_requested: str, rebuild: bool) -> None:
    backend, note = choose_backend(backend_requested, shlex.split(os.environ.get("CMAKE_ARGS", "")))
    if note:
        say(note)
    args = cmake_args(backend)
    cpu = " ".join(name.removeprefix("GGML_") for name in enabled_extensions()) or "llama.cpp's defaults"
    say(f"llama.cpp for this machine: backend {backend}, CPU {cpu}, never AMX")
    cuda_env, cuda_note = cuda_environment(args)
    if cuda_note:
        say(cuda_note)
    env = {**os.environ, **cuda_env}
    root = wheelhouse_root()
    wheels = []
    for package in LLAMA_CPP_PACKAGES:
        started = time.monotonic()
        say(f"{package}: looking for a build with these flags in {root} (compiling takes 4-8 min on 2 cores)")
        build = build_wheel(package, args, root, rebuild=rebuild, env=env)
        took = f"compiled in {time.monotonic() - started:.0f} s" if build.built_now else "built before"
        say(f"{package}: {build.wheel.name} ({took})")
        wheels.append(build.wheel)
    stale = [str(w) for w in wheels if installed_from(_dist_name(w)) != w.as_uri()]
    if stale and pip("install", "--force-reinstall", "--no-deps", *stale).returncode != 0:
        raise InstallError("pip could not install the llama.cpp wheels (its message is above)")
    if is_checkout():
        target = f"{CHECKOUT}[{','.join(extras)}]" if extras else str(CHECKOUT)
        if pip("install", "-e", target, *map(str, wheels)).returncode != 0:
            raise InstallError(f"pip could not install {target} (its message is above)")
    say("done; `autotune doctor` checks what was installed")


def _dist_name(wheel: Path) -> str:
    return wheel.name.split("-")[0].replace("_", "-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.install", description=__doc__.split("\n\n")[0])
    parser.add_argument("extras", nargs="*", help="autotune's extras to install from the checkout (demo, test, server)")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="auto: CUDA where nvidia-smi lists a GPU and nvcc is found, else the CPU",
    )
    parser.add_argument("--rebuild", action="store_true", help="compile llama.cpp again even if built before")
    parser.add_argument("--print-cmake-args", action="store_true", help="print the CMake arguments and stop")
    options = parser.parse_args(argv)
    if options.print_cmake_args:
        backend, _ = choose_backend(options.backend, shlex.split(os.environ.get("CMAKE_ARGS", "")))
        print(" ".join(cmake_args(backend)))
        return 0
    try:
        install([e for extra in options.extras for e in extra.split(",") if e], options.backend, options.rebuild)
    except InstallError as error:
        say(f"error: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
