"""Glue behind the CLI verbs: check every input first, then open storage, then measure.

Everything that can be wrong with the user's input (model name, files, prompts, search space,
storage) is found before a study is created, so bad input never leaves rows in the database.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import optuna

from autotune.models.adhoc import adhoc_space
from autotune.models.candidates import Candidates, find_candidates
from autotune.study.confirm import Confirmation, ConfirmedConfig, confirm, top_trials
from autotune.engines import DEFAULT_ENGINE, Engine, create_engine
from autotune.spec.command import ServerCommand
from autotune.errors import AutotuneError, ModelFileError, SearchSpaceError, ServerBinaryError, UsageError
from autotune.hardware import hardware_key
from autotune.models.files import PULL_HINT, ModelFiles, resolve_model_files
from autotune.measure.prompts import PromptMix, default_mix_path, load_prompt_mix
from autotune.study.best import BestResult, best_result
from autotune.spec.space import SearchSpace, load_model_space
from autotune.spec.sampling import GREEDY, SERVER_MIN_P, SERVER_TOP_K, SERVER_TOP_P, Sampling
from autotune.llamacpp.server_binary import command_binary, server_binary_available
from autotune.spec.config import SpecConfig
from autotune.spec.types import DRAFT_SAMPLING, is_combination
from autotune.study.catalog import latest_version, load_study, study_levels, study_name
from autotune.presets.nightly import NightlyOutcome, decide, unchanged_files
from autotune.study.objectives import DEFAULT_OBJECTIVE, OBJECTIVES
from autotune.study.records import config_from_attrs
from autotune.study.trials import is_spec_default
from autotune.study.references import requeue_stale_trial
from autotune.study.tuner import SearchReporter, SearchSettings, Tuner
from storage import open_storage, resolve_storage_url
from storage.presets import Preset, PresetStore


@dataclass(frozen=True)
class SearchInputs:
    """Everything a study needs from the user's input, checked before anything is measured or stored."""

    space: SearchSpace
    mix: PromptMix
    files: ModelFiles
    candidates: Candidates
    notes: tuple[str, ...] = ()  # what was left out, and which bundled mix: said once the storage opened


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
    temperature: float = 0.0
    top_k: int = SERVER_TOP_K
    top_p: float = SERVER_TOP_P
    min_p: float = SERVER_MIN_P
    concurrency: tuple[int, ...] = (1,)  # --concurrency: a study per level
    min_stream_tok_s: float | None = None
    target_file: Path | None = None  # --target: an ad-hoc model, its space inferred (autotune.models.adhoc)
    draft_files: tuple[Path, ...] = ()  # --draft, with --target

    @property
    def sampling(self) -> Sampling:
        """What every request samples with; --seed seeds it as it seeds the TPE sampler."""
        return Sampling(self.temperature, self.top_k, self.top_p, self.min_p, seed=self.seed or 0)

    def settings(self, model: str, concurrency: int = 1) -> SearchSettings:
        return SearchSettings(
            model, self.trials, self.max_tokens, seed=self.seed, threads=self.threads, objective=self.objective,
            repeats=self.repeats, baseline_every=self.baseline_every, pruning=self.pruning,
            trial_timeout_s=self.trial_timeout_s, sampling=self.sampling, concurrency=concurrency,
            min_stream_tok_s=self.min_stream_tok_s,
        )


@dataclass(frozen=True)
class ConfirmOptions:
    """How `search` re-measures its winners at the end (on llama-server when one resolves)."""

    enabled: bool = True
    top: int = 3
    repeats: int = 3


def check_inputs(model: str, options: SearchOptions) -> SearchInputs:
    """Load and check everything the user named; a draft type none of whose pairs can run is an error.
    What is only left out (a missing quant, one refused pair among good ones) becomes a note, said once
    the storage has opened (_search): bad input found later is then the one line a user sees."""
    space = (adhoc_space(options.target_file, options.draft_files, name=model) if options.target_file
             else load_model_space(model, options.space_file))
    if options.threads and any(r.param.name == "threads" for r in space.runtime):
        raise SearchSpaceError(f"{space.path}: [runtime] searches threads, and --threads {options.threads} fixes them: "
                               "drop one of the two")
    mix = load_prompt_mix(options.prompts_file) if options.prompts_file else None
    files = resolve_model_files(space, options.models_dir)
    candidates = find_candidates(files)
    for spec_type in space.spec_types:
        refused = [r for r in candidates.refused if r.spec_type == spec_type]
        if refused and not candidates.pairs.get(spec_type):
            raise ModelFileError(
                f"{refused[0].describe()}; fix the drafts of {spec_type} in {space.path} or remove [spec_types.{spec_type}]"
            )
    notes = []
    for pattern in files.missing:
        hint = "" if pattern.endswith(f"({PULL_HINT})") else " (`autotune quantize` writes a missing quant)"
        notes.append(f"no file matches {pattern}: left out{hint}")
    notes += [f"not runnable: {refused.describe()}" for refused in candidates.refused]
    if mix is None:  # the bundled mix that suits the targets: continuations for a base model
        prompts_file, mix_note = default_mix_path(candidates.targets)
        mix = load_prompt_mix(prompts_file)
        notes += [mix_note] if mix_note else []
    return SearchInputs(space, mix.take(per_category=options.per_category), files, candidates, tuple(notes))


