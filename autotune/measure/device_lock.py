"""One measurement per device at a time on a machine: throughput figures must not share a GPU.

Each device this process would use (the GPUs nvidia-smi lists, as CUDA_VISIBLE_DEVICES selects them
with the rule the hardware key uses, autotune.hardware.cuda_visible; else the CPU) has a lock file; a
worker holds the locks of its devices while it measures and waits its turn otherwise. `flock` locks
die with their process, so a killed worker never leaves a device locked.

A search holds the lock from its first measurement to its last (the predicted search from the
baseline to the race's last prompt), and the phases inside take it again: a nested `device_lock` in
the holding process passes straight through (a second flock of the same file would wait for itself).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from autotune.hardware import cuda_visible, cuda_visible_entries, listed_gpus

LOCK_DIR_ENV = "AUTOTUNE_LOCK_DIR"

_holding = False  # whether this process holds its devices' locks


def device_ids() -> list[str]:
    """A lock name per visible device: `gpu-<uuid>` (one name per GPU, whether CUDA_VISIBLE_DEVICES
    names it by index or by UUID); without nvidia-smi, `gpu-<entry>` per CUDA_VISIBLE_DEVICES entry;
    else `cpu`."""
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = listed_gpus()
    if gpus:
        return [f"gpu-{g['uuid'] or g['index']}" for g in cuda_visible(gpus, setting)] or ["cpu"]
    return [f"gpu-{entry}" for entry in cuda_visible_entries(setting) or [] if entry] or ["cpu"]


@contextmanager
def device_lock(on_wait: Callable[[str], None] = lambda device: None) -> Iterator[None]:
    """Hold every device's lock (in a fixed order, so two workers cannot deadlock); inside a block that
    holds them already, pass through."""
    global _holding
    if _holding:
        yield
        return
    folder = Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "autotune-locks")
    folder.mkdir(parents=True, exist_ok=True)
    handles = []
    try:
        for device in sorted(device_ids()):
            handle = open(folder / f"{device}.lock", "a+")
            handles.append(handle)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                on_wait(device)
                fcntl.flock(handle, fcntl.LOCK_EX)
        _holding = True
        yield
    finally:
        _holding = False
        for handle in reversed(handles):
            handle.close()  # closing releases the flock
