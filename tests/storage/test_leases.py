"""Leases on real databases (SQLite in a tmpdir, a real PostgreSQL), claimed by real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

import storage
from autotune.errors import LeaseHeld, LeaseLost
from storage.leases import MISSED_BEATS, LeaseKey, LeaseStore

KEY = LeaseKey("tiny", "CPU Test")

#: a process that claims KEY without waiting, says what it got, then holds it until stdin closes; given a
#: barrier (a pipe's read end, its third argument), it first opens the database, says "ready" and waits there
#: until the pipe's write end closes, which wakes every process waiting on it at once
HOLDER = textwrap.dedent("""
    import os, sys
    from autotune.errors import LeaseLost
    from storage.leases import LeaseKey, LeaseStore
    url, beat_s, barrier = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    store = LeaseStore(url)
    if barrier >= 0:
        print("ready", flush=True)
        assert os.read(barrier, 1) == b""
    lease = store.try_claim(LeaseKey("tiny", "CPU Test"), beat_s=beat_s)
    print("won" if lease else "held", flush=True)
    if lease:
        with lease:
            sys.stdin.read()
            try:
                lease.check()
                print("still mine", flush=True)
            except LeaseLost as exc:
                print(f"lost: {exc}", flush=True)
""")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'leases.db'}"
    return request.getfixturevalue("fresh_postgres")


def holder(url: str, beat_s: float = 60, barrier: int = -1) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, str(beat_s), str(barrier)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        pass_fds=() if barrier < 0 else (barrier,),
    )


@contextlib.contextmanager
def start_barrier():
    """A pipe whose read end the processes started inside are given (`pass_fds`) and block on once ready;
    `release()` closes the write end (this process's only: os.pipe's ends are not inherited), which wakes
    them all at once. Release before waiting for them, on failure too; on leaving, both ends are closed."""
    read_end, write_end = os.pipe()
    ends = {"read": read_end, "write": write_end}

    def release() -> None:
        if "write" in ends:
            os.close(ends.pop("write"))

    try:
        yield read_end, release
    finally:
        for end in ends.values():
            os.close(end)


def test_of_processes_claiming_at_the_same_instant_exactly_one_wins(url):
    """Each process has opened the database and waits at one barrier; released together, they claim at
    once however slow the box, and one wins: the others, refused while it holds the lease, say so."""
    LeaseStore(url).close()  # the tables exist before the race to claim
    with start_barrier() as (barrier, release):
        claimers = [holder(url, barrier=barrier) for _ in range(5)]
        try:
            assert [c.stdout.readline().strip() for c in claimers] == ["ready"] * 5  # all open, none claimed
            release()
            answers = sorted(c.stdout.readline().strip() for c in claimers)
        finally:
            release()
            for c in claimers:
                c.stdin.close()
                c.wait(timeout=30)
    assert answers == ["held"] * 4 + ["won"]
    assert LeaseStore(url).holder(KEY) is None  # the winner released it on its way out


OPENER = textwrap.dedent("""
    import os, sys
    from storage.leases import LeaseStore
    url, barrier = sys.argv[1], int(sys.argv[2])
    print("ready", flush=True)
    assert os.read(barrier, 1) == b""
    LeaseStore(url).close()
    print("opened", flush=True)
""")


def test_processes_opening_a_new_sqlite_file_at_the_same_instant_all_open_it(tmp_path):
    """Every interpreter has imported and waits at one barrier; released together, they all open the file
    that none has created yet, and all succeed."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    with start_barrier() as (barrier, release):
        openers = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, url, str(barrier)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                pass_fds=(barrier,),
            )
            for _ in range(6)
        ]
        try:
            assert [opener.stdout.readline().strip() for opener in openers] == ["ready"] * 6
            assert not (tmp_path / "new.db").exists()  # none has opened it before the barrier
        finally:
            release()
            said = [opener.communicate(timeout=60) for opener in openers]
    assert [out.strip() for out, _ in said] == ["opened"] * 6, [err.strip().splitlines()[-1:] for _, err in said]


#: a process that holds a new file's write lock until its stdin closes
RESERVING = textwrap.dedent("""
    import sqlite3, sys
    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("CREATE TABLE first_writer (x INTEGER)")
    print("reserved", flush=True)
    sys.stdin.read()
    connection.execute("COMMIT")
""")