def level_engine(engine_name: str, concurrency: int, server_bin: str | None, reporter: SearchReporter | None) -> str:
    """The engine that measures `concurrency` streams: the server engine above one stream (the in-process
    engine runs one sequence at a time, not the server's batched slots), said in one line."""
    if concurrency < 1:
        raise UsageError(f"--concurrency {concurrency}: must be at least 1")
    if concurrency == 1 or engine_name == "server":
        return engine_name
    if not server_binary_available(server_bin):
        raise ServerBinaryError(f"--concurrency {concurrency} runs on llama-server, and none resolves: "
                                "pass --server-bin PATH or `pip install -e '.[server]'`")
    if reporter is not None:
        reporter.note(f"the python engine measures one stream: --concurrency {concurrency} runs on the server engine")
    return "server"


def run_search(model: str, options: SearchOptions, *, reporter: SearchReporter, server_bin: str | None = None,
               confirm_options: ConfirmOptions = ConfirmOptions(), concurrency: int = 1) -> BestResult:
    """Run the study of `concurrency` streams, then (unless disabled) re-measure its top configurations with the baseline,
    interleaved and repeated, on llama-server when a binary resolves, else in-process: the figures
    printed are those, not the best of many noisy single measurements."""
    inputs = check_inputs(model, options)
    engine_name = level_engine(options.engine_name, concurrency, server_bin, reporter)
    study = _search(inputs, options.settings(model, concurrency), engine_name, server_bin, options.storage_url,
                    reporter, heartbeat_s=options.heartbeat_s)
    multi_objective = len(study.directions) > 1  # a pareto pick is made on the front, not by decode tok/s
    finalists = top_trials(study, confirm_options.top)
    if confirm_options.enabled and not multi_objective and finalists:
        engine_name = "server" if server_binary_available(server_bin) else "python"
        references = "the baseline and --spec-default" if any(map(is_spec_default, study.trials)) else "the baseline"
        reporter.note(f"confirming the top {len(finalists)} with {references} on the {engine_name} engine, "
                      f"{confirm_options.repeats} interleaved rounds")
        _confirm(study, confirm_options.top, confirm_options.repeats, engine_name, server_bin, None,
                 lambda r, label, tok_s: reporter.note(
                     f"confirm round {r + 1}/{confirm_options.repeats}: {label}: "
                     + ("FAILED" if tok_s is None else f"{tok_s:.1f} tok/s")))
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
    binary, missing = command_binary(server_bin)
    if missing:
        reporter.note(missing)
    command = ServerCommand(model.context_size, tuple(model.base_flags), binary, settings.threads, settings.sampling,
                            parallel=settings.concurrency)
    with create_engine(
        engine_name, context_size=model.context_size, threads=settings.threads, server_bin=server_bin,
        base_flags=model.base_flags, sampling=settings.sampling, concurrency=settings.concurrency,
    ) as engine:
        runnable = runnable_space(inputs.space, engine, inputs.candidates, reporter, settings.sampling)
        for target in inputs.candidates.targets:
            engine.prepare(SpecConfig(target), inputs.mix, max_tokens=settings.max_tokens)
        storage = open_storage(resolve_storage_url(storage_url), heartbeat_interval_s=heartbeat_s,
                               stale_trial_callback=requeue_stale_trial)
        for note in inputs.notes:
            reporter.note(note)
        name, version = latest_version(
            storage, study_name(settings.model, hardware_key(), engine.name, objective=settings.objective,
                                concurrency=settings.concurrency))
        if new_version and name in _study_names(storage):
            version = (version or 1) + 1
        settings = replace(settings, version=version)
        tuner = Tuner(runnable, inputs.candidates, inputs.mix, engine, settings, reporter, command)
        study = tuner.run(storage, warm_start=warm_start, study_attrs=study_attrs)
    if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        reason = study.trials[-1].user_attrs.get("fail_reason", "no reason recorded") if study.trials else "no trial ran"
        raise AutotuneError(f"every trial failed (last: {reason}); see `autotune trials --model {settings.model}`")
    return study


