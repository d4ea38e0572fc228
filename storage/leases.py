"""Leases: which process searches one (model, hardware key, objective, concurrency) now.

A search claims its key's lease before it measures and holds it until its answer is stored, so two
searches of one key never measure at once and a fleet of workers sharing one database takes the keys
as a work queue (autotune.search.work_queue). The claim is one atomic step in the database: a row per
held lease under a unique key, read with `SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL and inside a
`BEGIN IMMEDIATE` transaction on SQLite, inserted where there is none. The holder renews it with a
heartbeat from a background thread; a lease whose holder missed MISSED_BEATS beats (by the database's
clock, so hosts whose clocks differ agree), or whose holder is a process of this host that is gone, is
taken over, and the new holder is told whose it was.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import sqlalchemy.exc
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from autotune.engines.orphans import is_gone, this_process
from autotune.errors import LeaseHeld, LeaseLost, StorageError
from storage.database import SchemaDatabase
from storage.schema import LeaseRow

#: beats a holder may miss before its lease can be taken over
MISSED_BEATS = 3
#: the longest a waiting claim sleeps between two looks
MAX_POLL_S = 2.0


@dataclass(frozen=True)
class LeaseKey:
    """What one lease covers: the search of `model` on `hardware` for `objective` at `concurrency` streams."""

    model: str
    hardware: str
    objective: str = "decode"
    concurrency: int = 1

    def describe(self) -> str:
        return (
            f"{self.model} on {self.hardware}"
            + ("" if self.objective == "decode" else f" ({self.objective})")
            + ("" if self.concurrency == 1 else f" at {self.concurrency} streams")
        )


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a lease, and since when."""

    host: str
    pid: int
    since: datetime

    def describe(self) -> str:
        return f"autotune pid {self.pid} on {self.host} since {self.since:%Y-%m-%d %H:%M:%S} UTC"


class Lease:
    """A lease this process holds: `with lease:` beats every `beat_s` in a background thread and releases
    it at the end. `taken_from`: the holder whose expired lease this one took over."""

    def __init__(
        self, store: "LeaseStore", key: LeaseKey, row_id: int, token: str, beat_s: float, taken_from: Holder | None
    ):
        self.key, self.beat_s, self.taken_from = key, beat_s, taken_from
        self._store, self._row_id, self._token = store, row_id, token
        self._stop = threading.Event()
        self._lost = False
        self._beats = threading.Thread(target=self._beat, name=f"lease heartbeat of {key.describe()}", daemon=True)

    def __enter__(self) -> Lease:
        self._beats.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._beats.join()
        self._store.release(self._row_id, self._token)

    def check(self) -> None:
        """Raise LeaseLost when another process took this lease over (this one missed its beats)."""
        if self._lost or not self._store.holds(self._row_id, self._token):
            self._lost = True
            raise LeaseLost(
                f"the lease of {self.key.describe()} was taken over after this process missed "
                f"{MISSED_BEATS} heartbeats of {self.beat_s:g} s: what it measured is not stored"
            )

    def _beat(self) -> None:
        while not self._stop.wait(self.beat_s):
            try:
                if not self._store.renew(self._row_id, self._token):
                    self._lost = True
                    return
            except StorageError:
                continue  # the database is away for a moment: beat again next time, the lease holds 3 beats


