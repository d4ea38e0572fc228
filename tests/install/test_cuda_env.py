"""A CUDA build's environment (`cuda_env`), with stand-in programs in a temporary folder: nvcc of CUDA 12.4
outside PATH, in the place the toolkit's installers put it, and a default gcc 14, which nvcc 12.4 refuses,
beside g++-12, g++-13 and g++-14. PATH holds only the stand-ins: this machine's compilers play no part, and
nothing is compiled (the wheelhouse's pip is a stand-in too)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from autotune.install import build_args, wheelhouse
from autotune.install.build_args import cmake_args
from autotune.install.cuda_env import cuda_environment, newest_gcc
from autotune.install.wheelhouse import build_wheel

NVCC_12_4 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2024 NVIDIA Corporation
Built on Thu_Mar_28_02:18:24_PDT_2024
Cuda compilation tools, release 12.4, V12.4.131
Build cuda_12.4.r12.4/compiler.34097967_0
"""
CUDA = ["-DLLAMA_BUILD_TESTS=OFF", "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=native"]
#: what build_wheel itself adds to the environment it is given
BUILD_WHEEL_ADDS = {"CMAKE_ARGS", "LLAMA_CPP_BUILD_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL"}


def stand_in(path: Path, prints: str) -> Path:
    """An executable `path` that prints `prints` whatever it is asked (the shell's printf: PATH has no cat)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = " ".join(shlex.quote(line) for line in prints.splitlines())
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' {lines}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def toolkit(tmp_path, monkeypatch) -> Path:
    """nvcc 12.4 at tmp/cuda/bin/nvcc, off PATH, where `cuda_compiler()` looks last; PATH is tmp/bin alone,
    with gcc 14, g++-12, g++-13 and g++-14."""
    nvcc = stand_in(tmp_path / "cuda" / "bin" / "nvcc", NVCC_12_4)
    monkeypatch.setattr(build_args, "TOOLKIT_NVCC", str(nvcc))
    stand_in(tmp_path / "bin" / "gcc", "14\n")
    for major in (12, 13, 14):
        stand_in(tmp_path / "bin" / f"g++-{major}", f"{major}\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.delenv("CUDAHOSTCXX", raising=False)
    return nvcc


@pytest.fixture
def recorded_builds(tmp_path, monkeypatch) -> list[dict[str, str]]:
    """`build_wheel` of a local stand-in sdist, whose pip writes a wheel and records the build's environment."""
    sdist = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    sdist.write_bytes(b"a stand-in source")
    monkeypatch.setattr(wheelhouse, "fetch_sdist", lambda requirement, into: sdist)
    environments = []

    def pip(*args: str, env: dict | None = None, quiet: bool = False) -> subprocess.CompletedProcess:
        (Path(args[args.index("-w") + 1]) / "llama_cpp_python-0.3.36-cp310-cp310-linux_x86_64.whl").write_bytes(b"")
        environments.append(env)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(wheelhouse, "pip", pip)
    return environments


def test_nvcc_off_path_reaches_cmake_by_cudacxx_and_path(toolkit, tmp_path):
    env, note = cuda_environment(CUDA)
    assert env["CUDACXX"] == str(toolkit)
    assert env["PATH"].split(os.pathsep) == [str(toolkit.parent), str(tmp_path / "bin")]
    assert note.startswith(f"CUDA: nvcc 12.4 at {toolkit} (added to PATH), ")
    assert cuda_environment(["-DGGML_CUDA=on"])[0]["CUDACXX"] == str(toolkit)  # the user's own CMAKE_ARGS
    assert cuda_environment(["-DGGML_CUDA=on", "-DGGML_CUDA=OFF"]) == ({}, None)  # the last one wins


def test_nvcc_on_path_leaves_path_as_it_is(toolkit, monkeypatch):
    monkeypatch.setenv("PATH", f"{os.environ['PATH']}{os.pathsep}{toolkit.parent}")
    env, note = cuda_environment(CUDA)
    assert env["CUDACXX"] == str(toolkit) and "PATH" not in env and "added to PATH" not in note


