"""Persistence: where studies live and how to open them.

Every study goes through Optuna's RDB storage, so any SQLAlchemy URL Optuna accepts works
unchanged (SQLite by default, PostgreSQL for a fleet). SQLite files are switched to WAL with a
long busy timeout so that several `autotune search` processes can write to one file.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import optuna
import sqlalchemy.exc
from sqlalchemy.engine import make_url

from autotune.errors import StorageError
from autotune.settings import STORAGE_ENV, default_storage_url

SQLITE_BUSY_TIMEOUT_S = 60


def resolve_storage_url(option: str | None = None) -> str:
    """--storage, else AUTOTUNE_STORAGE, else the SQLite file in autotune's data directory."""
    return option or os.environ.get(STORAGE_ENV) or default_storage_url()


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """Open (creating if needed) the Optuna storage at `url`, or raise StorageError saying why not."""
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
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, RuntimeError) as exc:
        reason = str(exc).splitlines()[0]
        raise StorageError(f"cannot open storage {parsed.render_as_string(hide_password=True)}: {reason}") from exc


def _prepare_sqlite_file(database: str | None) -> None:
    """Create the file's folder, prove it is writable, and switch the database to WAL."""
    if not database or database == ":memory:":
        return
    path = Path(database)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S) as connection:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("CREATE TABLE IF NOT EXISTS autotune_write_check (x INTEGER)")
            connection.execute("DROP TABLE autotune_write_check")
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot write the database {path}: {exc}; pass a writable --storage URL") from exc
