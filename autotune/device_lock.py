"""One measurement per device at a time on a machine: throughput figures must not share a GPU.

Each device this process would use (the GPUs in CUDA_VISIBLE_DEVICES, else every GPU nvidia-smi
lists, else the CPU) has a lock file; a worker holds the locks of its devices while it measures and
waits its turn otherwise. `flock` locks die with their process, so a killed worker never leaves a
device locked.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

LOCK_DIR_ENV = "AUTOTUNE_LOCK_DIR"


def device_ids() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return [f"gpu-{d.strip()}" for d in visible.split(",") if d.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            out = subprocess.run([smi, "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=20, check=True).stdout
            uuids = [line.strip() for line in out.splitlines() if line.strip()]
            if uuids:
                return [f"gpu-{u}" for u in uuids]
        except (OSError, subprocess.SubprocessError):
            pass
    return ["cpu"]


@contextmanager
def device_lock(on_wait: Callable[[str], None] = lambda device: None) -> Iterator[None]:
    """Hold every device's lock (in a fixed order, so two workers cannot deadlock)."""
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
        yield
    finally:
        for handle in reversed(handles):
            handle.close()  # closing releases the flock
