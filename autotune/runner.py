"""Glue behind the CLI verbs: check every input first, then open storage, then measure.

Everything that can be wrong with the user's input (model name, files, prompts, search space,
storage) is found before a study is created, so bad input never leaves rows in the database.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.engines import create_engine
from autotune.errors import SearchSpaceError
from autotune.hardware import hardware_key
from autotune.models import resolve_model_files
from autotune.prompts import load_prompt_mix
from autotune.results import BestResult, best_result
from autotune.space import SearchSpace, find_space_file, load_space
from autotune.study import load_study, study_name
from autotune.tuner import SearchReporter, SearchSettings, Tuner
from storage import open_storage, resolve_storage_url


def load_model_space(model: str, space_file: Path | None = None) -> SearchSpace:
    space = load_space(space_file or find_space_file(model))
    if space.model.name != model:
        raise SearchSpaceError(f"{space.path}: model.name is {space.model.name!r}, but --model is {model!r}")
    return space


def run_search(
    *,
    model: str,
    trials: int,
    engine_name: str,
    prompts_file: Path | None,
    per_category: int | None,
    max_tokens: int,
    storage_url: str | None,
    models_dir: Path,
    space_file: Path | None,
    seed: int | None,
    threads: int | None,
    reporter: SearchReporter,
) -> BestResult:
    space = load_model_space(model, space_file)
    mix = load_prompt_mix(prompts_file).take(per_category=per_category)
    files = resolve_model_files(space, models_dir)
    with create_engine(engine_name, context_size=space.model.context_size, threads=threads) as engine:
        runnable = space.restricted_to(set(engine.runnable_spec_types))
        if not [t for t in runnable.spec_types if t != "none"]:
            raise SearchSpaceError(f"{space.path}: no spec type the {engine.name} engine can run")
        if files.draft is None:
            runnable = runnable.restricted_to({t for t in runnable.spec_types if not t.startswith("draft-")})
        settings = SearchSettings(model=model, trials=trials, max_tokens=max_tokens, seed=seed)
        tuner = Tuner(runnable, files, mix, engine, settings, reporter)
        engine.prepare(tuner.baseline_config(), mix, max_tokens=max_tokens)
        storage = open_storage(resolve_storage_url(storage_url))
        study = tuner.run(storage)
    return best_result(study)


def open_study_of(model: str, hardware: str | None, engine: str, storage_url: str | None) -> optuna.Study:
    """The stored study of (model, hardware, engine); this machine's hardware key by default."""
    storage = open_storage(resolve_storage_url(storage_url))
    return load_study(storage, study_name(model, hardware or hardware_key(), engine))
