"""Naming and opening studies: one study per (model, hardware, engine)."""

from __future__ import annotations

import optuna

from autotune.errors import StudyNotFoundError

optuna.logging.set_verbosity(optuna.logging.ERROR)  # the reporter shows failed trials with their reason


CONCURRENCY_MARK = "#np"


def study_name(model: str, hardware: str, engine: str, version: int | None = None, objective: str = "decode",
               concurrency: int = 1) -> str:
    """`<model>@<hardware-key>:<engine>`, `+<objective>` when it is not decode, `#np<N>` for N concurrent
    streams (`--concurrency N` above 1), and `/v<N>` for the N-th nightly version: figures of two
    engines, machines, objectives, loads or sets of model files never share a study."""
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
    versions: dict[int | None, str] = {}
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        name = summary.study_name
        if name == base:
            versions[None] = name
        elif name.startswith(base + "/v") and name[len(base) + 2 :].isdigit():
            versions[int(name[len(base) + 2 :])] = name
    if not versions:
        return base, None
    newest = max(versions, key=lambda v: v or 0)
    return versions[newest], newest


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


def study_kinds(storage: optuna.storages.BaseStorage, model: str, hardware: str,
                concurrency: int | None = 1) -> list[tuple[str, str]]:
    """The (engine, objective) pairs that have a study of `model` on `hardware` at `concurrency`
    streams (None: at any), whatever their version."""
    return sorted({(engine, objective) for engine, objective, level in study_levels(storage, model, hardware)
                   if concurrency in (None, level)})


def study_levels(storage: optuna.storages.BaseStorage, model: str, hardware: str) -> list[tuple[str, str, int]]:
    """The (engine, objective, concurrency) triples that have a study of `model` on `hardware`."""
    prefix = f"{model}@{hardware}:"
    kinds = set()
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        name = summary.study_name
        if name.startswith(prefix):
            kinds.add(parse_kind(name[len(prefix):]))
    return sorted(kinds)
