"""What a test reads straight from a SQLite study database, without opening it through Optuna (which
would create its tables)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def studies_in(db: Path) -> int:
    """How many studies the SQLite database holds (0 where it was never created, or holds no study table:
    a search checks its storage before measuring, so bad input may leave an empty database behind)."""
    if not db.exists():
        return 0
    with sqlite3.connect(db) as connection:
        tables = {row[0] for row in connection.execute("select name from sqlite_master where type='table'")}
        return connection.execute("select count(*) from studies").fetchone()[0] if "studies" in tables else 0
