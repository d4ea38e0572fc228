"""llama.cpp killed by a fatal signal, said in one line: the signal by name, which binary or library,
and the reinstall that fixes the usual cause.

The usual cause of SIGILL, and of a SIGSEGV in `libggml-cpu` on load or on the first decode, is a
build compiled for instructions this machine refuses: a native build on a VM that reports AMX but
faults on its first `ldtilecfg`, or a wheel built on another CPU and reused from pip's cache.
`python -m autotune.install --rebuild` compiles both llama.cpp packages for this machine, never AMX.
"""

from __future__ import annotations

import signal

REBUILD_COMMAND = "python -m autotune.install --rebuild"
#: the signals a broken build dies of, with what each means
FATAL_SIGNALS = {
    signal.SIGILL: "illegal instruction",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "arithmetic exception",
}
_CAUSE = {
    signal.SIGILL: "it ran an instruction this CPU refuses (built for another CPU, or AMX on a VM that reports it)",
}
_DEFAULT_CAUSE = "a build for another CPU faults this way (AMX on a VM that reports it), as does a corrupt model file"


def fatal_signal(returncode: int | None) -> signal.Signals | None:
    """The fatal signal a process died of: a negative return code (Python's), or 128 + N (a shell's)."""
    if returncode is None:
        return None
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    try:
        found = signal.Signals(number)
    except ValueError:
        return None
    return found if found in FATAL_SIGNALS else None


def crash_line(what: str, signum: signal.Signals, when: str) -> str:
    """`llama-server (/x/llama-server) died of SIGILL (illegal instruction) while loading m.gguf: …; rebuild …`"""
    cause = _CAUSE.get(signum, _DEFAULT_CAUSE)
    return (
        f"{what} died of {signum.name} ({FATAL_SIGNALS[signum]}) {when}: {cause}; "
        f"rebuild llama.cpp for this machine: {REBUILD_COMMAND}"
    )