def _study_names(storage: optuna.storages.BaseStorage) -> set[str]:
    return {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}


def runnable_space(space: SearchSpace, engine: Engine, candidates: Candidates, reporter: SearchReporter,
                   sampling: Sampling = GREEDY) -> SearchSpace:
    """The part of `space` this engine and these files can run; says what was left out and why."""
    runnable = space.restricted_to(set(engine.runnable_spec_types))
    if sampling.is_greedy:  # at temperature 0 a probabilistic draft is a greedy one: nothing to search
        runnable = runnable.without_params(lambda param: param.name == DRAFT_SAMPLING.name)
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
            f"{', '.join(sorted(t for t in engine.runnable_spec_types if not is_combination(t)))} (and their "
            "combinations), and no draft type has a runnable file pair"
        )
    return runnable_runtime(runnable, engine, reporter)


def runnable_runtime(space: SearchSpace, engine: Engine, reporter: SearchReporter) -> SearchSpace:
    """The `[runtime]` flags this engine applies as llama-server does. One the in-process engine cannot
    apply is refused (bad input, before any trial); one this llama-server lacks (`-bs` on an older
    build) is left out and said so."""
    missing = [r.param for r in space.runtime if not engine.supports_runtime(r.param)]
    if engine.name != "server" and any("draft-dflash" in t or "draft-dspark" in t for t in space.spec_types):
        # the in-process DFlash/DSpark pair builds its draft context from the target's settings
        missing += [r.param for r in space.runtime if r.param.name.startswith("draft_cache_type")]
    if not missing:
        return space
    flags = ", ".join(f"{p.name} ({p.flag})" for p in missing)
    if engine.name != "server":
        raise SearchSpaceError(f"{space.path}: [runtime] {flags}: the {engine.name} engine cannot apply it the way "
                               "llama-server does; use --engine server or remove it")
    reporter.note(f"this llama-server has no {', '.join(p.flag for p in missing)}: left out of this study")
    return replace(space, runtime=tuple(r for r in space.runtime if r.param not in missing))


def open_study_of(model: str, hardware: str | None, engine: str | None, storage_url: str | None,
                  objective: str | None = None, concurrency: int | None = None) -> optuna.Study:
    """The newest stored study of `model` on `hardware` (this machine's by default). With `engine`,
    `objective` or `concurrency` unset, the one study that exists for them; several are a UsageError
    naming the flags that pick each."""
    storage = open_storage(resolve_storage_url(storage_url))
    hardware = hardware or hardware_key()
    if engine is not None and objective is not None and concurrency is not None:
        name, _ = latest_version(storage, study_name(model, hardware, engine, objective=objective,
                                                     concurrency=concurrency))
        return load_study(storage, name)
    found = [s for s in study_levels(storage, model, hardware)
             if engine in (None, s[0]) and objective in (None, s[1]) and concurrency in (None, s[2])]
    if len(found) == 1:
        found_engine, found_objective, found_level = found[0]
        name, _ = latest_version(storage, study_name(model, hardware, found_engine, objective=found_objective,
                                                     concurrency=found_level))
        return load_study(storage, name)
    if not found:
        wanted = study_name(model, hardware, engine or DEFAULT_ENGINE, objective=objective or DEFAULT_OBJECTIVE,
                            concurrency=concurrency or 1)
        return load_study(storage, wanted)  # raises StudyNotFoundError listing what is there
    choices = "; ".join(f"--engine {e} --objective {o}" + (f" --concurrency {n}" if len({f[2] for f in found}) > 1 else "")
                        for e, o, n in found)
    raise UsageError(f"{model} has {len(found)} studies on {hardware}: pick one with {choices}")


def run_confirm(
    *,
    model: str,
    engine_name: str | None,
    objective: str | None,
    top: int,
    repeats: int,
    storage_url: str | None,
    server_bin: str | None,
    sampling: dict,
    on_measured,
    concurrency: int | None = None,
) -> Confirmation:
    """Re-measure the top configurations of this machine's study of `model` (at `concurrency` streams) on
    llama-server, and make the confirmed winner this machine's preset for that load. `sampling` holds
    the settings given on the command line (None: the study's own)."""
    url = resolve_storage_url(storage_url)
    study = open_study_of(model, None, engine_name, url, objective, concurrency)
    confirmation = _confirm(study, top, repeats, "server", server_bin, None, on_measured, sampling)
    if confirmation.winner is not None:
        with PresetStore(url) as store:
            store.save(preset_from(model, study, confirmation, confirmation.winner))
    return confirmation


