"""Glue behind the CLI verbs: check every input first, then open storage, then measure.

Everything that can be wrong with the user's input (model name, files, prompts, search space,
storage) is found before a study is created, so bad input never leaves rows in the database.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import optuna

from autotune.candidates import Candidates, find_candidates
from autotune.confirm import Confirmation, ConfirmedConfig, confirm, top_trials
from autotune.engines import Engine, create_engine
from autotune.errors import AutotuneError, ModelFileError, SearchSpaceError
from autotune.hardware import hardware_key
from autotune.models import ModelFiles, resolve_model_files
from autotune.prompts import PromptMix, load_prompt_mix
from autotune.results import BestResult, best_result
from autotune.space import SearchSpace, find_space_file, load_space
from autotune.spec import SpecConfig
from autotune.study import latest_version, load_study, study_name
from autotune.nightly import NightlyOutcome, decide, unchanged_files
from autotune.objectives import DEFAULT_OBJECTIVE
from autotune.trials import config_from_attrs
from autotune.tuner import SearchReporter, SearchSettings, Tuner, requeue_stale_trial
from storage import open_storage, resolve_storage_url
from storage.presets import Preset, PresetStore


def load_model_space(model: str, space_file: Path | None = None) -> SearchSpace:
    space = load_space(space_file or find_space_file(model))
    if space.model.name != model:
        raise SearchSpaceError(f"{space.path}: model.name is {space.model.name!r}, but --model is {model!r}")
    return space


@dataclass(frozen=True)
class SearchInputs:
    """Everything a study needs from the user's input, checked before anything is measured or stored."""

    space: SearchSpace
    mix: PromptMix
    files: ModelFiles
    candidates: Candidates


@dataclass(frozen=True)
class SearchOptions:
    """What the user asked a study to measure, and where (the options `search` and `nightly` share)."""

    trials: int
    engine_name: str
    prompts_file: Path | None
    per_category: int | None
    max_tokens: int
    storage_url: str | None
    models_dir: Path
    space_file: Path | None
    seed: int | None
    threads: int | None
    objective: str = DEFAULT_OBJECTIVE
    repeats: int = 1
    baseline_every: int = 0
    pruning: bool = True
    trial_timeout_s: float | None = None
    heartbeat_s: int = 60

    def settings(self, model: str) -> SearchSettings:
        return SearchSettings(
            model, self.trials, self.max_tokens, seed=self.seed, threads=self.threads, objective=self.objective,
            repeats=self.repeats, baseline_every=self.baseline_every, pruning=self.pruning,
            trial_timeout_s=self.trial_timeout_s,
        )


def check_inputs(model: str, options: SearchOptions, reporter: SearchReporter) -> SearchInputs:
    """Load and check everything the user named; a draft type none of whose pairs can run is an error.
    What is only left out (a missing quant, one refused pair among good ones) is reported as a note."""
    space = load_model_space(model, options.space_file)
    mix = load_prompt_mix(options.prompts_file).take(per_category=options.per_category)
    files = resolve_model_files(space, options.models_dir)
    candidates = find_candidates(files)
    for spec_type in space.spec_types:
        refused = [r for r in candidates.refused if r.spec_type == spec_type]
        if refused and not candidates.pairs.get(spec_type):
            raise ModelFileError(
                f"{refused[0].describe()}; fix the drafts of {spec_type} in {space.path} or remove [spec_types.{spec_type}]"
            )
    for pattern in files.missing:
        reporter.note(f"no file matches {pattern}: left out (`autotune quantize` writes a missing quant)")
    for refused in candidates.refused:
        reporter.note(f"not runnable: {refused.describe()}")
    return SearchInputs(space, mix, files, candidates)


def run_search(model: str, options: SearchOptions, *, reporter: SearchReporter, server_bin: str | None = None) -> BestResult:
    inputs = check_inputs(model, options, reporter)
    study = _search(inputs, options.settings(model), options.engine_name, server_bin, options.storage_url, reporter,
                    heartbeat_s=options.heartbeat_s)
    return best_result(study)


