"""The hardware key from a stand-in `nvidia-smi` script on PATH, and CUDA_VISIBLE_DEVICES read the way CUDA
reads it by both the key and the device locks."""

import os
import stat

import pytest

from autotune import hardware
from autotune.measure import device_lock

EIGHT_H200 = "\n".join(f"{i}, GPU-{i}0000000-aaaa-bbbb-cccc-dddddddddddd, NVIDIA H200, 143771, 570.1" for i in range(8))


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """Install a stand-in nvidia-smi printing `output`; CUDA_VISIBLE_DEVICES starts unset."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

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


def visible(monkeypatch, setting: str) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", setting)
    hardware.hardware_key.cache_clear()
    hardware.hardware_detail.cache_clear()


def test_gpu_name_and_memory_make_the_key(fake_smi):
    fake_smi("0, GPU-5090, NVIDIA GeForce RTX 5090, 32607, 575.51")
    assert hardware.hardware_key() == "NVIDIA GeForce RTX 5090 32GiB"
    assert hardware.hardware_detail()["gpus"] == [
        {"index": 0, "uuid": "GPU-5090", "name": "NVIDIA GeForce RTX 5090", "memory_mib": 32607, "driver": "575.51"}
    ]


def test_several_identical_gpus_are_counted(fake_smi):
    fake_smi("0, GPU-a, NVIDIA H200, 143771, 570.1\n1, GPU-b, NVIDIA H200, 143771, 570.1")
    assert hardware.hardware_key() == "2x NVIDIA H200 140GiB"


def test_without_a_gpu_the_cpu_model_is_the_key(fake_smi):
    fake_smi("")
    assert hardware.hardware_key().startswith("CPU ")


def test_the_rule_over_names_and_memory():
    assert hardware.gpu_key([("NVIDIA H200", 143771)]) == "NVIDIA H200 140GiB"
    assert hardware.gpu_key([("NVIDIA H200", 143771)] * 8) == "8x NVIDIA H200 140GiB"
    # distinct GPUs: sorted labels without counts; a half GiB rounds to the even neighbour
    assert hardware.gpu_key([("B", 2560), ("A", 3584), ("B", 2560)]) == "A 4GiB + B 2GiB"
    with pytest.raises(ValueError):
        hardware.gpu_key([])


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("3", "NVIDIA H200 140GiB"),
        ("0,7", "2x NVIDIA H200 140GiB"),
        (" 7 , 0 ", "2x NVIDIA H200 140GiB"),
        ("GPU-50000000-aaaa-bbbb-cccc-dddddddddddd", "NVIDIA H200 140GiB"),
        ("GPU-5,1", "2x NVIDIA H200 140GiB"),  # a UUID may be given by its start
        ("2,2", "NVIDIA H200 140GiB"),
        ("0,-1,1", "NVIDIA H200 140GiB"),  # CUDA stops at the first entry that names no GPU
        ("0,9,1", "NVIDIA H200 140GiB"),
    ],
)
def test_only_the_gpus_cuda_visible_devices_shows_count(fake_smi, monkeypatch, setting, key):
    fake_smi(EIGHT_H200)
    assert hardware.hardware_key() == "8x NVIDIA H200 140GiB"
    visible(monkeypatch, setting)
    assert hardware.hardware_key() == key
    assert len(hardware.hardware_detail()["gpus"]) == (1 if key.startswith("NVIDIA") else 2)


@pytest.mark.parametrize("setting", ["", "-1", "GPU-", "GPU-nope"])
def test_cuda_visible_devices_that_shows_no_gpu_gives_the_cpu_key(fake_smi, monkeypatch, setting):
    fake_smi(EIGHT_H200)
    visible(monkeypatch, setting)
    assert hardware.hardware_key() == hardware._cpu_name()
    assert hardware.hardware_detail()["gpus"] == []


def test_mixed_gpus_key_follows_the_visible_ones(fake_smi, monkeypatch):
    fake_smi("0, GPU-h, NVIDIA H200, 143771, 570.1\n1, GPU-a, NVIDIA A100-SXM4-80GB, 81920, 570.1")
    assert hardware.hardware_key() == "NVIDIA A100-SXM4-80GB 80GiB + NVIDIA H200 140GiB"
    visible(monkeypatch, "GPU-a")
    assert hardware.hardware_key() == "NVIDIA A100-SXM4-80GB 80GiB"


def test_device_locks_name_the_same_gpus_as_the_key(fake_smi, monkeypatch):
    fake_smi(EIGHT_H200)
    uuid = "GPU-{}0000000-aaaa-bbbb-cccc-dddddddddddd".format
    assert device_lock.device_ids() == [f"gpu-{uuid(i)}" for i in range(8)]
    visible(monkeypatch, "5")
    by_index = device_lock.device_ids()
    visible(monkeypatch, uuid(5))
    assert device_lock.device_ids() == by_index == [f"gpu-{uuid(5)}"]  # one lock, whichever way it is named
    visible(monkeypatch, "")
    assert device_lock.device_ids() == ["cpu"]
