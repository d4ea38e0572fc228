"""Processes in tests: which llama-server processes a test left behind (found in /proc), the end of
processes that are not the test's children (waited on, never timed), autotune started as a terminal or a
background script would start it, and the timed lines of its output."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
import time
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


#: How long `wait_for_exits` waits before it gives up: a bound on a hang (a test must end), never the
#: assertion, which is that the processes ended, whenever that was.
HANG_GUARD_S = 600.0


def watch_exits(pids) -> dict[int, int | None]:
    """A pidfd for each of `pids` (processes that need not be this one's children: a worker or a server
    that autotune started), opened now, while the pid still names that process; None for one that has
    already ended. `wait_for_exits` waits on them; it closes them."""
    watched: dict[int, int | None] = {}
    for pid in pids:
        try:
            watched[pid] = os.pidfd_open(pid)
        except ProcessLookupError:
            watched[pid] = None
    return watched


def wait_for_exits(watched: dict[int, int | None], hang_guard_s: float = HANG_GUARD_S) -> list[int]:
    """Wait until every process `watch_exits` watched has ended (the kernel makes its pidfd readable when
    it does: an event, not a poll of the clock), and close the pidfds. Returns the pids still running,
    none unless the wait ran into `hang_guard_s`."""
    poller = select.poll()
    waiting = {fd: pid for pid, fd in watched.items() if fd is not None}
    for fd in waiting:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + hang_guard_s
    try:
        while waiting and time.monotonic() < deadline:
            for fd, _ in poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                poller.unregister(fd)
                del waiting[fd]
        return sorted(waiting.values())
    finally:
        for fd in watched.values():
            if fd is not None:
                os.close(fd)
        watched.clear()


_EXEC_AUTOTUNE = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[1] == 'ignore' else signal.SIG_DFL)\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'autotune', *sys.argv[2:]])\n"
)


def start_autotune(args: list[str], *, env: dict, sigint: str = "default", **popen) -> subprocess.Popen:
    """`python -m autotune ARGS` in a session of its own (a signal to its group reaches it and its
    workers, as a terminal's Ctrl-C does), with SIGHUP and SIGTERM at their defaults and SIGINT at its
    default or ignored (`sigint="ignore"`, as a shell script's background job has it), whatever the test
    runner inherited (`nohup` ignores SIGHUP, a background job SIGINT): the dispositions are set, then
    autotune is exec'd in the same process, which keeps them."""
    if sigint not in ("default", "ignore"):
        raise ValueError(f"sigint must be 'default' or 'ignore', not {sigint!r}")
    return subprocess.Popen(
        [sys.executable, "-c", _EXEC_AUTOTUNE, sigint, *args], env=env, text=True, start_new_session=True, **popen
    )


def process_ids_named(name: str, *, containing: str) -> list[int]:
    """Pids of processes called `name` whose command line contains `containing`."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if comm == name and containing in cmdline:
            pids.append(int(entry))
    return pids


class LineLog:
    """The lines a running process writes to one pipe, each with when it came (time.monotonic()), read
    by a thread of its own so that the pipe never fills while a test watches for a line."""

    def __init__(self, stream):
        self.lines: list[tuple[float, str]] = []
        self._closed = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_for(self, text: str, timeout_s: float) -> tuple[float, str] | None:
        """The first line containing `text` (waiting up to `timeout_s`); None if the pipe closed or time ran out."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = self.first(text)
                if found or self._closed or time.monotonic() > deadline:
                    return found
                self._changed.wait(timeout=max(0.0, deadline - time.monotonic()))

    def first(self, text: str) -> tuple[float, str] | None:
        return next(((at, line) for at, line in self.lines if text in line), None)

    def text(self) -> str:
        self._reader.join(timeout=30)
        return "\n".join(line for _, line in self.lines)


def start_logged(args: list[str]) -> tuple[subprocess.Popen, LineLog]:
    """`python -m autotune ARGS` as `start_autotune` starts it, unbuffered, with its stderr read line by line."""
    process = start_autotune(
        args, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    return process, LineLog(process.stderr)
