"""No process of ours outlives autotune, even one killed with SIGKILL or by the OOM killer.

On Linux a child asks the kernel to SIGKILL it when its parent exits (PR_SET_PDEATHSIG): the python
engine's worker asks for itself, llama-server between fork and exec. Where that is not available
(macOS), or if the parent died before the request, a record per running server under
`<AUTOTUNE_HOME>/servers/` (its pid and start time, ours too) lets the next run find the server of a
dead run, stop it and say so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from autotune.settings import home_dir

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when `parent_pid` (its parent) exits; exit at once if
    it already has. A no-op where the kernel has no such request."""
    if _libc is None:
        return
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the request: nobody would kill us
        os._exit(1)


def start_time(pid: int) -> str | None:
    """When `pid` started (clock ticks since boot, from /proc), to tell it from a later process that
    reused its number; "" where /proc is missing; None when no process has that pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "" if not Path("/proc/self").exists() else None
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of stat: starttime


def is_running(pid: int, started: str | None) -> bool:
    """Whether the process `pid` that started at `started` (see start_time) still runs."""
    now = start_time(pid)
    return now is not None and (not started or not now or now == started)


def this_process() -> dict:
    """Who we are, in a form another run can check with `is_gone`: host, pid, start time."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": start_time(os.getpid()) or ""}


def is_gone(process: dict) -> bool:
    """Whether the process `this_process()` described ran on this host and no longer runs."""
    return process.get("host") == socket.gethostname() and not is_running(process["pid"], process.get("started"))


@dataclass(frozen=True)
class ServerRecord:
    """A llama-server we started: its process and ours, each with its start time."""

    server_pid: int
    server_started: str
    owner_pid: int
    owner_started: str
    argv: tuple[str, ...]

    @property
    def path(self) -> Path:
        return servers_dir() / f"{self.server_pid}.json"


def servers_dir() -> Path:
    return home_dir() / "servers"


def record_server(pid: int, argv: list[str]) -> ServerRecord:
    """Write the record of a server we just started (see the module's docstring)."""
    me = os.getpid()
    record = ServerRecord(pid, start_time(pid) or "", me, start_time(me) or "", tuple(argv))
    try:
        servers_dir().mkdir(parents=True, exist_ok=True)
        record.path.write_text(json.dumps({**record.__dict__, "argv": list(argv)}))
    except OSError:
        pass  # a read-only home only loses the safety net, never the measurement
    return record


def forget_server(record: ServerRecord) -> None:
    record.path.unlink(missing_ok=True)


def stop_orphaned_servers() -> list[ServerRecord]:
    """SIGKILL every recorded llama-server whose autotune is gone; return them (to be reported)."""
    stopped = []
    for path in sorted(servers_dir().glob("*.json")) if servers_dir().is_dir() else []:
        try:
            data = json.loads(path.read_text())
            record = ServerRecord(**{**data, "argv": tuple(data["argv"])})
        except (OSError, ValueError, TypeError, KeyError):
            path.unlink(missing_ok=True)
            continue
        if is_running(record.owner_pid, record.owner_started):
            continue
        if is_running(record.server_pid, record.server_started):
            try:
                os.killpg(record.server_pid, signal.SIGKILL)  # the server leads its own process group
            except (ProcessLookupError, PermissionError):
                pass
            else:
                stopped.append(record)
        path.unlink(missing_ok=True)
    return stopped


def descendant_pids(pid: int) -> list[int]:
    """Process ids of `pid`'s children, their children and so on, read from /proc (none without it)."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])  # the field after (comm) is the ppid
    found: list[int] = []
    generation = [pid]
    while generation:
        generation = [child for child, parent in parents.items() if parent in generation]
        found += generation
    return found
