"""autotune's own tables (presets, file hashes, leases) in the database at a storage URL.

`SchemaDatabase` opens its own SQLAlchemy engine on the URL Optuna uses, so our tables sit in the same
database as the studies (SQLite or PostgreSQL alike), checks and migrates the schema version when it
opens, and hands out sessions that commit or roll back as one transaction. The stores (presets,
leases) are subclasses that hold the queries.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy.exc
from sqlalchemy import Engine, create_engine, delete, event, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from autotune.errors import StorageError
from autotune.interrupts import deferred
from storage import SQLITE_BUSY_TIMEOUT_S, _prepare_sqlite_file
from storage.migrations import check_version, migrate
from storage.schema import SCHEMA_VERSION, Base, SchemaVersionRow


class SchemaDatabase:
    """The autotune tables at a SQLAlchemy URL; raises StorageError on any failure.

    `what` names the tables in error messages; with `begin_immediate`, every SQLite transaction takes
    the write lock when it begins (`BEGIN IMMEDIATE`), so a read followed by a write is atomic."""

    what = "autotune's tables"

    def __init__(self, url: str, *, begin_immediate: bool = False):
        self._engine, self.shown_url = _open_engine(url, begin_immediate=begin_immediate)
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        try:
            self._prepare_schema()
        except StorageError:
            # Two processes opening a fresh database at once can collide on CREATE TABLE or on the
            # version row; the loser finds the winner's tables on a second look. A real fault repeats.
            self._prepare_schema()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._engine.dispose()

    @property
    def backend(self) -> str:
        """`sqlite`, `postgresql`, ...: the SQLAlchemy backend name."""
        return self._engine.dialect.name

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
                raise StorageError(f"cannot read or write {self.what} in {self.shown_url}: {reason}") from exc
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
                check_version(found)
                if found and found[0] < SCHEMA_VERSION:
                    migrate(connection, found[0])
                    session.execute(delete(SchemaVersionRow))
            Base.metadata.create_all(connection)
            if session.get(SchemaVersionRow, SCHEMA_VERSION) is None:
                session.add(SchemaVersionRow(version=SCHEMA_VERSION))


def _open_engine(url: str, *, begin_immediate: bool) -> tuple[Engine, str]:
    """An engine for `url` set up like Optuna's storage, and the URL as shown in messages (no password)."""
    try:
        parsed = make_url(url)
    except sqlalchemy.exc.ArgumentError as exc:
        raise StorageError(f"storage URL {url!r} is not a valid SQLAlchemy URL") from exc
    shown = parsed.render_as_string(hide_password=True)
    sqlite = parsed.get_backend_name() == "sqlite"
    if sqlite:
        _prepare_sqlite_file(parsed.database)
        options: dict[str, Any] = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    else:
        options = {"pool_pre_ping": True}
    try:
        engine = create_engine(parsed, **options)
    except (sqlalchemy.exc.SQLAlchemyError, ImportError) as exc:  # ImportError: the driver is missing
        raise StorageError(f"cannot open storage {shown}: {exc}") from exc
    if sqlite and begin_immediate:
        _begin_immediately(engine)
    return engine, shown


def _begin_immediately(engine: Engine) -> None:
    """SQLAlchemy's recipe: the sqlite3 module's own BEGIN off, ours (`BEGIN IMMEDIATE`) on."""

    @event.listens_for(engine, "connect")
    def _no_implicit_begin(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
