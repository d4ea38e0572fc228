"""`autotune search`: check every input first, then open storage, then measure, then confirm.

Everything that can be wrong with the user's input (model name, files, prompts, search space,
storage) is found before a study is created, so bad input never leaves rows in the database. The
study's trials are measured by the engine the user asked for; its winners are confirmed by the
arbiter (llama-server when one resolves), and the printed figures are the confirmation's.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import optuna

from autotune.engines import DEFAULT_ENGINE, Engine, choose_engine, create_engine
from autotune.errors import AutotuneError, ModelFileError, SearchSpaceError
from autotune.hardware import hardware_key
from autotune.llamacpp.runnable import command_check
from autotune.llamacpp.server_binary import command_binary
from autotune.measure.ledger import Ledger
from autotune.measure.prompts import PromptMix, default_mix_path, load_prompt_mix
from autotune.models.adhoc import adhoc_space
from autotune.models.candidates import Candidates, find_candidates
from autotune.models.files import PULL_HINT, ModelFiles, missing_hub_files, resolve_model_files
from autotune.models.hub import fetch_missing, offline_mode
from autotune.models.hub_names import HubRef
from autotune.models.hub_space import hub_space
from autotune.race.confirm import confirm_study, top_trials
from autotune.race.race import DEFAULT_BUDGET, RaceBudget, round_line
from autotune.search.leased import free_lease, lease_key
from autotune.search.references import requeue_stale_trial
from autotune.search.tuner import SearchReporter, SearchSettings, Tuner
from autotune.settings import default_models_dir
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.sampling import GREEDY, Sampling
from autotune.spec.space import SearchSpace, load_model_space
from autotune.spec.types import DRAFT_SAMPLING, is_combination
from autotune.study.best import BestResult, best_result
from autotune.study.catalog import latest_version, study_name, study_names
from autotune.study.records import TrialRecord, store_study
from autotune.study.trials import is_spec_default
from autotune.study.verdict import stored_confirmation
from storage import open_storage, resolve_storage_url
from storage.leases import Lease, held_line


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
    """What the user asked `search` or `nightly` to measure (`settings`, one study per `levels` entry),
    where its inputs come from and where the study is kept."""

    settings: SearchSettings
    engine_name: str = DEFAULT_ENGINE
    prompts_file: Path | None = None
    per_category: int | None = 1
    storage_url: str | None = None
    models_dir: Path | None = None  # None: the user data dir's (autotune.settings)
    space_file: Path | None = None
    heartbeat_s: int = 60  # of the key's lease (storage.leases) and of a measured study's trials
    wait: bool = True  # --wait/--no-wait: for another search of this key to end, or LeaseHeld at once
    levels: tuple[int, ...] = (1,)  # --concurrency: a study per level
    target_file: Path | None = None  # --target: an ad-hoc model, its space inferred (autotune.models.adhoc)
    draft_files: tuple[Path, ...] = ()  # --draft, with --target
    hf: str | None = None  # --hf ORG/REPO[:QUANT]: a hub repo's space, found by names (autotune.models.hub_space)
    draft_hf: str | None = None  # --draft-hf, with --hf: draft-simple drafts from another repo
    offline: bool = False  # --offline: download nothing from the hub (as HF_HUB_OFFLINE=1)
    measured_only: tuple[str, ...] = ()  # flags the user gave that only the measured strategy reads
    again: bool = False  # --again: measure anew, even where a search of the same inputs just finished

    @property
    def model(self) -> str:
        return self.settings.model

    def at_level(self, concurrency: int) -> "SearchOptions":
        """These options for the study of `concurrency` streams."""
        return replace(self, settings=replace(self.settings, concurrency=concurrency))


@dataclass(frozen=True)
class ConfirmOptions:
    """How a search ends: its `top` best race the references on the arbiter (llama-server when one
    resolves) within `budget` (--race-top, --race-budget); `enabled` is --confirm/--no-confirm, which only
    the measured strategy has (the predicted one's answer is its race)."""

    enabled: bool = True
    top: int = 4
    budget: RaceBudget = RaceBudget.parse(DEFAULT_BUDGET)
    replicate_per_category: bool = False  # the round after the decision on one prompt a category (a budget's)


def check_inputs(options: SearchOptions, note: Callable[[str], None]) -> SearchInputs:
    """Load and check everything the user named; a draft type none of whose pairs can run is an error.
    Hub files the space names that are not on disk are downloaded first (`note` hears the line before
    the download starts). What is only left out (a missing quant, one refused pair among good ones, a
    file not downloaded offline) becomes a note, said once the storage has opened (run_study): bad input
    found later is then the one line a user sees."""
    threads = options.settings.threads
    offline = options.offline or offline_mode()
    space = model_space(options, note, offline=offline)
    if threads and any(r.param.name == "threads" for r in space.runtime):
        raise SearchSpaceError(f"{space.path}: [runtime] searches threads, and --threads {threads} fixes them: "
                               "drop one of the two")
    mix = load_prompt_mix(options.prompts_file) if options.prompts_file else None
    models_dir = options.models_dir or default_models_dir()
    not_fetched = fetch_missing(missing_hub_files(space, models_dir), offline=offline, on_start=note)
    files = resolve_model_files(space, models_dir, offline=offline)
    candidates = find_candidates(files)
    for spec_type in space.spec_types:
        refused = [r for r in candidates.refused if r.spec_type == spec_type]
        if refused and not candidates.pairs.get(spec_type):
            raise ModelFileError(
                f"{refused[0].describe()}; fix the drafts of {spec_type} in {space.path} or remove [spec_types.{spec_type}]"
            )
    notes = [not_fetched] if not_fetched else []
    for pattern in files.missing:
        hint = "" if pattern.endswith(f"({PULL_HINT})") else " (`autotune quantize` writes a missing quant)"
        notes.append(f"no file matches {pattern}: left out{hint}")
    notes += [f"not runnable: {refused.describe()}" for refused in candidates.refused]
    if mix is None:  # the bundled mix that suits the targets: continuations for a base model
        prompts_file, mix_note = default_mix_path(candidates.targets)
        mix = load_prompt_mix(prompts_file)
        notes += [mix_note] if mix_note else []
    return SearchInputs(space=space, mix=mix.take(per_category=options.per_category), files=files, candidates=candidates,
                        notes=tuple(notes))


def model_space(options: SearchOptions, note: Callable[[str], None], *, offline: bool) -> SearchSpace:
    """The space the user named: a hub repo's (--hf, its files downloaded unless `offline`), local files'
    (--target), else a search-space file (--space, or the model's bundled one)."""
    model = options.settings.model
    if options.hf:
        return hub_space(HubRef.parse(options.hf), draft_ref=HubRef.parse(options.draft_hf) if options.draft_hf else None,
                         name=model, offline=offline, note=note)
    if options.target_file:
        return adhoc_space(options.target_file, options.draft_files, name=model)
    return load_model_space(model, options.space_file)


def run_search(options: SearchOptions, *, reporter: SearchReporter, server_bin: str | None = None,
               confirm_options: ConfirmOptions = ConfirmOptions(), lease: Lease | None = None) -> BestResult:
    """Run the study of `options.settings` (one load), then (unless disabled) re-measure its top
    configurations with the baseline, interleaved and repeated, on llama-server when a binary resolves,
    else in-process: the figures printed are those, not the best of many noisy single measurements.

    Workers of one study share its trials; its race runs under the key's lease (`lease`, the caller's,
    else one claimed without waiting): a worker that finds it held leaves the race to its holder, and one
    that finds a race stored since its finalists began does not race them again."""
    settings = options.settings
    inputs = check_inputs(options, reporter.note)
    engine_name = choose_engine(options.engine_name, concurrency=settings.concurrency, server_bin=server_bin,
                                note=reporter.note)
    ledger = Ledger()
    with ledger.phase("trials"):
        study = run_study(inputs, settings, engine_name=engine_name, server_bin=server_bin,
                          storage_url=options.storage_url, reporter=reporter, heartbeat_s=options.heartbeat_s)
    multi_objective = len(study.directions) > 1  # a pareto pick is made on the front, not by decode tok/s
    check = command_check(server_bin)  # the llama-server the printed command names
    finalists = top_trials(study, confirm_options.top, check)
    if confirm_options.enabled and not multi_objective and finalists:
        with nullcontext((lease, None)) if lease is not None else free_lease(options, reporter.note) as (held, holder):
            if held is None:
                reporter.note(f"{held_line(lease_key(settings), holder)} and races this study's finalists: "
                              f"`autotune best --model {settings.model}` shows its verdict once it is done")
            elif _raced(study, finalists):
                reporter.note("this study's race is stored already, newer than its finalists: not racing them again")
            else:
                with ledger.phase("race"):
                    _race_finalists(study, finalists, settings, confirm_options, server_bin, reporter, held)
    store_study(study, cost=ledger.as_dict())
    reporter.note(ledger.line())
    return best_result(study, check=check)


def _raced(study: optuna.Study, finalists: list[optuna.trial.FrozenTrial]) -> bool:
    """Whether the study's stored race (reloaded: another worker may have raced since) ended after each of
    `finalists` began: a worker that finishes its share of the trials while another races leaves the race
    to that one, and a resumed study, whose new trials begin after the race, races again."""
    stored = stored_confirmation(optuna.load_study(study_name=study.study_name, storage=study._storage))
    if stored is None:
        return False
    ended = datetime.fromisoformat(stored.date)
    return all(t.datetime_start is not None and t.datetime_start.astimezone(timezone.utc) < ended for t in finalists)


def _race_finalists(study: optuna.Study, finalists: list, settings: SearchSettings, confirm_options: ConfirmOptions,
                    server_bin: str | None, reporter: SearchReporter, lease: Lease) -> None:
    arbiter = choose_engine(None, concurrency=settings.concurrency, server_bin=server_bin)
    references = "the baseline and --spec-default" if any(map(is_spec_default, study.trials)) else "the baseline"
    reporter.note(f"racing the top {len(finalists)} with {references} on the {arbiter} engine, "
                  f"up to {confirm_options.budget.describe()}")
    confirm_study(study, top=confirm_options.top, budget=confirm_options.budget, engine_name=arbiter,
                  server_bin=server_bin, before_storing=lease.check,
                  on_measured=lambda r, entrant, speedup: reporter.note(round_line(r, entrant, speedup)))


def run_study(
    inputs: SearchInputs,
    settings: SearchSettings,
    *,
    engine_name: str,
    server_bin: str | None,
    storage_url: str | None,
    reporter: SearchReporter,
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
    command = ServerCommand(model.context_size, tuple(model.base_flags), binary=binary, threads=settings.threads,
                            sampling=settings.sampling, parallel=settings.concurrency)
    storage = open_storage(resolve_storage_url(storage_url), heartbeat_interval_s=heartbeat_s,
                           stale_trial_callback=requeue_stale_trial)  # a bad storage is found before any measurement
    with create_engine(
        engine_name, context_size=model.context_size, threads=settings.threads, server_bin=server_bin,
        base_flags=model.base_flags, sampling=settings.sampling, concurrency=settings.concurrency,
    ) as engine:
        runnable = runnable_space(inputs.space, engine, inputs.candidates, reporter=reporter, sampling=settings.sampling)
        for target in inputs.candidates.targets:
            engine.prepare(SpecConfig(target), inputs.mix, max_tokens=settings.max_tokens)
        for note in (*engine.startup_notes, *inputs.notes):
            reporter.note(note)
        name, version = latest_version(
            storage, study_name(settings.model, hardware_key(), engine.name, objective=settings.objective,
                                concurrency=settings.concurrency))
        if new_version and name in study_names(storage):
            version = (version or 1) + 1
        settings = replace(settings, version=version)
        tuner = Tuner(space=runnable, candidates=inputs.candidates, mix=inputs.mix, engine=engine, settings=settings,
                      reporter=reporter, command=command)
        study = tuner.run(storage, warm_start=warm_start, study_attrs=study_attrs)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        reason = (TrialRecord.of(study.trials[-1]).fail_reason or "no reason recorded") if study.trials else "no trial ran"
        raise AutotuneError(f"every trial failed (last: {reason}); see `autotune trials --model {settings.model}`")
    return study


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