def _search(
    inputs: SearchInputs,
    settings: SearchSettings,
    engine_name: str,
    server_bin: str | None,
    storage_url: str | None,
    reporter: SearchReporter,
    *,
    new_version: bool = False,
    warm_start: list[optuna.trial.FrozenTrial] = (),
    study_attrs: dict | None = None,
    heartbeat_s: int | None = None,
) -> optuna.Study:
    """Run the study (the latest version, or a new one) on one engine; fails if no trial completed.

    Several workers may run this at once on one database: they share the study's trials, a
    heartbeat fails the trials of a worker that died and re-queues them, and the device lock keeps
    two workers of one machine from measuring at the same time."""
    model = inputs.space.model
    with create_engine(
        engine_name, context_size=model.context_size, threads=settings.threads, server_bin=server_bin,
        base_flags=model.base_flags,
    ) as engine:
        runnable = runnable_space(inputs.space, engine, inputs.candidates, reporter)
        for target in inputs.candidates.targets:
            engine.prepare(SpecConfig(target), inputs.mix, max_tokens=settings.max_tokens)
        storage = open_storage(resolve_storage_url(storage_url), heartbeat_interval_s=heartbeat_s,
                               stale_trial_callback=requeue_stale_trial)
        name, version = latest_version(
            storage, study_name(settings.model, hardware_key(), engine.name, objective=settings.objective))
        if new_version and name in _study_names(storage):
            version = (version or 1) + 1
        settings = replace(settings, version=version)
        tuner = Tuner(runnable, inputs.candidates, inputs.mix, engine, settings, reporter)
        study = tuner.run(storage, warm_start=warm_start, study_attrs=study_attrs)
    if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        reason = study.trials[-1].user_attrs.get("fail_reason", "no reason recorded") if study.trials else "no trial ran"
        raise AutotuneError(f"every trial failed (last: {reason}); see `autotune trials --model {settings.model}`")
    return study


def _study_names(storage: optuna.storages.BaseStorage) -> set[str]:
    return {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}


def runnable_space(space: SearchSpace, engine: Engine, candidates: Candidates, reporter: SearchReporter) -> SearchSpace:
    """The part of `space` this engine and these files can run; says what was left out and why."""
    runnable = space.restricted_to(set(engine.runnable_spec_types))
    skipped = sorted(set(space.spec_types) - set(runnable.spec_types))
    if skipped:
        reporter.note(f"the {engine.name} engine cannot run {', '.join(skipped)}: left out of this study")
    unsupported = sorted({r.param.flag for ranges in runnable.spec_types.values() for r in ranges
                          if not engine.supports_param(r.param)})
    if unsupported:
        reporter.note(f"the {engine.name} engine has no {', '.join(unsupported)}: left out of this study")
        runnable = runnable.without_params(lambda param: not engine.supports_param(param))
    runnable = runnable.restricted_to(set(candidates.spec_types(list(runnable.spec_types))))
    if not [t for t in runnable.spec_types if t != "none"]:
        raise SearchSpaceError(
            f"{space.path}: nothing speculative to search: the {engine.name} engine runs "
            f"{', '.join(sorted(engine.runnable_spec_types))}, and no draft type has a runnable file pair"
        )
    return runnable


def open_study_of(model: str, hardware: str | None, engine: str, storage_url: str | None,
                  objective: str = DEFAULT_OBJECTIVE) -> optuna.Study:
    """The newest stored study of (model, hardware, engine, objective); this machine's hardware by default."""
    storage = open_storage(resolve_storage_url(storage_url))
    name, _ = latest_version(storage, study_name(model, hardware or hardware_key(), engine, objective=objective))
    return load_study(storage, name)


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
    """Re-measure the top configurations of this machine's `engine_name` study on llama-server, and make
    the confirmed winner this machine's preset."""
    url = resolve_storage_url(storage_url)
    study = open_study_of(model, None, engine_name, url)
    confirmation = _confirm(study, top, repeats, server_bin, None, on_measured)
    if confirmation.winner is not None:
        with PresetStore(url) as store:
            store.save(preset_from(model, study, confirmation, confirmation.winner))
    return confirmation


