"""The hardware key studies and presets are filed under.

With NVIDIA GPUs: their name and memory from `nvidia-smi` (`NVIDIA GeForce RTX 5090 32GiB`, with a
count prefix such as `2x ` when several identical GPUs are visible); otherwise the CPU model
(`CPU Intel(R) Xeon(R) ...`). The driver version is not part of the key (a driver update should
not start a new study) but is recorded with every trial.
"""

from __future__ import annotations

import functools
import platform
import shutil
import subprocess
from pathlib import Path

_QUERY = "--query-gpu=name,memory.total,driver_version"


@functools.lru_cache(maxsize=1)
def hardware_key() -> str:
    gpus = _gpus()
    if not gpus:
        return _cpu_name()
    names = {f"{g['name']} {round(g['memory_mib'] / 1024)}GiB" for g in gpus}
    key = sorted(names)[0] if len(names) == 1 else " + ".join(sorted(names))
    return f"{len(gpus)}x {key}" if len(gpus) > 1 and len(names) == 1 else key


@functools.lru_cache(maxsize=1)
def hardware_detail() -> dict:
    """What is recorded with each trial: the GPUs with memory and driver, and the CPU."""
    return {"gpus": _gpus(), "cpu": _cpu_name()}


def _gpus() -> list[dict]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, _QUERY, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[1].isdigit():
            gpus.append({"name": parts[0], "memory_mib": int(parts[1]), "driver": parts[2]})
    return gpus


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "CPU " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU " + (platform.processor() or platform.machine())
