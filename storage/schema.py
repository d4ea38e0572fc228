"""SQLAlchemy models of what Optuna does not keep: presets, a persistent file-hash cache and leases.

The tables live in the same database as Optuna's but in their own `MetaData`, so creating them
never touches Optuna's tables (and Optuna's migrations never see ours). Every name starts with
`autotune_`. Changing a table means bumping `SCHEMA_VERSION` and adding the statements that bring the
previous version to it to `storage.migrations.MIGRATIONS`: an older database is migrated when it is
opened, and a database newer than this autotune (or older than any migration) is refused.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Float, Integer, MetaData, String, Text, UniqueConstraint
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

SCHEMA_VERSION = 5  # 2: file_revisions; 3: presets keyed by (model, hardware, concurrency); 4: reason; 5: leases


class Base(DeclarativeBase):
    metadata = MetaData()


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    SQLite drops the offset of a stored datetime and PostgreSQL converts to the session's zone, so
    the column holds naive UTC and reads come back tagged UTC. Naive datetimes are refused: their
    zone is a guess.
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()}: give it a timezone")
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=timezone.utc)


class SchemaVersionRow(Base):
    """The single row saying which `SCHEMA_VERSION` created the autotune tables."""

    __tablename__ = "autotune_schema_version"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)


class PresetRow(Base):
    """The best confirmed configuration of one model on one hardware key at one load (concurrent streams)."""

    __tablename__ = "autotune_presets"
    __table_args__ = (UniqueConstraint("model", "hardware", "concurrency", name="uq_autotune_presets_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model: Mapped[str] = mapped_column(String(255))
    hardware: Mapped[str] = mapped_column(String(255))
    concurrency: Mapped[int] = mapped_column(Integer, default=1)  # streams at once (-np N); v3
    argv: Mapped[list[str]] = mapped_column(JSON)
    command: Mapped[str] = mapped_column(Text)  # shlex.join(argv), for readers of the bare database
    tok_s: Mapped[float] = mapped_column(Float)
    baseline_tok_s: Mapped[float] = mapped_column(Float)
    speedup: Mapped[float] = mapped_column(Float)
    ci95_low: Mapped[float | None] = mapped_column(Float)
    ci95_high: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    engine: Mapped[str] = mapped_column(String(64))
    llama_cpp_build: Mapped[str] = mapped_column(String(255))
    file_hashes: Mapped[dict[str, str]] = mapped_column(JSON)  # file name -> sha256
    # file name -> {"repo", "revision"} of the files that came from the hub (v2; NULL in rows of v1)
    file_revisions: Mapped[dict[str, dict[str, str]] | None] = mapped_column(JSON, nullable=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    study_name: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # why it was made (v4; NULL before)


class FileHashRow(Base):
    """A file's sha256 as of its size and mtime: a hash is reused until either changes."""

    __tablename__ = "autotune_file_hashes"

    path: Mapped[str] = mapped_column(String(4096), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    mtime_ns: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))


class LeaseRow(Base):
    """Which process searches one (model, hardware key, objective, concurrency) now (storage.leases).

    The row exists while a lease is held: claiming inserts it (the unique key makes two inserts of one
    key fail but one), releasing deletes it, and a takeover of a lease whose holder stopped beating
    rewrites it."""

    __tablename__ = "autotune_leases"
    __table_args__ = (UniqueConstraint("model", "hardware", "objective", "concurrency", name="uq_autotune_leases_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model: Mapped[str] = mapped_column(String(255))
    hardware: Mapped[str] = mapped_column(String(255))
    objective: Mapped[str] = mapped_column(String(64))
    concurrency: Mapped[int] = mapped_column(Integer)
    token: Mapped[str] = mapped_column(String(64))  # the holder's own mark: only it renews or releases the lease
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    process_started: Mapped[str] = mapped_column(String(64))  # the holder's start time (autotune.engines.orphans)
    since: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)
    beat_s: Mapped[float] = mapped_column(Float)  # the holder's heartbeat interval
