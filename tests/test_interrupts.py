"""Stop signals in this very process: real signals, the real handler.

Each test sets the dispositions it starts from, whatever the runner inherited: a background job starts
with SIGINT ignored and `nohup` ignores SIGHUP, and `handle_stop_signals` rightly leaves an ignored
signal ignored."""

from __future__ import annotations

import os
import signal

import pytest

from autotune.interrupts import STOP_SIGNALS, Interrupted, deferred, handle_stop_signals, held

#: what a process started from a terminal has: Python's KeyboardInterrupt for SIGINT, the others' defaults
DEFAULT_DISPOSITIONS = {
    signum: signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL for signum in STOP_SIGNALS
}


@pytest.fixture
def default_dispositions():
    """Each stop signal at its default disposition for the test; what the runner had is restored after."""
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum, disposition in DEFAULT_DISPOSITIONS.items():
        signal.signal(signum, disposition)
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.fixture
def stop_signals_handled(default_dispositions):
    handle_stop_signals()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_each_stop_signal_raises_a_keyboard_interrupt_that_knows_its_exit_code(stop_signals_handled, signum):
    with pytest.raises(KeyboardInterrupt) as raised:
        os.kill(os.getpid(), signum)
        for _ in range(1000):  # the handler runs between two bytecodes of this loop
            pass
    assert isinstance(raised.value, Interrupted)
    assert raised.value.exit_code == {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}[signum]


def test_a_signal_inside_deferred_is_raised_when_the_outermost_block_ends(stop_signals_handled):
    reached = []
    with pytest.raises(Interrupted) as raised:
        with deferred():
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):
                    pass
                reached.append("inner end")
            reached.append("outer end")
    assert reached == ["inner end", "outer end"]
    assert raised.value.signum == signal.SIGTERM


def test_a_signal_held_in_a_callback_waits_for_the_next_deferred_block(stop_signals_handled):
    with held():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
    for _ in range(1000):  # outside any block, nothing is raised: the signal is held, not lost
        pass
    with pytest.raises(Interrupted):
        with deferred():
            pass


def test_a_signal_the_parent_ignored_stays_ignored(default_dispositions):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    handle_stop_signals()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    handler = signal.getsignal(signal.SIGTERM)  # the others are autotune's
    assert handler not in (signal.SIG_DFL, signal.SIG_IGN) and signal.getsignal(signal.SIGINT) is handler
