"""Processes in tests: which llama-server processes a test left behind (found in /proc), autotune
started as a terminal or a background script would start it, and the timed lines of its output."""

from __future__ import annotations

import os
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
    return subprocess.Popen([sys.executable, "-c", _EXEC_AUTOTUNE, sigint, *args], env=env, text=True,
                            start_new_session=True, **popen)


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
    process = start_autotune(args, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    return process, LineLog(process.stderr)
