"""Presets — per (model, hardware) the best confirmed configuration — and the persistent hash cache.

`PresetStore` opens its own SQLAlchemy engine on the storage URL Optuna uses, so presets sit in the
same database as the studies they came from (SQLite or PostgreSQL alike). Queries live here; the
tables are in `storage.schema`; callers see only the `Preset` dataclass.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy.exc
from sqlalchemy import Engine, create_engine, delete, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from autotune.spec.command import format_command
from autotune.errors import ModelFileError, StorageError
from autotune.interrupts import deferred
from autotune.models.files import file_sha256
from storage import SQLITE_BUSY_TIMEOUT_S, _prepare_sqlite_file
from storage.schema import SCHEMA_VERSION, Base, FileHashRow, PresetRow, SchemaVersionRow



@dataclass(frozen=True, kw_only=True)
class Preset:
    """The best confirmed configuration of `model` on `hardware` (a key from autotune.hardware)."""

    model: str
    hardware: str
    argv: tuple[str, ...]
    tok_s: float
    baseline_tok_s: float
    speedup: float
    ci95_low: float | None = None  # of tok_s, from `autotune confirm`
    ci95_high: float | None = None
    p_value: float | None = None  # Welch's t-test against the baseline
    engine: str
    llama_cpp_build: str
    file_hashes: dict[str, str]  # file name -> sha256
    params: dict[str, Any]
    study_name: str
    concurrency: int = 1  # concurrent streams (`-np N`) the preset was tuned and confirmed for
    created_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    # file name -> {"repo", "revision"}: the hub release (commit) of each file that came from the hub
    file_revisions: dict[str, dict[str, str]] = field(default_factory=dict)
    #: why it was made, e.g. by `nightly`: "new draft release: dspark from …@abc1234 (was 9f8e7d6); …"
    reason: str | None = None

    @property
    def command(self) -> str:
        """The argv as one line to paste into a shell."""
        return format_command(self.argv)


class PresetStore:
    """Presets and file hashes in the database at a SQLAlchemy URL; raises StorageError on any failure."""

    def __init__(self, url: str):
        self._engine, self._shown_url = _open_engine(url)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        try:
            self._prepare_schema()
        except StorageError:
            # Two processes opening a fresh database at once can collide on CREATE TABLE or on the
            # version row; the loser finds the winner's tables on a second look. A real fault repeats.
            self._prepare_schema()

    def __enter__(self) -> PresetStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._engine.dispose()

    def save(self, preset: Preset) -> None:
        """Store `preset`, replacing any preset of the same (model, hardware, concurrency)."""
        with self._session() as session:
            session.execute(
                delete(PresetRow).where(PresetRow.model == preset.model, PresetRow.hardware == preset.hardware,
                                        PresetRow.concurrency == preset.concurrency)
            )
            session.add(_to_row(preset))

    def get(self, model: str, hardware: str, concurrency: int = 1) -> Preset | None:
        with self._session() as session:
            row = session.scalars(
                select(PresetRow).where(PresetRow.model == model, PresetRow.hardware == hardware,
                                        PresetRow.concurrency == concurrency)
            ).one_or_none()
            return None if row is None else _to_preset(row)

    def list(self) -> builtins.list[Preset]:  # builtins: in this class body `list` is this method
        """Every preset, sorted by model, hardware, then concurrency."""
        with self._session() as session:
            rows = session.scalars(select(PresetRow).order_by(PresetRow.model, PresetRow.hardware,
                                                              PresetRow.concurrency))
            return [_to_preset(row) for row in rows]

    def cached_sha256(self, path: str | os.PathLike[str]) -> str:
        """The sha256 of a file, hashed again only when its size or mtime changed since last time.

        Like any size+mtime cache, this misses a rewrite that keeps both (same size, within the
        file system's timestamp resolution). The file is hashed outside any transaction, so a
        multi-gigabyte model never holds a database lock.
        """
        resolved = Path(path).resolve()
        try:
            stat = resolved.stat()
        except OSError as exc:
            raise ModelFileError(f"cannot hash {resolved}: {exc.strerror}") from exc
        key = str(resolved)
        with self._session() as session:
            row = session.get(FileHashRow, key)
            if row is not None and (row.size, row.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
                return row.sha256
        # Keyed by the stat taken before hashing: a file changed meanwhile misses next time.
        sha256 = file_sha256(resolved)
        with self._session() as session:
            session.merge(FileHashRow(path=key, size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=sha256))
        return sha256

    @contextmanager
    def _session(self) -> Iterator[Session]:
        """One transaction: committed when the block succeeds, rolled back otherwise; a stop signal
        waits for its end (see autotune.interrupts)."""
        with deferred():
            session = self._sessions()
            try:
                yield session
                session.commit()
            except sqlalchemy.exc.SQLAlchemyError as exc:
                session.rollback()
                reason = str(exc).splitlines()[0]
                raise StorageError(f"cannot read or write presets in {self._shown_url}: {reason}") from exc
            except BaseException:
                session.rollback()
                raise
            finally:
                session.close()

    def _prepare_schema(self) -> None:
        """Check the recorded schema version before touching any table, then create what is missing."""
        with self._session() as session:
            connection = session.connection()
            if inspect(connection).has_table(SchemaVersionRow.__tablename__):
                found = session.scalars(select(SchemaVersionRow.version)).all()
                _check_version(found)
                if found and found[0] < SCHEMA_VERSION:
                    _migrate(connection, found[0])
                    session.execute(delete(SchemaVersionRow))
            Base.metadata.create_all(connection)
            if session.get(SchemaVersionRow, SCHEMA_VERSION) is None:
                session.add(SchemaVersionRow(version=SCHEMA_VERSION))


def _open_engine(url: str) -> tuple[Engine, str]:
    """An engine for `url` set up like Optuna's storage, and the URL as shown in messages (no password)."""
    try:
        parsed = make_url(url)
    except sqlalchemy.exc.ArgumentError as exc:
        raise StorageError(f"storage URL {url!r} is not a valid SQLAlchemy URL") from exc
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite":
        _prepare_sqlite_file(parsed.database)
        options: dict[str, Any] = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    else:
        options = {"pool_pre_ping": True}
    try:
        return create_engine(parsed, **options), shown
    except (sqlalchemy.exc.SQLAlchemyError, ImportError) as exc:  # ImportError: the driver is missing
        raise StorageError(f"cannot open storage {shown}: {exc}") from exc


#: version -> the statements that bring a database of the version before it up to it
MIGRATIONS: dict[int, tuple] = {
    2: ("ALTER TABLE autotune_presets ADD COLUMN file_revisions JSON",),
    3: (lambda connection: _rebuild_presets_keyed_by_concurrency(connection),),
    4: (lambda connection: _add_preset_column(connection, "reason", "TEXT"),),
}


def _rebuild_presets_keyed_by_concurrency(connection) -> None:
    """v3: the presets table gets `concurrency` (1 for every existing preset) and its unique key becomes
    (model, hardware, concurrency). SQLite cannot drop a constraint, so the table is rebuilt: renamed,
    created anew, rows copied (ids assigned afresh, so PostgreSQL's sequence stays right), old one dropped."""
    connection.execute(text("ALTER TABLE autotune_presets RENAME TO autotune_presets_before_v3"))
    PresetRow.__table__.create(connection)  # as defined now: with the columns of later versions too
    kept = {c["name"] for c in inspect(connection).get_columns("autotune_presets_before_v3")}
    columns = ", ".join(c.name for c in PresetRow.__table__.columns
                        if c.name in kept and c.name not in ("id", "concurrency"))
    connection.execute(text(f"INSERT INTO autotune_presets ({columns}, concurrency) "
                            f"SELECT {columns}, 1 FROM autotune_presets_before_v3"))
    connection.execute(text("DROP TABLE autotune_presets_before_v3"))


def _add_preset_column(connection, name: str, sql_type: str) -> None:
    """Add a column to the presets table unless it has it (a table rebuilt by v3 is created as defined now)."""
    if name not in {c["name"] for c in inspect(connection).get_columns("autotune_presets")}:
        connection.execute(text(f"ALTER TABLE autotune_presets ADD COLUMN {name} {sql_type}"))


def _migrate(connection, version: int) -> None:
    """Run every migration after `version`, in order, inside the caller's transaction."""
    for step in range(version + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[step]:
            if callable(statement):
                statement(connection)
            else:
                connection.execute(text(statement))


def _check_version(found: list[int]) -> None:
    if len(found) > 1:
        raise StorageError(
            f"autotune_schema_version holds {len(found)} rows ({sorted(found)}); "
            "keep only the row of the autotune version that wrote the database"
        )
    if not found or found[0] == SCHEMA_VERSION:
        return
    if found[0] > SCHEMA_VERSION:
        raise StorageError(f"database schema v{found[0]} is newer than this autotune (v{SCHEMA_VERSION}): upgrade autotune")
    if all(step in MIGRATIONS for step in range(found[0] + 1, SCHEMA_VERSION + 1)):
        return  # migrated when opened
    raise StorageError(
        f"database schema v{found[0]} is older than this autotune (v{SCHEMA_VERSION}) and has no migration: "
        "use the autotune version that wrote it, or a new --storage URL"
    )


def _to_row(preset: Preset) -> PresetRow:
    return PresetRow(command=preset.command, **{f.name: getattr(preset, f.name) for f in fields(Preset)})


def _to_preset(row: PresetRow) -> Preset:
    values = {f.name: getattr(row, f.name) for f in fields(Preset)}
    return Preset(**{**values, "argv": tuple(row.argv), "file_revisions": row.file_revisions or {}})
