"""The CMake arguments autotune builds llama.cpp with: the user's CMAKE_ARGS first and left alone, the
offline options, the GPU backend, and this CPU's instruction sets (here a stand-in Sapphire Rapids that
reports AMX)."""

from __future__ import annotations

import functools
import os

import pytest

from autotune.install import build_args, cpu_isa
from autotune.install.build_args import OFFLINE_ARGS, choose_backend, cmake_args, defined
from autotune.testing.cpuinfo import SAPPHIRE_RAPIDS
from autotune.testing.stand_ins import stand_in_nvidia_smi


@pytest.fixture
def sapphire_rapids(monkeypatch):
    """This machine reads as the AMX-reporting Sapphire Rapids VM of issue 30."""
    flags = frozenset(SAPPHIRE_RAPIDS.split())
    monkeypatch.setattr(
        build_args, "portable_cmake_args", functools.partial(cpu_isa.portable_cmake_args, flags, "x86_64")
    )


@pytest.fixture
def one_h200(tmp_path, monkeypatch):
    """nvidia-smi lists one H200."""
    stand_in_nvidia_smi(tmp_path, [("NVIDIA H200", 143771)])
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def values(args: list[str]) -> dict[str, list[str]]:
    """Every value each CMake variable is given, in order."""
    found: dict[str, list[str]] = {}
    for arg in args:
        if arg.startswith("-D") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            found.setdefault(name.split(":", 1)[0], []).append(value)
    return found


def test_defined_reads_names_with_and_without_a_type():
    assert defined(["-DGGML_CUDA=on", "-DCMAKE_CUDA_ARCHITECTURES:STRING=90", "-G", "Ninja", "-DNOVALUE"]) == {
        "GGML_CUDA",
        "CMAKE_CUDA_ARCHITECTURES",
    }


def test_a_cpu_build_on_an_amx_vm_is_portable_and_never_amx(sapphire_rapids):
    args = values(cmake_args("cpu", ""))
    assert args["GGML_NATIVE"] == ["OFF"]
    assert args["GGML_AMX_TILE"] == args["GGML_AMX_INT8"] == args["GGML_AMX_BF16"] == ["OFF"]
    assert args["GGML_AVX512"] == args["GGML_AVX512_VNNI"] == args["GGML_AVX2"] == ["ON"]
    assert all(arg in cmake_args("cpu", "") for arg in OFFLINE_ARGS)
    assert "GGML_CUDA" not in args


def test_a_user_cmake_args_that_sets_ggml_native_is_left_alone(sapphire_rapids):
    args = cmake_args("cpu", "-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=ON")
    assert args[:2] == ["-DGGML_NATIVE=ON", "-DLLAMA_BUILD_TESTS=ON"]
    assert values(args)["GGML_NATIVE"] == ["ON"] and values(args)["LLAMA_BUILD_TESTS"] == ["ON"]
    assert not [a for a in args if a.startswith(("-DGGML_AVX", "-DGGML_AMX", "-DGGML_FMA"))]


def test_an_instruction_set_the_user_sets_is_theirs_alone(sapphire_rapids):
    args = values(cmake_args("cpu", "-DGGML_AVX512=OFF"))
    assert args["GGML_AVX512"] == ["OFF"]
    assert args["GGML_NATIVE"] == ["OFF"] and args["GGML_AVX2"] == ["ON"] and args["GGML_AMX_INT8"] == ["OFF"]


def test_a_cuda_build_targets_the_gpus_here(sapphire_rapids, one_h200):
    args = values(cmake_args("cuda", ""))
    assert args["GGML_CUDA"] == ["ON"] and args["CMAKE_CUDA_ARCHITECTURES"] == ["native"]
    assert args["GGML_NATIVE"] == ["OFF"] and args["GGML_AMX_TILE"] == ["OFF"]
    assert values(cmake_args("cuda", "-DCMAKE_CUDA_ARCHITECTURES=90"))["CMAKE_CUDA_ARCHITECTURES"] == ["90"]


def test_the_backend_follows_the_user_then_the_request_then_the_machine(one_h200, monkeypatch):
    assert choose_backend("cpu", ["-DGGML_CUDA=on"]) == ("user", None)
    assert choose_backend("auto", ["-DGGML_VULKAN=ON"]) == ("user", None)
    assert choose_backend("cpu", []) == ("cpu", None)
    monkeypatch.setattr(build_args, "cuda_compiler", lambda: "/usr/local/cuda/bin/nvcc")
    assert choose_backend("auto", []) == ("cuda", None)
    monkeypatch.setattr(build_args, "cuda_compiler", lambda: None)
    backend, note = choose_backend("auto", [])
    assert backend == "cpu" and "NVIDIA GPU" in note and "nvcc" in note and "--backend cuda" in note


def test_without_a_gpu_auto_builds_for_the_cpu(tmp_path, monkeypatch):
    stand_in_nvidia_smi(tmp_path, [])
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert choose_backend("auto", []) == ("cpu", None)
