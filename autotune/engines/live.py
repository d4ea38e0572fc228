"""Whether a race can keep one llama-server per configuration running at once.

Racing prompt by prompt (each prompt's configurations measured seconds apart) needs every entrant's
server loaded together. On a GPU each server holds its own copy of the weights, so the servers' weights
and contexts must fit the GPUs' free memory; on the CPU llama-server maps the weights from the file and
the servers share them in the page cache, so the weights count once and each server adds its contexts.
Only GGUF headers and `nvidia-smi` / /proc/meminfo are read: nothing of llama.cpp loads in this process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from autotune.engines.memory import ContextShape, estimate
from autotune.hardware import cuda_visible
from autotune.spec.config import SpecConfig

#: the share of free memory the servers may take (llama.cpp's buffers differ from the estimate)
HEADROOM = 0.8
UBATCH = 512


def fits_at_once(configs: Sequence[SpecConfig], *, context_size: int) -> bool:
    """Whether one llama-server per configuration fits in memory at the same time."""
    free, on_gpu = _free_memory()
    if free is None:
        return False
    per_server = []
    files: set[Path] = set()
    for config in configs:
        models = [config.target] + ([config.draft] if config.draft else [])
        contexts = [ContextShape(m, context_size, UBATCH) for m in models]
        try:
            per_server.append(estimate(models if on_gpu else [], contexts))
        except (OSError, ValueError, KeyError, TypeError):
            return False  # a header estimate() cannot read: do not risk it
        files.update(models)
    shared = 0 if on_gpu else estimate(sorted(files), [])
    return shared + sum(per_server) <= HEADROOM * free


def _free_memory() -> tuple[int | None, bool]:
    """(free bytes where the weights go, whether that is GPU memory)."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=index,uuid,memory.free", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
            gpus = [
                {"index": int(i), "uuid": u.strip(), "free_mib": int(f)}
                for i, u, f in (line.split(",") for line in out.strip().splitlines() if line.count(",") == 2)
            ]
            free_mib = [g["free_mib"] for g in cuda_visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))]
        except (OSError, subprocess.SubprocessError, ValueError):
            free_mib = []
        if free_mib:
            return sum(free_mib) * 1024 * 1024, True
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, False
    except (OSError, ValueError, IndexError):
        pass
    return None, False
