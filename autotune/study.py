"""Naming and opening studies: one study per (model, hardware, engine)."""

from __future__ import annotations

import optuna

from autotune.errors import StudyNotFoundError

optuna.logging.set_verbosity(optuna.logging.WARNING)


def study_name(model: str, hardware: str, engine: str) -> str:
    """`<model>@<hardware-key>:<engine>`: figures of two engines never share a study."""
    return f"{model}@{hardware}:{engine}"


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
