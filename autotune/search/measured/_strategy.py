"""The measured strategy (`--strategy measure`): an Optuna study of measured trials (`run_study`, the Tuner),
then the race of its top trials on the arbiter (`run_search`): the printed figures are the race's, not the best
of many noisy single measurements."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from datetime import datetime, timezone

import optuna

from autotune.engines import choose_engine, create_engine
from autotune.errors import AutotuneError
from autotune.hardware import hardware_key
from autotune.llamacpp.runnable import command_check
from autotune.llamacpp.server_binary import command_binary
from autotune.measure.ledger import Ledger
from autotune.race.confirm import race_study, top_trials
from autotune.race.race import round_line
from autotune.search.fleet import free_lease, lease_key
from autotune.search.inputs import (
    RaceOptions,
    SearchInputs,
    SearchOptions,
    SearchReporter,
    SearchSettings,
    check_inputs,
    runnable_space,
)
from autotune.search.measured._references import requeue_stale_trial
from autotune.search.measured._tuner import Tuner
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.study.best import BestResult, best_result
from autotune.study.catalog import latest_version, study_name, study_names
from autotune.study.records import TrialRecord, store_study
from autotune.study.trials import is_spec_default
from autotune.study.verdict import stored_verdict
from storage import open_storage, resolve_storage_url
from storage.leases import Lease, held_line


def run_search(
    options: SearchOptions,
    *,
    reporter: SearchReporter,
    server_bin: str | None = None,
    race_options: RaceOptions = RaceOptions(),
    lease: Lease | None = None,
) -> BestResult:
    """Run the study of `options.settings` (one load), then (unless disabled) re-measure its top
    configurations with the baseline, interleaved and repeated, on llama-server when a binary resolves,
    else in-process: the figures printed are those, not the best of many noisy single measurements.

    Workers of one study share its trials; its race runs under the key's lease (`lease`, the caller's,
    else one claimed without waiting): a worker that finds it held leaves the race to its holder, and one
    that finds a race stored since its finalists began does not race them again."""
    settings = options.settings
    inputs = check_inputs(options, reporter.note)
    engine_name = choose_engine(
        options.engine_name, concurrency=settings.concurrency, server_bin=server_bin, note=reporter.note
    )
    ledger = Ledger()
    with ledger.phase("trials"):
        study = run_study(
            inputs,
            settings,
            engine_name=engine_name,
            server_bin=server_bin,
            storage_url=options.storage_url,
            reporter=reporter,
            heartbeat_s=options.heartbeat_s,
        )
    multi_objective = len(study.directions) > 1  # a pareto pick is made on the front, not by decode tok/s
    check = command_check(server_bin)  # the llama-server the printed command names
    finalists = top_trials(study, race_options.top, check)
    if race_options.enabled and not multi_objective and finalists:
        with nullcontext((lease, None)) if lease is not None else free_lease(options, reporter.note) as (held, holder):
            if held is None:
                reporter.note(
                    f"{held_line(lease_key(settings), holder)} and races this study's finalists: "
                    f"`autotune best --model {settings.model}` shows its verdict once it is done"
                )
            elif _raced(study, finalists):
                reporter.note("this study's race is stored already, newer than its finalists: not racing them again")
            else:
                with ledger.phase("race"):
                    _race_finalists(study, finalists, settings, race_options, server_bin, reporter, held)
    store_study(study, cost=ledger.as_dict())
    reporter.note(ledger.line())
    return best_result(study, check=check)


def _raced(study: optuna.Study, finalists: list[optuna.trial.FrozenTrial]) -> bool:
    """Whether the study's stored race (reloaded: another worker may have raced since) ended after each of
    `finalists` began: a worker that finishes its share of the trials while another races leaves the race
    to that one, and a resumed study, whose new trials begin after the race, races again."""
    stored = stored_verdict(optuna.load_study(study_name=study.study_name, storage=study._storage))
    if stored is None:
        return False
    ended = datetime.fromisoformat(stored.date)
    return all(t.datetime_start is not None and t.datetime_start.astimezone(timezone.utc) < ended for t in finalists)


def _race_finalists(
    study: optuna.Study,
    finalists: list,
    settings: SearchSettings,
    race_options: RaceOptions,
    server_bin: str | None,
    reporter: SearchReporter,
    lease: Lease,
) -> None:
    arbiter = choose_engine(None, concurrency=settings.concurrency, server_bin=server_bin)
    references = "the baseline and --spec-default" if any(map(is_spec_default, study.trials)) else "the baseline"
    reporter.note(
        f"racing the top {len(finalists)} with {references} on the {arbiter} engine, "
        f"up to {race_options.budget.describe()}"
    )
    race_study(
        study,
        top=race_options.top,
        budget=race_options.budget,
        engine_name=arbiter,
        server_bin=server_bin,
        before_storing=lease.check,
        on_measured=lambda r, entrant, speedup: reporter.note(round_line(r, entrant, speedup)),
    )


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
    command = ServerCommand(
        model.context_size,
        tuple(model.base_flags),
        binary=binary,
        threads=settings.threads,
        sampling=settings.sampling,
        parallel=settings.concurrency,
    )
    storage = open_storage(
        resolve_storage_url(storage_url), heartbeat_interval_s=heartbeat_s, stale_trial_callback=requeue_stale_trial
    )  # a bad storage is found before any measurement
    with create_engine(
        engine_name,
        context_size=model.context_size,
        threads=settings.threads,
        server_bin=server_bin,
        base_flags=model.base_flags,
        sampling=settings.sampling,
        concurrency=settings.concurrency,
    ) as engine:
        runnable = runnable_space(
            inputs.space, engine, inputs.candidates, reporter=reporter, sampling=settings.sampling
        )
        for target in inputs.candidates.targets:
            engine.prepare(SpecConfig(target), inputs.mix, max_tokens=settings.max_tokens)
        for note in (*engine.startup_notes, *inputs.notes):
            reporter.note(note)
        name, version = latest_version(
            storage,
            study_name(
                settings.model,
                hardware_key(),
                engine.name,
                objective=settings.objective,
                concurrency=settings.concurrency,
            ),
        )
        if new_version and name in study_names(storage):
            version = (version or 1) + 1
        settings = replace(settings, version=version)
        tuner = Tuner(
            space=runnable,
            candidates=inputs.candidates,
            mix=inputs.mix,
            engine=engine,
            settings=settings,
            reporter=reporter,
            command=command,
        )
        study = tuner.run(storage, warm_start=warm_start, study_attrs=study_attrs)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        reason = (
            (TrialRecord.of(study.trials[-1]).fail_reason or "no reason recorded") if study.trials else "no trial ran"
        )
        raise AutotuneError(f"every trial failed (last: {reason}); see `autotune trials --model {settings.model}`")
    return study
