"""Glue behind the CLI verbs: check every input first, then open storage, then measure.

Everything that can be wrong with the user's input (model name, files, prompts, search space,
storage) is found before a study is created, so bad input never leaves rows in the database.
"""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.confirm import Confirmation, confirm
from autotune.engines import create_engine
from autotune.errors import AutotuneError, SearchSpaceError
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
    server_bin: str | None = None,
) -> BestResult:
    space = load_model_space(model, space_file)
    mix = load_prompt_mix(prompts_file).take(per_category=per_category)
    files = resolve_model_files(space, models_dir)
    with create_engine(
        engine_name, context_size=space.model.context_size, threads=threads, server_bin=server_bin,
        base_flags=space.model.base_flags,
    ) as engine:
        runnable = space.restricted_to(set(engine.runnable_spec_types))
        skipped = sorted(set(space.spec_types) - set(runnable.spec_types))
        if not [t for t in runnable.spec_types if t != "none"]:
            raise SearchSpaceError(f"{space.path}: no spec type the {engine.name} engine can run (it runs "
                                   f"{', '.join(sorted(engine.runnable_spec_types))})")
        if skipped:
            reporter.note(f"the {engine.name} engine cannot run {', '.join(skipped)}: left out of this study")
        unsupported = sorted({r.param.flag for ranges in runnable.spec_types.values() for r in ranges
                              if not engine.supports_param(r.param)})
        if unsupported:
            reporter.note(f"the {engine.name} engine has no {', '.join(unsupported)}: left out of this study")
            runnable = runnable.without_params(lambda param: not engine.supports_param(param))
        if files.draft is None:
            runnable = runnable.restricted_to({t for t in runnable.spec_types if not t.startswith("draft-")})
        settings = SearchSettings(model=model, trials=trials, max_tokens=max_tokens, seed=seed, threads=threads)
        tuner = Tuner(runnable, files, mix, engine, settings, reporter)
        engine.prepare(tuner.baseline_config(), mix, max_tokens=max_tokens)
        storage = open_storage(resolve_storage_url(storage_url))
        study = tuner.run(storage)
    if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        reason = study.trials[-1].user_attrs.get("fail_reason", "no reason recorded") if study.trials else "no trial ran"
        raise AutotuneError(f"every trial failed (last: {reason}); see `autotune trials --model {model}`")
    return best_result(study)


def open_study_of(model: str, hardware: str | None, engine: str, storage_url: str | None) -> optuna.Study:
    """The stored study of (model, hardware, engine); this machine's hardware key by default."""
    storage = open_storage(resolve_storage_url(storage_url))
    return load_study(storage, study_name(model, hardware or hardware_key(), engine))


def run_confirm(
    *,
    model: str,
    engine_name: str,
    top: int,
    repeats: int,
    storage_url: str | None,
    server_bin: str | None,
    on_measured,
) -> Confirmation:
    """Re-measure the top configurations of this machine's `engine_name` study on llama-server."""
    study = open_study_of(model, None, engine_name, storage_url)
    server = study.user_attrs.get("llama_server", {"context_size": 4096, "base_flags": []})
    base_flags = tuple(server["base_flags"])
    with create_engine("server", context_size=server["context_size"], server_bin=server_bin, base_flags=base_flags) as engine:
        return confirm(
            study, engine, top=top, repeats=repeats, context_size=server["context_size"], base_flags=base_flags,
            on_measured=on_measured,
        )