class WriterDoneOnFirstRetry:
    """`random` for storage's switch to WAL, which draws each retry's pause from it: the first retry
    (the opener was refused, and waits) lets the writer finish."""

    def __init__(self, writer: subprocess.Popen):
        self.writer, self.retries = writer, 0

    def uniform(self, low: float, high: float) -> float:
        self.retries += 1
        if self.retries == 1:
            self.writer.stdin.close()
        return low


def test_a_new_sqlite_file_another_process_is_writing_is_opened_once_it_is_done(tmp_path, monkeypatch):
    """SQLite refuses the switch to WAL at once, without waiting, while another process holds the file's
    write lock (as one opening it a moment earlier does); the opener waits for it instead."""
    path = tmp_path / "new.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", RESERVING, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    retrying = WriterDoneOnFirstRetry(writer)
    monkeypatch.setattr(storage, "random", retrying)
    try:
        assert writer.stdout.readline().strip() == "reserved"
        LeaseStore(f"sqlite:///{path}").close()
    finally:
        if not writer.stdin.closed:
            writer.stdin.close()
        writer.wait(timeout=30)
    assert retrying.retries >= 1  # refused while the writer held the file, then opened once it was done
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_held_lease_is_refused_without_waiting_and_says_whose_it_is(url):
    held = holder(url)
    try:
        assert held.stdout.readline().strip() == "won"
        with pytest.raises(LeaseHeld) as refused:
            LeaseStore(url).claim(KEY, beat_s=1, wait=False)
        assert LeaseHeld.exit_code == 3
        assert f"tiny on CPU Test is being searched by autotune pid {held.pid} on {socket.gethostname()} since " in str(
            refused.value
        )
    finally:
        held.stdin.close()
        held.wait(timeout=30)


def test_a_waiting_claim_says_whose_lease_once_and_gets_it_when_released(url):
    held = holder(url)
    assert held.stdout.readline().strip() == "won"
    heard = []

    def waiting(whose) -> None:  # the claim was refused and waits: now the holder lets go
        heard.append(whose)
        held.stdin.close()

    with LeaseStore(url).claim(KEY, beat_s=0.5, wait=True, on_wait=waiting) as lease:
        assert lease.taken_from is None  # released, not taken over
    held.wait(timeout=30)
    assert held.stdout.readline().strip() == "still mine"  # the holder's until it let go
    assert [h.pid for h in heard] == [held.pid]


def test_a_silent_holder_loses_its_lease_after_missed_beats_and_the_takeover_names_it(url):
    held = holder(url, beat_s=0.5)
    try:
        assert held.stdout.readline().strip() == "won"
        held.send_signal(signal.SIGSTOP)  # alive (its pid runs) but silent, as a machine cut off the network
        store = LeaseStore(url)
        assert store.try_claim(KEY, beat_s=0.5) is None  # not yet: it beat just now
        time.sleep(MISSED_BEATS * 0.5 + 1.0)
        with store.try_claim(KEY, beat_s=0.5) as lease:
            assert lease.taken_from is not None and lease.taken_from.pid == held.pid
            assert lease.taken_from.host == socket.gethostname()
            held.send_signal(signal.SIGCONT)
            held.stdin.close()
            assert held.stdout.readline().startswith("lost: the lease of tiny on CPU Test was taken over")
            assert store.holder(KEY).pid != held.pid  # the old holder's exit did not release ours
            lease.check()  # still ours
    finally:
        held.send_signal(signal.SIGCONT)
        held.wait(timeout=30)


def test_a_killed_holder_on_this_host_frees_its_lease_at_once(url):
    held = holder(url, beat_s=600)  # its beats alone would hold the lease for half an hour
    assert held.stdout.readline().strip() == "won"
    held.kill()
    held.wait(timeout=30)
    with LeaseStore(url).try_claim(KEY, beat_s=1) as lease:
        assert lease.taken_from.pid == held.pid


def test_a_lease_taken_over_refuses_its_old_holder(url):
    store = LeaseStore(url)
    first = store.try_claim(KEY, beat_s=0.2)
    time.sleep(MISSED_BEATS * 0.2 + 0.5)  # never entered: no beats
    with store.try_claim(KEY, beat_s=0.2) as second:
        assert second.taken_from is not None
        with pytest.raises(LeaseLost):
            first.check()
        second.check()