class LeaseStore(SchemaDatabase):
    """The leases in the database at a SQLAlchemy URL (the studies' database); raises StorageError."""

    what = "leases"

    def __init__(self, url: str):
        super().__init__(url, begin_immediate=True)

    def try_claim(self, key: LeaseKey, *, beat_s: float) -> Lease | None:
        """The lease of `key`, or None where another live process holds it (skip it, come back later)."""
        lease, _ = self._attempt(key, beat_s)
        return lease

    def claim(
        self,
        key: LeaseKey,
        *,
        beat_s: float,
        wait: bool,
        on_wait: Callable[[Holder | None], None] = lambda holder: None,
    ) -> Lease:
        """The lease of `key`: while another process holds it, wait (`on_wait` hears each new holder once),
        or, without `wait`, raise LeaseHeld saying whose it is and since when."""
        told: object = ()
        while True:
            lease, holder = self._attempt(key, beat_s)
            if lease is not None:
                return lease
            if not wait:
                raise LeaseHeld(held_line(key, holder))
            if holder != told:
                on_wait(holder)
                told = holder
            time.sleep(min(beat_s, MAX_POLL_S))

    def holder(self, key: LeaseKey) -> Holder | None:
        """Who holds the lease of `key` now (None: nobody)."""
        with self._session() as session:
            row = session.scalars(select(LeaseRow).where(*_of(key))).one_or_none()
            return None if row is None else _holder(row)

    def renew(self, row_id: int, token: str) -> bool:
        """One heartbeat; False when the lease is no longer this token's."""
        with self._session() as session:
            now = self._now(session)
            result = session.execute(
                update(LeaseRow).where(LeaseRow.id == row_id, LeaseRow.token == token).values(heartbeat_at=now)
            )
            return result.rowcount == 1

    def holds(self, row_id: int, token: str) -> bool:
        with self._session() as session:
            return (
                session.scalars(select(LeaseRow.id).where(LeaseRow.id == row_id, LeaseRow.token == token)).one_or_none()
                is not None
            )

    def release(self, row_id: int, token: str) -> None:
        """Give the lease up (nothing happens where another process took it over)."""
        with self._session() as session:
            session.execute(delete(LeaseRow).where(LeaseRow.id == row_id, LeaseRow.token == token))

    def _attempt(self, key: LeaseKey, beat_s: float) -> tuple[Lease | None, Holder | None]:
        """One atomic claim: insert the lease where none is held, take it over where its holder stopped
        beating; else (None, its holder)."""
        token = uuid.uuid4().hex
        me = this_process()
        with self._session() as session:
            now = self._now(session)
            mine = dict(
                token=token,
                host=me["host"],
                pid=me["pid"],
                process_started=me["started"],
                since=now,
                heartbeat_at=now,
                beat_s=beat_s,
            )
            row = session.scalars(select(LeaseRow).where(*_of(key)).with_for_update(skip_locked=True)).one_or_none()
            if row is None:
                try:
                    with session.begin_nested():
                        row = LeaseRow(
                            model=key.model,
                            hardware=key.hardware,
                            objective=key.objective,
                            concurrency=key.concurrency,
                            **mine,
                        )
                        session.add(row)
                except sqlalchemy.exc.IntegrityError:  # held: locked by a claim under way, or inserted meanwhile
                    held = session.scalars(select(LeaseRow).where(*_of(key))).one_or_none()
                    return None, None if held is None else _holder(held)
                claimed = (row.id, None)
            elif _expired(row, now):
                claimed = (row.id, _holder(row))
                for name, value in mine.items():
                    setattr(row, name, value)
            else:
                return None, _holder(row)
        row_id, taken_from = claimed
        return Lease(self, key, row_id, token, beat_s, taken_from), None

    def _now(self, session: Session) -> datetime:
        """The database's clock where it is a server (every host compares beats with one clock)."""
        if self.backend == "sqlite":
            return datetime.now(timezone.utc)  # a file: the clock of the one host that writes it
        return session.scalar(select(func.now())).astimezone(timezone.utc)


def held_line(key: LeaseKey, holder: Holder | None) -> str:
    """The one line that says a key is held: whose lease and since when."""
    return f"{key.describe()} is being searched by {holder.describe() if holder else 'another autotune process'}"


def _of(key: LeaseKey) -> tuple:
    return (
        LeaseRow.model == key.model,
        LeaseRow.hardware == key.hardware,
        LeaseRow.objective == key.objective,
        LeaseRow.concurrency == key.concurrency,
    )


def _holder(row: LeaseRow) -> Holder:
    return Holder(row.host, row.pid, row.since)


def _expired(row: LeaseRow, now: datetime) -> bool:
    """Its holder missed MISSED_BEATS beats, or is a process of this host that no longer runs."""
    silent = now - row.heartbeat_at > timedelta(seconds=MISSED_BEATS * row.beat_s)
    return silent or is_gone({"host": row.host, "pid": row.pid, "started": row.process_started})
