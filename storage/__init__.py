"""Persistence: where studies live and how to open them.

Every study goes through Optuna's RDB storage, so any SQLAlchemy URL Optuna accepts works
unchanged (SQLite by default, PostgreSQL for a fleet). SQLite files are switched to WAL with a
long busy timeout so that several `autotune search` processes can write to one file.
"""

from __future__ import annotations

import functools
import os
import random
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Callable

import optuna
import sqlalchemy.exc
from sqlalchemy.engine import make_url

from autotune.errors import StorageError
from autotune.interrupts import deferred
from autotune.settings import STORAGE_ENV, default_storage_url

SQLITE_BUSY_TIMEOUT_S = 60
OPEN_ATTEMPTS = 3


def resolve_storage_url(option: str | None = None) -> str:
    """--storage, else AUTOTUNE_STORAGE, else the SQLite file in autotune's data directory."""
    return option or os.environ.get(STORAGE_ENV) or default_storage_url()


def open_storage(
    url: str,
    *,
    heartbeat_interval_s: int | None = None,
    stale_trial_callback: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
) -> optuna.storages.RDBStorage:
    """Open (creating if needed) the Optuna storage at `url`, or raise StorageError saying why not.

    With a heartbeat, a running trial whose worker died (power loss, kill -9) is failed by the next
    worker once it has been silent for three intervals, and `stale_trial_callback` can re-queue it.
    """
    try:
        parsed = make_url(url)
    except sqlalchemy.exc.ArgumentError as exc:
        raise StorageError(f"storage URL {url!r} is not a valid SQLAlchemy URL") from exc
    engine_kwargs: dict = {}
    if parsed.get_backend_name() == "sqlite":
        _prepare_sqlite_file(parsed.database)
        engine_kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
    else:
        engine_kwargs["pool_pre_ping"] = True
    for attempt in range(1, OPEN_ATTEMPTS + 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # the heartbeat is
                return SignalSafeStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=heartbeat_interval_s,
                    grace_period=None if heartbeat_interval_s is None else 3 * heartbeat_interval_s,
                    heartbeat_stale_trial_callback=stale_trial_callback,
                )
        except (sqlalchemy.exc.SQLAlchemyError, ImportError, RuntimeError) as exc:
            unreachable = isinstance(exc, sqlalchemy.exc.OperationalError) and "connect" in str(exc).lower()
            if attempt == OPEN_ATTEMPTS or unreachable or not isinstance(exc, sqlalchemy.exc.SQLAlchemyError):
                named = exc.__cause__ if isinstance(exc, ImportError) and exc.__cause__ else exc  # the driver's name
                reason = str(named).splitlines()[0]
                raise StorageError(
                    f"cannot open storage {parsed.render_as_string(hide_password=True)}: {reason}"
                ) from exc
            time.sleep(0.5 * attempt)  # workers starting together on a new database race to create its tables


class SignalSafeStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose every call holds Ctrl-C, SIGTERM and SIGHUP until it returns.

    A KeyboardInterrupt raised inside a SQLAlchemy session leaves SQLite locked by this very process,
    so the write that marks the trial interrupted then fails with "database is locked"."""


def _holding_signals(method):
    @functools.wraps(method)
    def call(*args, **kwargs):
        with deferred():
            return method(*args, **kwargs)

    return call


for _name, _method in vars(optuna.storages.RDBStorage).items():
    if callable(_method) and not _name.startswith("__") and not isinstance(_method, (staticmethod, classmethod)):
        setattr(SignalSafeStorage, _name, _holding_signals(_method))


def _prepare_sqlite_file(database: str | None) -> None:
    """Create the file's folder, prove it is writable, and switch the database to WAL."""
    if not database or database == ":memory:":
        return
    path = Path(database)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None)
        try:
            _switch_to_wal(connection)
            # One transaction, so that processes opening a new file together never see each other's check table.
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("CREATE TABLE IF NOT EXISTS autotune_write_check (x INTEGER)")
            connection.execute("DROP TABLE autotune_write_check")
            connection.execute("COMMIT")
        finally:
            connection.close()
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot write the database {path}: {exc}; pass a writable --storage URL") from exc


def _switch_to_wal(connection: sqlite3.Connection) -> None:
    """`PRAGMA journal_mode=WAL`, retried while another process holds the file: SQLite answers that pragma
    "database is locked" at once, without its busy handler, when processes open a new file together."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.01, 0.1))  # apart, so the processes do not retry in step
