"""How a database of an older `SCHEMA_VERSION` is brought up to this one, and which versions are refused.

`MIGRATIONS[n]` holds the statements that bring a database of version n-1 to version n; they run in
order, inside the transaction that opens the database (storage.database). A table added by a version
needs no statement: `create_all` makes every missing table after the migrations ran.
"""

from __future__ import annotations

from sqlalchemy import inspect, text

from autotune.errors import StorageError
from storage.schema import SCHEMA_VERSION, PresetRow

#: version -> the statements that bring a database of the version before it up to it
MIGRATIONS: dict[int, tuple] = {
    2: ("ALTER TABLE autotune_presets ADD COLUMN file_revisions JSON",),
    3: (lambda connection: _rebuild_presets_keyed_by_concurrency(connection),),
    4: (lambda connection: _add_preset_column(connection, "reason", "TEXT"),),
    5: (),  # autotune_leases: a new table, which create_all makes
}


def _rebuild_presets_keyed_by_concurrency(connection) -> None:
    """v3: the presets table gets `concurrency` (1 for every existing preset) and its unique key becomes
    (model, hardware, concurrency). SQLite cannot drop a constraint, so the table is rebuilt: renamed,
    created anew, rows copied (ids assigned afresh, so PostgreSQL's sequence stays right), old one dropped."""
    connection.execute(text("ALTER TABLE autotune_presets RENAME TO autotune_presets_before_v3"))
    PresetRow.__table__.create(connection)  # as defined now: with the columns of later versions too
    kept = {c["name"] for c in inspect(connection).get_columns("autotune_presets_before_v3")}
    columns = ", ".join(
        c.name for c in PresetRow.__table__.columns if c.name in kept and c.name not in ("id", "concurrency")
    )
    connection.execute(
        text(
            f"INSERT INTO autotune_presets ({columns}, concurrency) SELECT {columns}, 1 FROM autotune_presets_before_v3"
        )
    )
    connection.execute(text("DROP TABLE autotune_presets_before_v3"))


def _add_preset_column(connection, name: str, sql_type: str) -> None:
    """Add a column to the presets table unless it has it (a table rebuilt by v3 is created as defined now)."""
    if name not in {c["name"] for c in inspect(connection).get_columns("autotune_presets")}:
        connection.execute(text(f"ALTER TABLE autotune_presets ADD COLUMN {name} {sql_type}"))


def migrate(connection, version: int) -> None:
    """Run every migration after `version`, in order, inside the caller's transaction."""
    for step in range(version + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[step]:
            if callable(statement):
                statement(connection)
            else:
                connection.execute(text(statement))


def check_version(found: list[int]) -> None:
    """Refuse a database whose recorded versions this autotune cannot use (newer, or older than any migration)."""
    if len(found) > 1:
        raise StorageError(
            f"autotune_schema_version holds {len(found)} rows ({sorted(found)}); "
            "keep only the row of the autotune version that wrote the database"
        )
    if not found or found[0] == SCHEMA_VERSION:
        return
    if found[0] > SCHEMA_VERSION:
        raise StorageError(
            f"database schema v{found[0]} is newer than this autotune (v{SCHEMA_VERSION}): upgrade autotune"
        )
    if all(step in MIGRATIONS for step in range(found[0] + 1, SCHEMA_VERSION + 1)):
        return  # migrated when opened
    raise StorageError(
        f"database schema v{found[0]} is older than this autotune (v{SCHEMA_VERSION}) and has no migration: "
        "use the autotune version that wrote it, or a new --storage URL"
    )
