"""Naming and finding studies: one study per (model, hardware, engine, objective, load), a run of it
per predicted search or nightly version (autotune.study.runs)."""

from __future__ import annotations

import optuna

from autotune.engines import DEFAULT_ENGINE
from autotune.errors import StudyNotFoundError, UsageError
from autotune.hardware import hardware_key
from autotune.study.objectives import DEFAULT_OBJECTIVE
from autotune.study.runs import Run, newest_answer, prune_runs, run_name, runs_of
from storage import open_storage, resolve_storage_url

optuna.logging.set_verbosity(optuna.logging.ERROR)  # the reporter shows failed trials with their reason


CONCURRENCY_MARK = "#np"


def study_name(
    model: str, hardware: str, engine: str, version: int | None = None, objective: str = "decode", concurrency: int = 1
) -> str:
    """`<model>@<hardware-key>:<engine>`, `+<objective>` when it is not decode, `#np<N>` for N concurrent
    streams (`--concurrency N` above 1), and `/v<N>` for the N-th run (a predicted search or a nightly
    version, autotune.study.runs): figures of two engines, machines, objectives, loads or sets of model
    files never share a study."""
    base = f"{model}@{hardware}:{engine}" + ("" if objective == "decode" else f"+{objective}")
    base += "" if concurrency == 1 else f"{CONCURRENCY_MARK}{concurrency}"
    return f"{base}/v{version}" if version else base


def parse_kind(kind: str) -> tuple[str, str, int]:
    """(engine, objective, concurrency) of the part of a study name after `<model>@<hardware>:`."""
    kind = kind.split("/v", 1)[0]
    kind, _, level = kind.partition(CONCURRENCY_MARK)
    engine, _, objective = kind.partition("+")
    return engine, objective or "decode", int(level) if level.isdigit() else 1


def latest_version(storage: optuna.storages.BaseStorage, base: str) -> tuple[str, int | None]:
    """The newest study of `base` (the unversioned name or its highest `/vN`) and its version."""
    runs = runs_of(storage, base)
    if not runs:
        return base, None
    return runs[-1].name, runs[-1].number if runs[-1].number > 1 else None


def load_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study:
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError as exc:
        known = [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
        hint = f"; studies here: {', '.join(known)}" if known else "; run `autotune search` first"
        raise StudyNotFoundError(f"no study named {name!r}{hint}") from exc


def studies_of_model(storage: optuna.storages.BaseStorage, model: str) -> list[str]:
    """Names of every study of `model` in the storage (all hardware keys and engines)."""
    return sorted(
        s.study_name
        for s in optuna.get_all_study_summaries(storage, include_best_trial=False)
        if s.study_name.startswith(f"{model}@")
    )


def study_kinds(
    storage: optuna.storages.BaseStorage, model: str, hardware: str, concurrency: int | None = 1
) -> list[tuple[str, str]]:
    """The (engine, objective) pairs that have a study of `model` on `hardware` at `concurrency`
    streams (None: at any), whatever their version."""
    return sorted(
        {
            (engine, objective)
            for engine, objective, level in study_levels(storage, model, hardware)
            if concurrency in (None, level)
        }
    )


def study_levels(storage: optuna.storages.BaseStorage, model: str, hardware: str) -> list[tuple[str, str, int]]:
    """The (engine, objective, concurrency) triples that have a study of `model` on `hardware`."""
    prefix = f"{model}@{hardware}:"
    kinds = set()
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        name = summary.study_name
        if name.startswith(prefix):
            kinds.add(parse_kind(name[len(prefix) :]))
    return sorted(kinds)


def study_names(storage: optuna.storages.BaseStorage) -> set[str]:
    return {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}


def open_study_of(
    model: str,
    *,
    hardware: str | None = None,
    engine: str | None = None,
    storage_url: str | None = None,
    objective: str | None = None,
    concurrency: int | None = None,
    run: int | None = None,
) -> optuna.Study:
    """The study of `model` on `hardware` (this machine's by default) that answers: its newest run whose
    race finished (autotune.study.runs), or run number `run`. With `engine`, `objective` or `concurrency`
    unset, the one study that exists for them; several are a UsageError naming the flags that pick each."""
    storage = open_storage(resolve_storage_url(storage_url))
    hardware = hardware or hardware_key()

    def answering(engine: str, objective: str, concurrency: int) -> optuna.Study:
        base = study_name(model, hardware, engine, objective=objective, concurrency=concurrency)
        return load_study(storage, newest_answer(storage, base) if run is None else run_name(base, run))

    if engine is not None and objective is not None and concurrency is not None:
        return answering(engine, objective, concurrency)
    found = [
        s
        for s in study_levels(storage, model, hardware)
        if engine in (None, s[0]) and objective in (None, s[1]) and concurrency in (None, s[2])
    ]
    if len(found) == 1:
        return answering(*found[0])
    if not found:
        wanted = study_name(
            model,
            hardware,
            engine or DEFAULT_ENGINE,
            objective=objective or DEFAULT_OBJECTIVE,
            concurrency=concurrency or 1,
        )
        return load_study(storage, wanted)  # raises StudyNotFoundError listing what is there
    choices = "; ".join(
        f"--engine {e} --objective {o}" + (f" --concurrency {n}" if len({f[2] for f in found}) > 1 else "")
        for e, o, n in found
    )
    raise UsageError(f"{model} has {len(found)} studies on {hardware}: pick one with {choices}")


def prune_model_runs(model: str, *, hardware: str | None, storage_url: str | None, keep: int) -> list[Run]:
    """`prune_runs` on every study of `model` on `hardware` (this machine's by default); returns what went."""
    storage = open_storage(resolve_storage_url(storage_url))
    hardware = hardware or hardware_key()
    return [
        run
        for engine, objective, level in study_levels(storage, model, hardware)
        for run in prune_runs(
            storage, study_name(model, hardware, engine, objective=objective, concurrency=level), keep=keep
        )
    ]