def test_a_default_gcc_too_new_for_the_toolkit_gives_the_newest_accepted_gxx(toolkit, tmp_path):
    env, note = cuda_environment(CUDA)
    assert env["CUDAHOSTCXX"] == str(tmp_path / "bin" / "g++-13")
    assert note == (
        f"CUDA: nvcc 12.4 at {toolkit} (added to PATH), host compiler g++-13 "
        "(the default gcc 14 is newer than CUDA 12.4 accepts)"
    )


def test_without_an_accepted_gxx_it_says_so_in_one_line_and_sets_none(toolkit, tmp_path):
    (tmp_path / "bin" / "g++-13").unlink()
    (tmp_path / "bin" / "g++-12").unlink()
    env, note = cuda_environment(CUDA)
    assert "CUDAHOSTCXX" not in env and env["CUDACXX"] == str(toolkit)
    assert "the default gcc 14 is newer than CUDA 12.4 accepts (gcc 13 at most)" in note and "\n" not in note


def test_a_default_gcc_the_toolkit_accepts_is_left_alone(toolkit, tmp_path):
    stand_in(tmp_path / "bin" / "gcc", "13.2.0\n")
    env, note = cuda_environment(CUDA)
    assert "CUDAHOSTCXX" not in env and note.endswith(", host compiler the default gcc 13")


def test_the_gcc_table_and_a_release_past_it_which_is_not_judged(toolkit, tmp_path):
    stand_in(toolkit, NVCC_12_4.replace("release 12.4, V12.4.131", "release 14.1, V14.1.20"))
    stand_in(tmp_path / "bin" / "gcc", "16\n")
    env, note = cuda_environment(CUDA)
    assert "CUDAHOSTCXX" not in env and "host compiler the default gcc 16 (" in note
    table = {(11, 8): 11, (12, 3): 12, (12, 4): 13, (12, 6): 13, (12, 8): 14, (12, 9): 14, (13, 0): 15, (13, 2): 15}
    assert {release: newest_gcc(release) for release in table} == table
    assert newest_gcc((10, 2)) is None and newest_gcc((14, 0)) is None


def test_the_users_own_host_compiler_is_kept(toolkit, monkeypatch):
    monkeypatch.setenv("CUDAHOSTCXX", "/opt/gcc-12/bin/g++")
    env, note = cuda_environment(CUDA)
    assert "CUDAHOSTCXX" not in env and note.endswith(", host compiler /opt/gcc-12/bin/g++ (your CUDAHOSTCXX)")
    monkeypatch.delenv("CUDAHOSTCXX")
    env, note = cuda_environment([*CUDA, "-DCMAKE_CUDA_HOST_COMPILER=/opt/gcc-12/bin/g++"])
    assert "CUDAHOSTCXX" not in env and note.endswith(", host compiler your CMAKE_CUDA_HOST_COMPILER")


def test_a_cpu_build_runs_in_this_process_environment(toolkit, recorded_builds, tmp_path):
    cpu_args = cmake_args("cpu", "")
    assert cuda_environment(cpu_args) == ({}, None)
    build_wheel("llama-cpp-python", cpu_args, tmp_path / "wheelhouse", env={**os.environ})
    assert {k: v for k, v in recorded_builds[0].items() if k not in BUILD_WHEEL_ADDS} == dict(os.environ)


def test_the_cuda_build_runs_in_that_environment_and_each_host_compiler_is_its_own_build(
    toolkit, recorded_builds, tmp_path
):
    root = tmp_path / "wheelhouse"
    added, _ = cuda_environment(CUDA)
    chosen = build_wheel("llama-cpp-python", CUDA, root, env={**os.environ, **added})
    built = recorded_builds[-1]
    assert built["CUDACXX"] == str(toolkit) and built["CUDAHOSTCXX"] == str(tmp_path / "bin" / "g++-13")
    assert built["PATH"].split(os.pathsep)[0] == str(toolkit.parent)
    assert not build_wheel("llama-cpp-python", CUDA, root, env={**os.environ, **added}).built_now
    other = build_wheel("llama-cpp-python", CUDA, root, env={**os.environ, **added, "CUDAHOSTCXX": "g++-12"})
    assert other.built_now and other.wheel.parent != chosen.wheel.parent
    assert build_wheel("llama-cpp-python", CUDA, root).wheel.parent not in {chosen.wheel.parent, other.wheel.parent}
