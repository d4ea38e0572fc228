"""A fleet as a work queue: `autotune search --model a --model b ...` run by several workers (machines)
on one database. Each worker takes the next model whose lease for its own hardware nobody holds
(storage.leases) and that has no answer newer than its files, searches it under that lease, and stops
when every model has one. A model another worker holds is looked at again every few seconds: if that
worker finishes, its answer ends the model here too; if it dies, its lease expires and the next look
takes it over.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from autotune.errors import ModelFileError
from autotune.hardware import hardware_key
from autotune.models.files import resolve_model_files
from autotune.search.fleet._lease import free_lease, lease_key
from autotune.search.inputs import SearchOptions, SearchReporter
from autotune.spec.space import load_model_space
from autotune.study.best import BestResult
from autotune.study.catalog import study_name
from autotune.study.records import PREDICTED_ENGINE
from autotune.study.runs import runs_of
from storage import open_storage, resolve_storage_url
from storage.leases import MAX_POLL_S, Holder, Lease, LeaseKey, held_line

#: how a worker searches one model under its lease
SearchOne = Callable[[SearchOptions, Lease], BestResult]


@dataclass(frozen=True)
class QueueItem:
    """What became of one model of the queue in this worker: its search's answer, or why it was not searched."""

    model: str
    result: BestResult | None = None
    skipped: str | None = None  # answered already, or held by another worker (--no-wait)


def run_work_queue(
    queue: tuple[SearchOptions, ...],
    *,
    search: SearchOne,
    reporter: SearchReporter,
    answer_engine: Callable[[SearchOptions], str] = lambda options: PREDICTED_ENGINE,
) -> list[QueueItem]:
    """Work through `queue` (one SearchOptions per model) as described above; `answer_engine` names the
    study kind whose finished race answers a model. Without `wait` (--no-wait) a model held by another
    worker is left to it rather than waited for."""
    pending = list(queue)
    done: list[QueueItem] = []
    told: dict[LeaseKey, Holder | None] = {}
    while pending:
        held: dict[LeaseKey, Holder | None] = {}
        before = len(pending)
        for options in list(pending):
            with free_lease(options, reporter.note) as (lease, holder):
                if lease is None:
                    held[lease_key(options.settings)] = holder
                    continue
                answered = answer_newer_than_files(options, answer_engine(options))
                if answered:
                    reporter.note(f"{options.model}: {answered}: nothing to search")
                    done.append(QueueItem(options.model, skipped=answered))
                else:
                    reporter.note(f"{options.model}: leased to this worker; searching it")
                    done.append(QueueItem(options.model, result=search(options, lease)))
            pending.remove(options)
        if not pending or len(pending) < before:
            continue  # nothing left, or this pass took something: look at the rest again at once
        if not queue[0].wait:
            return done + [
                QueueItem(o.model, skipped=held_line(lease_key(o.settings), held[lease_key(o.settings)]))
                for o in pending
            ]
        for key, holder in held.items():
            if told.get(key, ()) != holder:
                reporter.note(f"waiting: {held_line(key, holder)}")
                told[key] = holder
        time.sleep(min(queue[0].heartbeat_s, MAX_POLL_S))
    return done


def answer_newer_than_files(options: SearchOptions, engine: str) -> str | None:
    """Which stored run answers `options.model` on this hardware with a race that started after its files
    last changed, in words; None where there is none (never searched, or its files are newer)."""
    try:
        files = resolve_model_files(
            load_model_space(options.model, options.space_file), options.models_dir, write_demo=False, offline=True
        )
    except ModelFileError:
        return None  # not all on disk yet: the search fetches them
    changed = max((path.stat().st_mtime for path in files.paths), default=None)
    if changed is None:
        return None
    storage = open_storage(resolve_storage_url(options.storage_url))
    settings = options.settings
    base = study_name(
        settings.model, hardware_key(), engine, objective=settings.objective, concurrency=settings.concurrency
    )
    raced = [run for run in runs_of(storage, base) if run.raced and run.started is not None]
    if not raced or raced[-1].started < datetime.fromtimestamp(changed):
        return None
    return f"{raced[-1].describe()} is newer than its files"
