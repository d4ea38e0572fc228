"""Whether a race can keep one llama-server per configuration running at once.

Racing prompt by prompt (each prompt's configurations measured seconds apart) needs every entrant's
server loaded together. On a GPU each server holds its own copy of the weights and its own CUDA context
on every GPU it uses, so the servers' weights, contexts and CUDA contexts must fit the GPUs' free memory;
on the CPU llama-server maps the weights from the file and the servers share them in the page cache, so
the weights count once and each server adds its contexts. Either way AUTOTUNE_MEMORY_BUDGET_GIB caps the
free memory counted, as it does for the in-process engine (autotune.engines.python).

What is free is decided safely: where nvidia-smi lists GPUs this process can use but not their free
memory (under MIG it prints [N/A]; its query fails or hangs), nothing is taken to be free and the race runs
one llama-server at a time, with a line saying why (`FreeMemory.note`). Only where nvidia-smi is absent or
lists no GPU this process can use do /proc/meminfo and the CPU's rules decide.
Only GGUF headers and `nvidia-smi` / /proc/meminfo are read: nothing of llama.cpp loads in this process.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from autotune.engines.memory import GIB, ContextShape, estimate
from autotune.hardware import cuda_visible, cuda_visible_entries, listed_gpus
from autotune.spec.config import SpecConfig

__all__ = ["CUDA_CONTEXT_BYTES", "FREE_MEMORY_ARGS", "FreeMemory", "fits_at_once", "free_memory"]

#: the share of free memory the servers may take (llama.cpp's buffers differ from the estimate)
HEADROOM = 0.8
UBATCH = 512
MIB = 1024**2
#: GPU memory each llama-server takes on each GPU it uses besides the buffers `estimate` counts: its CUDA
#: context and cuBLAS's handle and workspace. The context is the driver's state and the kernels loaded, and
#: grows with the GPU's SMs: cudaMemGetInfo (which creates it) took 555 MiB on an RTX PRO 6000 Blackwell
#: (188 SMs) and 107 MiB on an RTX 4060 Ti (34 SMs) in ggml-org/llama.cpp#23604; PyTorch's maintainers give
#: about 300 MiB since CUDA 11.7 loads kernels lazily (pytorch/pytorch#107667). cuBLAS's workspace is 32 MiB on
#: Hopper and 4 MiB before it (cublasSetWorkspace in the cuBLAS reference). 600 MiB covers the largest measured
#: card with its workspace; an H100's 132 SMs take less, and HEADROOM covers the rest.
CUDA_CONTEXT_BYTES = 600 * MIB
#: the query of the GPUs' free memory (MiB), one `index, uuid, free` row a GPU
FREE_MEMORY_ARGS = ("--query-gpu=index,uuid,memory.free", "--format=csv,noheader,nounits")
SMI_TIMEOUT_S = 20.0
BUDGET_VARIABLE = "AUTOTUNE_MEMORY_BUDGET_GIB"
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class FreeMemory:
    """What the servers may take: `free` bytes (None: not known, so one server at a time, `note` saying why),
    on `gpus` GPUs (each server makes a CUDA context on each) or, with `gpus` 0, in host memory."""

    free: int | None
    gpus: int
    note: str | None = None


class _NotKnown(Exception):
    """Why the free memory is not known."""


def free_memory() -> FreeMemory:
    """Free memory where the servers' weights go now: the visible GPUs' (nvidia-smi) when it lists any, else
    the host's (MemAvailable), at most AUTOTUNE_MEMORY_BUDGET_GIB."""
    try:
        budget = _budget()
        gpus_free_mib = _gpus_free_mib()
        free = sum(gpus_free_mib) * MIB if gpus_free_mib else _host_available()
    except _NotKnown as why:
        return FreeMemory(None, 0, f"race: {why}, so the servers are not loaded together: one llama-server at a time")
    return FreeMemory(free if budget is None else min(free, budget), len(gpus_free_mib))


def fits_at_once(configs: Sequence[SpecConfig], free: FreeMemory, *, context_size: int) -> bool:
    """Whether one llama-server per configuration fits in `free` at the same time (never where it is not known)."""
    if free.free is None:
        return False
    on_gpu = free.gpus > 0
    per_server = []
    files: set[Path] = set()
    for config in configs:
        models = [config.target] + ([config.draft] if config.draft else [])
        contexts = [ContextShape(m, context_size, UBATCH) for m in models]
        try:
            per_server.append(estimate(models if on_gpu else [], contexts) + free.gpus * CUDA_CONTEXT_BYTES)
        except (OSError, ValueError, KeyError, TypeError):
            return False  # a header estimate() cannot read: do not risk it
        files.update(models)
    shared = 0 if on_gpu else estimate(sorted(files), [])
    return shared + sum(per_server) <= HEADROOM * free.free


def _budget() -> int | None:
    """AUTOTUNE_MEMORY_BUDGET_GIB in bytes (None: unset): the most free memory counted, for a device shared
    with other work. A value that is no number is not guessed at."""
    value = os.environ.get(BUDGET_VARIABLE)
    if value is None:
        return None
    try:
        return int(float(value) * GIB)
    except (ValueError, OverflowError):
        raise _NotKnown(f"{BUDGET_VARIABLE}={value!r} is not a number of GiB") from None


def _gpus_free_mib() -> list[int]:
    """The free MiB of each GPU this process can use (CUDA_VISIBLE_DEVICES as CUDA reads it); none where
    nvidia-smi is absent or lists none. Raises _NotKnown where it lists GPUs but not their free memory."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, *FREE_MEMORY_ARGS], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=True
        ).stdout
    except subprocess.TimeoutExpired:
        # a hung nvidia-smi is a driver that is there and stuck: asking it to list the GPUs would hang as long
        raise _NotKnown(f"nvidia-smi did not answer within {SMI_TIMEOUT_S:g} s") from None
    except subprocess.CalledProcessError as exc:
        out, failure = "", " ".join([f"exit {exc.returncode}", *(exc.stderr or "").strip().splitlines()[-1:]])
    except OSError as exc:
        out, failure = "", str(exc)
    else:
        failure = "no `index, uuid, memory.free` row"
    rows = [
        {"index": int(index), "uuid": uuid.strip(), "free": free.strip()}
        for index, uuid, free in (line.split(",") for line in out.splitlines() if line.count(",") == 2)
        if _DIGITS.fullmatch(index.strip())
    ]
    listed = rows or listed_gpus()  # where the query failed, the GPUs' own query says whether there are any
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = cuda_visible(listed, setting)
    if not shown:
        if listed and any(entry.startswith("MIG-") for entry in cuda_visible_entries(setting) or ()):
            raise _NotKnown("CUDA_VISIBLE_DEVICES names a MIG instance, whose free memory nvidia-smi's GPU query lacks")
        return []  # no GPU, or CUDA_VISIBLE_DEVICES hides them all (-1): the servers run on the CPU
    if not rows:
        raise _NotKnown(f"nvidia-smi lists the GPUs but its free-memory query failed ({failure})")
    for gpu in shown:
        if not _DIGITS.fullmatch(gpu["free"]):
            raise _NotKnown(
                f"nvidia-smi lists GPU {gpu['index']} but prints {gpu['free'] or 'nothing'} as its free memory"
            )
    return [int(gpu["free"]) for gpu in shown]


def _host_available() -> int:
    """MemAvailable of /proc/meminfo, in bytes."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    raise _NotKnown("the host's free memory is not known (no MemAvailable in /proc/meminfo)")
