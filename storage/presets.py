"""Presets — per (model, hardware) the best confirmed configuration — and the persistent hash cache.

`PresetStore` is one of autotune's own stores in the database of the studies (storage.database), so
presets sit beside the studies they came from (SQLite or PostgreSQL alike). Queries live here; the
tables are in `storage.schema`; callers see only the `Preset` dataclass.
"""

from __future__ import annotations

import builtins
import os
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select

from autotune.errors import ModelFileError
from autotune.models.files import file_sha256
from autotune.spec.command import format_command
from storage.database import SchemaDatabase
from storage.schema import FileHashRow, PresetRow


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


class PresetStore(SchemaDatabase):
    """Presets and file hashes in the database at a SQLAlchemy URL; raises StorageError on any failure."""

    what = "presets"

    def save(self, preset: Preset) -> None:
        """Store `preset`, replacing any preset of the same (model, hardware, concurrency)."""
        with self._session() as session:
            session.execute(
                delete(PresetRow).where(
                    PresetRow.model == preset.model,
                    PresetRow.hardware == preset.hardware,
                    PresetRow.concurrency == preset.concurrency,
                )
            )
            session.add(_to_row(preset))

    def get(self, model: str, hardware: str, concurrency: int = 1) -> Preset | None:
        with self._session() as session:
            row = session.scalars(
                select(PresetRow).where(
                    PresetRow.model == model, PresetRow.hardware == hardware, PresetRow.concurrency == concurrency
                )
            ).one_or_none()
            return None if row is None else _to_preset(row)

    def list(self) -> builtins.list[Preset]:  # builtins: in this class body `list` is this method
        """Every preset, sorted by model, hardware, then concurrency."""
        with self._session() as session:
            rows = session.scalars(
                select(PresetRow).order_by(PresetRow.model, PresetRow.hardware, PresetRow.concurrency)
            )
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


def _to_row(preset: Preset) -> PresetRow:
    return PresetRow(command=preset.command, **{f.name: getattr(preset, f.name) for f in fields(Preset)})


def _to_preset(row: PresetRow) -> Preset:
    values = {f.name: getattr(row, f.name) for f in fields(Preset)}
    return Preset(**{**values, "argv": tuple(row.argv), "file_revisions": row.file_revisions or {}})
