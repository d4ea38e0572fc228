"""Ctrl-C, SIGTERM and SIGHUP end a run the same way, and never in the middle of a storage write.

`handle_stop_signals()` (the command line calls it once) makes each of the three signals raise
`Interrupted`, a KeyboardInterrupt that remembers its signal, so every `except KeyboardInterrupt`
path (the trial marked interrupted, its llama-server and the worker stopped) serves all three and
the command exits with 128 + the signal's number. A signal the parent ignored stays ignored: a job
started with `nohup` or from a shell script in the background (SIGINT ignored) does what its parent
asked, and SIGTERM still stops it.

Python raises a signal's exception between any two bytecodes. Inside `deferred()` (a SQLAlchemy
session, a process being started whose handle is not stored yet, a llama.cpp load whose log
callback would swallow the exception) the signal is held and raised as the outermost `deferred()`
exits; while a llama.cpp log callback runs it is held (`held()`) for the next `deferred()` to raise. Only the main thread receives signals,
so the depth is per thread and only the main thread's counts.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; `exit_code` is the shell's 128 + its number."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_state = threading.local()
_pending: list[int] = []  # the signal held while the main thread was inside deferred()


def _depth() -> int:
    return getattr(_state, "depth", 0)


def _on_signal(signum: int, frame) -> None:
    if _depth() > 0:
        if not _pending:
            _pending.append(signum)
        return
    raise Interrupted(signum)


def handle_stop_signals() -> None:
    """Raise `Interrupted` on SIGINT, SIGTERM and SIGHUP, except those the parent set to be ignored."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _on_signal)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold stop signals until the block ends; the held one is raised as the outermost block exits."""
    _state.depth = _depth() + 1
    try:
        yield
    finally:
        _state.depth -= 1
        if _state.depth == 0 and _pending and threading.current_thread() is threading.main_thread():
            raise Interrupted(_pending.pop())


@contextmanager
def held() -> Iterator[None]:
    """Hold stop signals during the block without raising at its end: for a callback from C, where an
    exception is printed and dropped. The held signal is raised by the next `deferred()` to exit."""
    _state.depth = _depth() + 1
    try:
        yield
    finally:
        _state.depth -= 1
