"""The instruction sets read from /proc/cpuinfo and the ggml options made of them: stand-in cpuinfo texts of
real CPUs (their flag lines as Linux prints them), never AMX."""

from __future__ import annotations

import pytest

from autotune.install.cpu_isa import GGML_NEVER, cpu_flags, ggml_cpu_options, portable_cmake_args
from autotune.testing.cpuinfo import SANDY_BRIDGE, SAPPHIRE_RAPIDS, write_cpuinfo


def test_the_flags_are_read_from_the_first_processor(tmp_path):
    flags = cpu_flags(write_cpuinfo(tmp_path, SAPPHIRE_RAPIDS))
    assert {"amx_tile", "amx_int8", "avx512f", "avx512_vnni"} <= flags and "spectre_v1" not in flags


def test_no_cpuinfo_or_no_flags_line_is_none(tmp_path):
    assert cpu_flags(tmp_path / "missing") is None
    arm = tmp_path / "arm-cpuinfo"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n")
    assert cpu_flags(arm) is None


def test_an_amx_reporting_cpu_gets_every_amx_option_off_and_avx512_on(tmp_path):
    options = ggml_cpu_options(cpu_flags(write_cpuinfo(tmp_path, SAPPHIRE_RAPIDS)))
    assert {name: options[name] for name in GGML_NEVER} == {
        "GGML_AMX_TILE": False,
        "GGML_AMX_INT8": False,
        "GGML_AMX_BF16": False,
    }
    assert all(
        options[name]
        for name in (
            "GGML_AVX512",
            "GGML_AVX512_VBMI",
            "GGML_AVX512_VNNI",
            "GGML_AVX512_BF16",
            "GGML_AVX_VNNI",
            "GGML_AVX2",
            "GGML_FMA",
            "GGML_F16C",
            "GGML_BMI2",
        )
    )
    args = portable_cmake_args(cpu_flags(write_cpuinfo(tmp_path, SAPPHIRE_RAPIDS)), machine="x86_64")
    assert args[0] == "-DGGML_NATIVE=OFF"
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF", "-DGGML_AVX512=ON"} <= set(args)
    assert not [a for a in args if "AMX" in a and a.endswith("=ON")]


def test_a_cpu_without_avx2_gets_it_off_explicitly(tmp_path):
    """With GGML_NATIVE off, ggml turns AVX2, FMA, F16C and BMI2 on unless told otherwise."""
    args = portable_cmake_args(cpu_flags(write_cpuinfo(tmp_path, SANDY_BRIDGE)), machine="x86_64")
    assert {
        "-DGGML_AVX=ON",
        "-DGGML_SSE42=ON",
        "-DGGML_AVX2=OFF",
        "-DGGML_FMA=OFF",
        "-DGGML_F16C=OFF",
        "-DGGML_BMI2=OFF",
        "-DGGML_AVX512=OFF",
    } <= set(args)
    options = ggml_cpu_options(cpu_flags(write_cpuinfo(tmp_path, SANDY_BRIDGE)))
    assert [name for name, on in options.items() if on] == ["GGML_SSE42", "GGML_AVX"]


def test_avx512_needs_every_subset_ggml_compiles_it_with(tmp_path):
    """ggml's GGML_AVX512 compiles with -mavx512f/cd/vl/dq/bw: a CPU (or a VM) lacking one gets it off."""
    without_bw = SAPPHIRE_RAPIDS.replace(" avx512bw ", " ")
    options = ggml_cpu_options(cpu_flags(write_cpuinfo(tmp_path, without_bw)))
    assert options["GGML_AVX512"] is False and options["GGML_AVX512_VNNI"] is True


@pytest.mark.parametrize("machine", ["aarch64", "arm64", "ppc64le"])
def test_elsewhere_llama_cpp_keeps_its_own_defaults(tmp_path, machine):
    assert portable_cmake_args(cpu_flags(write_cpuinfo(tmp_path, SAPPHIRE_RAPIDS)), machine=machine) == []
