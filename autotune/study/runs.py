"""Answers are history: each search of a key writes a run of its own, and readers take the newest
finished one.

A run is a study: the first is `<base>` (autotune.study.catalog.study_name), the N-th `<base>/vN`, as
nightly versions always were. A predicted search writes a new run each time rather than a race per run
inside one study, because a run's trials, calibration and race belong together: `trials` and `report`
show one run as it was, and `prune` drops whole runs with a plain `delete_study`. A run whose race
finished holds its verdict (`confirmation`); one stopped before (SIGTERM, a dead machine) is left
as it was, or with its race's standing result marked undecided where the race had begun, and never
answers while a finished one exists. Nothing here deletes a run another process may
still write: `prune` keeps every run newer than the newest kept verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import optuna

from autotune.study.verdict import STOPPED


@dataclass(frozen=True)
class Run:
    """One stored run of a study name's base."""

    name: str
    number: int  # 1 for `<base>`, N for `<base>/vN`
    raced: bool  # its race finished: its verdict is stored
    started: datetime | None

    def describe(self) -> str:
        started = f"{self.started:%Y-%m-%d %H:%M}" if self.started else "?"
        return f"run {self.number} ({self.name}, {started}, {'raced' if self.raced else 'no finished race'})"


def runs_of(storage: optuna.storages.BaseStorage, base: str) -> list[Run]:
    """Every run of `base`, oldest first."""
    found = []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        number = run_number(summary.study_name, base)
        if number is not None:
            race = summary.user_attrs.get("confirmation")
            found.append(
                Run(
                    summary.study_name,
                    number,
                    race is not None and race.get("ended") != STOPPED,
                    summary.datetime_start,
                )
            )
    return sorted(found, key=lambda run: run.number)


def run_number(name: str, base: str) -> int | None:
    """1 where `name` is `base`, N where it is `base/vN`, else None."""
    if name == base:
        return 1
    suffix = name[len(base) + 2 :] if name.startswith(base + "/v") else ""
    return int(suffix) if suffix.isdigit() else None


def base_name(name: str) -> str:
    """The base of a run's study name (`<base>/vN` -> `<base>`)."""
    base, _, version = name.rpartition("/v")
    return base if base and version.isdigit() else name


def run_name(base: str, number: int) -> str:
    return base if number == 1 else f"{base}/v{number}"


def newest_answer(storage: optuna.storages.BaseStorage, base: str) -> str:
    """The run readers answer from: the newest whose race finished, else the newest, else `base`."""
    runs = runs_of(storage, base)
    raced = [run for run in runs if run.raced]
    return (raced or runs)[-1].name if runs else base


def next_run(storage: optuna.storages.BaseStorage, base: str) -> str:
    """The name of a new run of `base`, beside the earlier ones."""
    runs = runs_of(storage, base)
    return run_name(base, runs[-1].number + 1 if runs else 1)


def prune_runs(storage: optuna.storages.BaseStorage, base: str, *, keep: int) -> list[Run]:
    """Delete the runs of `base` older than its `keep` newest finished ones; returns what was deleted.
    Runs newer than the oldest kept verdict stay (one may be a search under way); with no finished run,
    nothing is deleted."""
    runs = runs_of(storage, base)
    kept = [run for run in runs if run.raced][-keep:]
    if not kept:
        return []
    doomed = [run for run in runs if run.number < kept[0].number]
    for run in doomed:
        optuna.delete_study(study_name=run.name, storage=storage)
    return doomed
