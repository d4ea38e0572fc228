"""The hardware key from a real `nvidia-smi` when there is one, else from a stand-in script on PATH."""

import os
import stat

import pytest

from autotune import hardware


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    def install(output: str):
        script = tmp_path / "nvidia-smi"
        script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        hardware.hardware_key.cache_clear()
        hardware.hardware_detail.cache_clear()

    yield install
    hardware.hardware_key.cache_clear()
    hardware.hardware_detail.cache_clear()


def test_gpu_name_and_memory_make_the_key(fake_smi):
    fake_smi("NVIDIA GeForce RTX 5090, 32607, 575.51")
    assert hardware.hardware_key() == "NVIDIA GeForce RTX 5090 32GiB"
    assert hardware.hardware_detail()["gpus"][0]["driver"] == "575.51"


def test_several_identical_gpus_are_counted(fake_smi):
    fake_smi("NVIDIA H200, 143771, 570.1\nNVIDIA H200, 143771, 570.1")
    assert hardware.hardware_key() == "2x NVIDIA H200 140GiB"


def test_without_a_gpu_the_cpu_model_is_the_key(fake_smi):
    fake_smi("")
    assert hardware.hardware_key().startswith("CPU ")
