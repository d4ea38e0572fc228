"""Naming and opening studies: one study per (model, hardware, engine)."""

from __future__ import annotations

import optuna

from autotune.errors import StudyNotFoundError

optuna.logging.set_verbosity(optuna.logging.ERROR)  # the reporter shows failed trials with their reason


def study_name(model: str, hardware: str, engine: str, version: int | None = None, objective: str = "decode") -> str:
    """`<model>@<hardware-key>:<engine>`, `+<objective>` when it is not decode, and `/v<N>` for the
    N-th nightly version: figures of two engines, machines, objectives or sets of model files never
    share a study."""
    base = f"{model}@{hardware}:{engine}" + ("" if objective == "decode" else f"+{objective}")
    return f"{base}/v{version}" if version else base


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


def study_kinds(storage: optuna.storages.BaseStorage, model: str, hardware: str) -> list[tuple[str, str]]:
    """The (engine, objective) pairs that have a study of `model` on `hardware`, whatever their version."""
    prefix = f"{model}@{hardware}:"
    kinds = set()
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        name = summary.study_name
        if name.startswith(prefix):
            kind = name[len(prefix):].split("/v", 1)[0]
            engine, _, objective = kind.partition("+")
            kinds.add((engine, objective or "decode"))
    return sorted(kinds)