def run_nightly(
    model: str, options: SearchOptions, *, top: int, confirm_repeats: int, server_bin: str | None,
    reporter: SearchReporter,
) -> NightlyOutcome:
    """Re-tune `model` if its files changed since the last study version; see autotune.nightly."""
    inputs = check_inputs(model, options, reporter)
    url = resolve_storage_url(options.storage_url)
    with PresetStore(url) as store:
        hashes = {path.name: store.cached_sha256(path) for path in inputs.files.paths}
        storage = open_storage(url)
        settings = options.settings(model)
        base = study_name(model, hardware_key(), options.engine_name, objective=settings.objective)
        latest, _ = latest_version(storage, base)
        previous = optuna.load_study(study_name=latest, storage=storage) if latest in _study_names(storage) else None
        preset = store.get(model, hardware_key())
        if previous is not None and preset is not None and previous.user_attrs.get("file_hashes") == hashes:
            return unchanged_files(model)
        study = _search(
            inputs, settings, options.engine_name, server_bin, url, reporter, new_version=previous is not None,
            warm_start=top_trials(previous, top) if previous is not None else [], study_attrs={"file_hashes": hashes},
            heartbeat_s=options.heartbeat_s,
        )
        if not top_trials(study, top):
            return NightlyOutcome("unchanged", f"{model}: no speculative configuration completed (all pruned or "
                                               f"failed, see `autotune trials --model {model}`); preset kept")
        in_use = config_from_attrs(preset.params) if preset is not None else None
        if in_use is not None and not all(p.is_file() for p in (in_use.target, in_use.draft) if p):
            in_use = None
        confirmation = _confirm(study, top, confirm_repeats, server_bin, in_use,
                                lambda r, label, tok_s: reporter.note(f"confirm round {r + 1}: {label}: {tok_s}"))
        outcome = decide(model, confirmation, preset)
        if outcome.new_winner is not None:
            store.save(preset_from(model, study, confirmation, outcome.new_winner))
    return outcome


def _confirm(study: optuna.Study, top: int, repeats: int, server_bin: str | None, preset: SpecConfig | None,
             on_measured) -> Confirmation:
    server = study.user_attrs.get("llama_server", {"context_size": 4096, "base_flags": []})
    base_flags = tuple(server["base_flags"])
    with create_engine("server", context_size=server["context_size"], server_bin=server_bin, base_flags=base_flags) as engine:
        return confirm(study, engine, top=top, repeats=repeats, context_size=server["context_size"],
                       base_flags=base_flags, preset=preset, on_measured=on_measured)


def preset_from(model: str, study: optuna.Study, confirmation: Confirmation, row: ConfirmedConfig) -> Preset:
    """The preset a confirmed configuration of `study` makes on this machine."""
    trial = next(t for t in study.trials if t.number == row.trial)
    return Preset(
        model=model,
        hardware=hardware_key(),
        argv=tuple(row.argv),
        tok_s=row.mean_tok_s,
        baseline_tok_s=confirmation.baseline_of(row).mean_tok_s,
        speedup=row.speedup or 0.0,
        ci95_low=row.ci95[0],
        ci95_high=row.ci95[1],
        p_value=row.p_value,
        engine=confirmation.engine,
        llama_cpp_build=confirmation.build,
        file_hashes=dict(trial.user_attrs["model_files"]),
        params=dict(trial.user_attrs["config"]),
        study_name=study.study_name,
    )


def stored_preset(model: str, hardware: str | None, storage_url: str | None) -> Preset | None:
    with PresetStore(resolve_storage_url(storage_url)) as store:
        return store.get(model, hardware or hardware_key())