def run_nightly(
    model: str, options: SearchOptions, *, top: int, confirm_repeats: int, server_bin: str | None,
    reporter: SearchReporter, concurrency: int = 1,
) -> NightlyOutcome:
    """Re-tune `model` if its files changed since the last study version; see autotune.presets.nightly.
    Files the search space names on the hub are brought up to the hub's current revision first."""
    if options.prompts_file:
        load_prompt_mix(options.prompts_file)  # a bad prompt file is found before a long download
    pull_latest(load_model_space(model, options.space_file), reporter)
    inputs = check_inputs(model, options)
    url = resolve_storage_url(options.storage_url)
    with PresetStore(url) as store:
        hashes = {path.name: store.cached_sha256(path) for path in inputs.files.paths}
        storage = open_storage(url)
        settings = options.settings(model, concurrency)
        engine_name = level_engine(options.engine_name, concurrency, server_bin, reporter)
        base = study_name(model, hardware_key(), engine_name, objective=settings.objective, concurrency=concurrency)
        latest, _ = latest_version(storage, base)
        previous = optuna.load_study(study_name=latest, storage=storage) if latest in _study_names(storage) else None
        preset = store.get(model, hardware_key(), concurrency)
        if previous is not None and preset is not None and previous.user_attrs.get("file_hashes") == hashes:
            return unchanged_files(model)
        study = _search(
            inputs, settings, engine_name, server_bin, url, reporter, new_version=previous is not None,
            warm_start=top_trials(previous, top) if previous is not None else [], study_attrs={"file_hashes": hashes},
            heartbeat_s=options.heartbeat_s,
        )
        if not top_trials(study, top):
            return NightlyOutcome("unchanged", f"{model}: no speculative configuration completed (all pruned or "
                                               f"failed, see `autotune trials --model {model}`); preset kept")
        in_use = config_from_attrs(preset.params) if preset is not None else None
        if in_use is not None and not all(p.is_file() for p in (in_use.target, in_use.draft) if p):
            in_use = None
        confirmation = _confirm(study, top, confirm_repeats, "server", server_bin, in_use,
                                lambda r, label, tok_s: reporter.note(f"confirm round {r + 1}: {label}: {tok_s}"))
        outcome = decide(model, confirmation, preset)
        if outcome.new_winner is not None:
            store.save(preset_from(model, study, confirmation, outcome.new_winner))
    return outcome


def _confirm(study: optuna.Study, top: int, repeats: int, engine_name: str, server_bin: str | None,
             preset: SpecConfig | None, on_measured, sampling: dict | None = None) -> Confirmation:
    """Confirm `study` on `engine_name` with the study's threads, flags and sampling (`sampling`
    overrides the latter field by field); the printed argv names the binary that confirmed it."""
    command = ServerCommand.from_dict(study.user_attrs.get("llama_server", {"context_size": 4096}))
    overrides = {k: v for k, v in (sampling or {}).items() if v is not None}
    if overrides:
        command = replace(command, sampling=replace(command.sampling, **overrides))
    if engine_name == "server":
        command = replace(command, binary=command_binary(server_bin)[0])
    if command.parallel > 1:
        engine_name = "server"  # N streams are measured on llama-server's slots only
    figure = OBJECTIVES[study.user_attrs.get("objective", DEFAULT_OBJECTIVE)].confirm_figure
    with create_engine(engine_name, context_size=command.context_size, threads=command.threads, server_bin=server_bin,
                       base_flags=command.base_flags, sampling=command.sampling,
                       concurrency=command.parallel) as engine:
        return confirm(study, engine, top=top, repeats=repeats, command=command, preset=preset, on_measured=on_measured,
                       figure=figure)


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
        file_revisions=dict(trial.user_attrs.get("model_revisions", {})),
        params=dict(trial.user_attrs["config"]),
        study_name=study.study_name,
        concurrency=ServerCommand.from_dict(study.user_attrs.get("llama_server", {"context_size": 0})).parallel,
    )


def pull_latest(space: SearchSpace, reporter: SearchReporter) -> None:
    """Download each hub file of `space` whose revision on the hub is new; offline, say so in one line
    and go on with the files on disk."""
    from autotune.models.hub import hub_files, pull

    if not hub_files(space):
        return
    result = pull(space, latest=True, on_file=lambda f, why: reporter.note(f"downloading {f.label}: {why}"))
    if result.unreachable:
        reporter.note(f"hub not asked for new revisions: {result.unreachable}; going on with the files on disk")


def stored_preset(model: str, hardware: str | None, storage_url: str | None, concurrency: int = 1) -> Preset | None:
    with PresetStore(resolve_storage_url(storage_url)) as store:
        return store.get(model, hardware or hardware_key(), concurrency)
