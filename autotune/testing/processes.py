"""Which llama-server processes a test left behind: children of this process, found in /proc."""

from __future__ import annotations

import os
from pathlib import Path


def our_llama_servers() -> set[int]:
    """Pids of the llama-server processes whose parent is this process."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if comm == "llama-server" and ppid == os.getpid():
            pids.add(int(entry))
    return pids
