"""`autotune search` by prediction (the default at temperature 0 with one stream): measure what must be
measured, predict every configuration of the space, then race the best few on llama-server.

1. The arbiter (llama-server when one resolves, else the in-process engine) measures each target's
   baseline: its output is the trajectory every lossless configuration follows. With `--budget`, one
   prompt of it first prices the plan, and a budget too small for a verdict is refused.
2. In the worker process (autotune.engines.worker), where a crash of llama.cpp cannot take the search
   with it: where the in-process greedy output would part from the trajectory (one prefill, no second
   decode), the cost curves of the target and of each draft, the draft models' greedy chains and the
   DFlash/DSpark drafts' blocks along the trajectories (autotune.predict.target). Each target's baseline
   and model are kept until the answer is stored, so a stopped search resumes (autotune.search.targets).
   Steps 1-4 run on the mix and --max-tokens, or on a shorter prediction where the budget asks
   (autotune.search.budget.fit_budget: one prompt a category, fewer tokens); the race never does.
3. Every configuration of the space is replayed: each spec type's own grid in full, TPE across the product
   types (autotune.search.predicted_space).
4. The calibration's references, measured on the arbiter prompt by prompt, each for as many prompts as
   its fit needs (autotune.search.calibration): the baseline, `--spec-default` (a long n-gram draft) and,
   per target, one configuration of each family in the space, its best predicted under the baseline-only
   calibration (a short n-gram draft, a draft model, a block draft). Each target's cost factors are
   fitted to them (autotune.predict.predictor); that costs at most 8 prompts a reference, 3 to 5 of them.
5. The predicted study (engine part `predicted`) stores every configuration's prediction: a new run beside
   the earlier ones (autotune.study.runs), so a search stopped before its race ends deletes no verdict.
6. The race (autotune.race.race) of the finalists (each family's best within its margin, then one a region
   by their chance of being the fastest: autotune.search.finalist_cover) with the references, and, for
   `nightly`, the preset in use; its verdict is the printed one, within what `--budget` left it. Each
   finalist's predicted speedup is then compared with its raced one: the prediction's error, out of
   sample.

The search holds its key's lease (storage.leases) throughout, and the device lock from step 1 to the
race's last prompt: another search of this machine never times anything while this one does.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import replace
from datetime import datetime, timezone

import optuna

from autotune.engines import create_engine
from autotune.errors import UsageError
from autotune.hardware import hardware_key
from autotune.llamacpp.runnable import CommandCheck, command_check
from autotune.llamacpp.server_binary import command_binary
from autotune.measure.device_lock import device_lock
from autotune.measure.ledger import Ledger
from autotune.measure.prompts import PromptMix
from autotune.measure.stratified import MIN_ROUNDS
from autotune.models.files import file_sha256
from autotune.race.confirm import trial_entrant
from autotune.race.entrants import Entrant, speedup_of
from autotune.race.race import RaceStopped, race, round_line, standing_line, status_line
from autotune.search.finalists import finalists
from autotune.search.fleet import search_lease
from autotune.search.inputs import (
    RaceOptions,
    SearchInputs,
    SearchOptions,
    SearchReporter,
    SearchSettings,
    check_inputs,
    runnable_space,
)
from autotune.search.measured import measures_spec_default, run_search
from autotune.search.plan import (
    Pace,
    SearchBudget,
    SearchPlan,
    budget_line,
    draft_step_floor_s,
    eta_line,
    make_plan,
    plan_line,
)
from autotune.search.predicted._answered import finished_since, space_digest
from autotune.search.predicted._calibration import as_predicted, calibrate, fit_inputs
from autotune.search.predicted._space import replay_space, replays_at_most, store_predictions
from autotune.search.predicted._targets import MeasuredTargets
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.space import SearchSpace
from autotune.spec.types import family_of, replayable
from autotune.study.best import BestResult, best_result
from autotune.study.catalog import study_name
from autotune.study.records import (
    BASELINE_ROLE,
    PREDICTED_ENGINE,
    SPEC_DEFAULT_ROLE,
    StudyRecord,
    TrialRecord,
    config_attrs,
    store_study,
    trial_attrs,
)
from autotune.study.runs import next_run
from storage import open_storage, resolve_storage_url
from storage.leases import Lease

#: configurations the predicted study samples (TPE) where the grid is larger than it replays point by point
PREDICT_TRIALS = 400
#: a raced configuration whose measured speedup is further than this from its prediction is said so
SURPRISE = 0.15


def cannot_predict(settings: SearchSettings, space: SearchSpace | None = None) -> str | None:
    """Why this search cannot be predicted (None: it can): a replay needs greedy output, one stream,
    the decode objective, and one runtime setting the cost curves were measured with."""
    if not settings.sampling.is_greedy:
        return f"sampling at {settings.sampling.describe()} is not the baseline's greedy output"
    if settings.concurrency > 1:
        return f"{settings.concurrency} streams share the server's batches"
    if settings.objective != "decode":
        return f"the {settings.objective} objective is not a decode speed"
    if space is not None and space.runtime:
        return "the space's [runtime] table changes the step costs"
    return None


def measured_only_refused(flags: tuple[str, ...], why: str) -> UsageError:
    """The one-line refusal of flags only the measured strategy reads, given to a predicted search."""
    return UsageError(
        f"{', '.join(flags)}: only the measured strategy reads {'this' if len(flags) == 1 else 'these'}, and {why}"
    )


def run_predicted_search(
    options: SearchOptions,
    *,
    reporter: SearchReporter,
    server_bin: str | None,
    race_options: RaceOptions = RaceOptions(),
    predict_trials: int = PREDICT_TRIALS,
    lease: Lease | None = None,
    budget: SearchBudget | None = None,
) -> BestResult:
    """Predict, then race (see the module docstring) under the lease of this search's key (`lease`, or one
    claimed here: waiting for another search of the key, or LeaseHeld with --no-wait); returns the run's
    best (the race's pick). `budget` is --budget's (None: the space's default,
    autotune.search.plan.search_budget). A search that cannot be predicted (`cannot_predict`) is measured
    instead (`run_search`), said in one line."""
    inputs = check_inputs(options, reporter.note)
    reason = cannot_predict(options.settings, inputs.space)
    if reason is not None:
        reporter.note(f"not predicted: {reason}; measuring instead (as --strategy measure)")
        return run_search(options, reporter=reporter, server_bin=server_bin, race_options=race_options, lease=lease)
    if options.measured_only:
        raise measured_only_refused(
            options.measured_only,
            "this search is predicted (--strategy predict, the default): drop them, or pass --strategy measure",
        )
    waited_from: list[datetime] = []  # when this search began to wait on another of its key
    claimed = (
        nullcontext(lease)
        if lease is not None
        else search_lease(options, reporter.note, on_wait=lambda: waited_from.append(datetime.now(timezone.utc)))
    )
    with claimed as held:
        answered = (
            None
            if not waited_from or options.again
            else finished_since(
                open_storage(resolve_storage_url(options.storage_url)), inputs, options.settings, waited_from[0]
            )
        )
        if answered is not None:
            reporter.note(
                f"answering from {answered.study_name}, the search of the same files, space, prompts and "
                "length that just finished while this one waited (--again measures anew)"
            )
            return best_result(answered, check=command_check(server_bin))
        # refused or fitted to its budget before anything but its pace is measured
        plan = make_plan(
            options,
            inputs,
            race_options,
            budget,
            server_bin=server_bin,
            note=reporter.note,
            replayed=replays_at_most(inputs.space, inputs, predict_trials),
        )
        if plan.budget is not None:
            reporter.note(f"{budget_line(plan.budget, plan.work)}; pace: {plan.pace_line}")
        study = predict_and_race(
            inputs,
            options.settings,
            plan,
            storage_url=options.storage_url,
            server_bin=server_bin,
            predict_trials=predict_trials,
            reporter=reporter,
            lease=held,
        )
    return best_result(study, check=command_check(server_bin))


def predict_and_race(
    inputs: SearchInputs,
    settings: SearchSettings,
    plan: SearchPlan,
    *,
    storage_url: str | None,
    server_bin: str | None,
    predict_trials: int,
    reporter: SearchReporter,
    lease: Lease,
    preset: SpecConfig | None = None,
    study_attrs: dict | None = None,
    new_files: frozenset[str] = frozenset(),
) -> optuna.Study:
    """Steps 1-6 of the module docstring on checked inputs, as `plan` says (autotune.search.plan.make_plan), under
    `lease` (this search's key) and the device lock from the baseline to the race's last prompt; `preset` (the
    configuration in use) races beside the finalists, and the best predicted with each of `new_files` (a night's
    new release) among them. Returns the new run (autotune.study.runs), its race stored with it; earlier runs stay
    as they were. Under a budget the race gets what the phases before it left of it (the clock starts once the
    device is ours)."""
    storage = open_storage(resolve_storage_url(storage_url))  # a bad storage is found before any measurement
    for note in inputs.notes:
        reporter.note(note)
    with device_lock(lambda device: reporter.note(f"waiting: another autotune search is measuring on {device}")):
        deadline = None if plan.budget is None else time.monotonic() + plan.budget.seconds
        return _predict_and_race(
            inputs,
            settings,
            plan,
            storage,
            server_bin=server_bin,
            predict_trials=predict_trials,
            reporter=reporter,
            lease=lease,
            preset=preset,
            study_attrs=study_attrs,
            new_files=new_files,
            deadline=deadline,
        )


def _predict_and_race(
    inputs: SearchInputs,
    settings: SearchSettings,
    plan: SearchPlan,
    storage: optuna.storages.BaseStorage,
    *,
    server_bin: str | None,
    predict_trials: int,
    reporter: SearchReporter,
    lease: Lease,
    preset: SpecConfig | None,
    study_attrs: dict | None,
    new_files: frozenset[str],
    deadline: float | None,
) -> optuna.Study:
    """Steps 1-4 run on the plan's prediction (`predicting`: its prompts and tokens), the race on its race."""
    model = inputs.space.model
    mix = plan.predicted_mix(inputs.mix)
    predicting = replace(inputs, mix=mix)
    settings = replace(settings, max_tokens=plan.predicted.tokens)
    if plan.predicted != plan.raced:
        reporter.note(
            f"predicting on {len(mix)} prompts x {plan.predicted.tokens} tokens, within the budget; the "
            f"race runs {plan.raced.prompts} x {plan.raced.tokens}"
        )
    arbiter = plan.arbiter
    binary, missing = command_binary(server_bin)
    if missing:
        reporter.note(missing)
    check = command_check(server_bin)
    command = ServerCommand(
        model.context_size, tuple(model.base_flags), binary=binary, threads=settings.threads, sampling=settings.sampling
    )
    arbiter_command = replace(command, binary=check.binary) if arbiter == "server" else command
    engine_args = dict(
        context_size=model.context_size,
        threads=settings.threads,
        server_bin=server_bin,
        base_flags=model.base_flags,
        sampling=settings.sampling,
    )
    ledger = Ledger()
    with ledger.phase("baseline"), create_engine(arbiter, **engine_args) as engine:
        for note in engine.startup_notes:
            reporter.note(note)
        space = _predictable(
            runnable_space(inputs.space, engine, inputs.candidates, reporter, sampling=settings.sampling), reporter
        )
        with_spec_default = measures_spec_default(engine)
        measured = MeasuredTargets(predicting, settings, engine.build_info, reporter.note)
        baselines = measured.baselines(engine, arbiter)
        build = engine.build_info
    plan = plan.priced(predicting, space, replays_at_most(space, predicting, predict_trials), _pace(baselines))
    phases = plan.phases()
    reporter.note(plan_line(phases))
    ledger.on_phase_end = lambda: reporter.note(eta_line(phases, ledger))
    targets = measured.models(space, arbiter, ledger)
    with ledger.phase("replay"):
        replayed, grid = replay_space(
            space, predicting, targets, trials=predict_trials, seed=settings.seed, reporter=reporter
        )
    with ledger.phase("calibration"), create_engine(arbiter, **engine_args) as engine:
        references = calibrate(
            targets,
            replayed,
            engine,
            mix,
            max_tokens=settings.max_tokens,
            command=arbiter_command,
            runs=check if arbiter == "server" else None,
            with_spec_default=with_spec_default,
            note=reporter.note,
            seed=settings.seed or 0,
        )
    name = next_run(storage, study_name(settings.model, hardware_key(), PREDICTED_ENGINE))
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    store_study(
        study,
        model=settings.model,
        hardware=hardware_key(),
        engine=PREDICTED_ENGINE,
        objective="decode",
        measurement={
            "prompts": [p.id for p in inputs.mix],
            "prompt_source": inputs.mix.source,
            "max_tokens": plan.raced.tokens,
            "repeats": 1,
            "sampling": settings.sampling.as_dict(),
        },
        files=inputs.candidates.fingerprint(),
        llama_server=command.as_dict(),
        space=space_digest(inputs.space),
        **(study_attrs or {}),
    )
    baseline_numbers = _add_references(study, targets, references, command, arbiter, build, [p.category for p in mix])
    store_predictions(study, replayed, targets, command, baseline_numbers, [p.category for p in mix])
    store_study(
        study,
        prediction={
            "trajectories": {str(t): m.trajectories.as_dict() for t, m in targets.items()},
            "costs": {str(t): m.cost.as_dict() for t, m in targets.items()},
            "calibration": {
                str(t): {**m.calibration.as_dict(), "references": [e.label for e in references if e.config.target == t]}
                for t, m in targets.items()
            },
            "predicted_configurations": len(replayed),
            "grid": grid,
            "measured_on": {"prompts": [p.id for p in mix], "max_tokens": settings.max_tokens},
        },
    )
    if deadline is not None:
        plan, asked = plan.racing_within(deadline - time.monotonic())
        if plan.race_top < asked:
            reporter.note(
                f"the race takes {plan.race_top} finalists of the {asked} asked: {MIN_ROUNDS} complete "
                f"rounds of every entrant in the {plan.race_budget.describe()} the budget leaves it"
            )
    with ledger.phase("race"):
        entrants = _race(
            study,
            inputs.mix,
            plan,
            engine_args,
            arbiter_command,
            reporter,
            check,
            preset,
            new_files,
            lease,
            seed=settings.seed or 0,
        )
    if plan.predicted == plan.raced:  # a refit needs the race's prompts and length
        _refit(study, targets, entrants, inputs.mix)
    store_study(study, cost=ledger.as_dict())
    measured.forget()
    reporter.note(ledger.line())
    return study


def _pace(baselines: dict) -> Pace:
    """The pace of the baselines a search measured, each target's own."""
    tok_s = {target.name: m.mix_tok_s for target, m in baselines.items() if m.mix_tok_s > 0}
    results = [r for m in baselines.values() for r in m.results]
    request_s = sum(r.prompt_ms for r in results) / len(results) / 1000 if results else 0.0
    start_s = max((m.startup_ms / 1000 for m in baselines.values()), default=0.0)
    prefill = min((m.prompt_tok_s for m in baselines.values() if m.prompt_tok_s > 0), default=None)
    return Pace(
        min(tok_s.values(), default=1.0),
        start_s,
        request_s,
        per_target=tuple(tok_s.items()),
        prefill_tok_s=prefill,
        draft_floor_s=draft_step_floor_s(),
    )


def _predictable(space: SearchSpace, reporter: SearchReporter) -> SearchSpace:
    """The part of `space` the replay covers; the rest is said in one line (measure it: --strategy measure)."""
    left = sorted(t for t in space.spec_types if not replayable(t))
    if left:
        reporter.note(
            f"not predicted: {', '.join(left)} (the replay covers the n-gram types, draft-simple and their "
            "combinations, and draft-dflash and draft-dspark alone); --strategy measure measures them"
        )
    return space.restricted_to({t for t in space.spec_types if replayable(t)})


def _add_references(
    study: optuna.Study,
    targets: dict,
    references: list[Entrant],
    command: ServerCommand,
    arbiter: str,
    build: str,
    categories: list[str],
) -> dict[str, int]:
    """The baselines (their trajectory measurements) and `--spec-default` (its calibration round, its speedup
    over the baseline of that round) as the study's first trials; returns each target's baseline trial number."""
    numbers = {str(target): number for number, target in enumerate(targets)}
    rows = [(BASELINE_ROLE, m.target, m.baseline, 1.0) for m in targets.values()]
    rows += [
        (SPEC_DEFAULT_ROLE, e.config, e.rounds[0], speedup_of(e, references, "mix_tok_s", "prompt").ratio)
        for e in references
        if e.role == SPEC_DEFAULT_ROLE and as_predicted(e, targets)
    ]
    for role, config, measurement, speedup in rows:
        model = targets[config.target]
        attrs = trial_attrs(
            role=role,
            target=str(config.target),
            config=config_attrs(config),
            argv=command.argv(config),
            engine=arbiter,
            llama_cpp_build=build,
            hardware=hardware_key(),
            model_files={p.name: file_sha256(p) for p in {config.target, config.draft} if p},
            figures=measurement.summary(),
            per_prompt=[r.figures() for r in measurement.results],
            per_category=measurement.per_category(),
            output_tokens=[r.tokens for r in measurement.results],
            speedup=None if role == BASELINE_ROLE else round(speedup, 4),
            speedup_baseline_trial=numbers[str(config.target)],
            predicted=model.prediction(config).as_dict(model.prediction(model.target), categories),
        )
        study.add_trial(optuna.trial.create_trial(value=speedup, user_attrs=attrs))
    return numbers


def _race(
    study: optuna.Study,
    mix: PromptMix,
    plan: SearchPlan,
    engine_args: dict,
    command: ServerCommand,
    reporter: SearchReporter,
    check: CommandCheck,
    preset: SpecConfig | None,
    new_files: frozenset[str],
    lease: Lease,
    *,
    seed: int,
) -> list[Entrant]:
    """Race the finalists whose command `check`'s llama-server runs with the references (and the preset);
    store the race as the study's confirmation, while `lease` is still ours (a race another worker took over
    is not stored twice); returns the entrants with what they measured."""
    entrants = [
        trial_entrant(t, TrialRecord.of(t).role)
        for t in study.trials
        if TrialRecord.of(t).role in (BASELINE_ROLE, SPEC_DEFAULT_ROLE)
    ]
    picked = finalists(study, plan.race_top, check, new_files)
    entrants += [trial_entrant(t) for t, _ in picked]
    if preset is not None:
        entrants.append(Entrant("preset", None, preset, family_of(preset.spec_type)))
    reporter.note(
        f"racing {len(picked)} predicted finalists with the references on the {plan.arbiter} engine, up to "
        f"{plan.race_budget.describe()}: "
        + "; ".join(
            f"{TrialRecord.of(t).label} ({family_of(TrialRecord.of(t).spec_type)}: {why}, predicted {t.value:.2f}x)"
            for t, why in picked
        )
    )
    try:
        with create_engine(plan.arbiter, **engine_args) as engine:
            confirmation = race(
                engine,
                entrants,
                mix,
                max_tokens=plan.raced.tokens,
                budget=plan.race_budget,
                command=command,
                on_measured=lambda r, entrant, speedup: reporter.note(round_line(r, entrant, speedup)),
                on_dropped=lambda e: reporter.note(
                    f"race: {e.label} leaves in round {e.dropped_after + 1}: {e.dropped}"
                ),
                on_start=reporter.note,
                on_look=lambda status: reporter.race_status(status_line(status)),
                seed=seed,
                replicate_on=_first_of_each_category(mix) if plan.work.replicate_per_category else None,
            )
    except RaceStopped as stopped:  # the standing result is kept, undecided, and the stop goes on
        lease.check()
        store_study(study, confirmation=stopped.confirmation.as_dict())
        reporter.note(standing_line(stopped.confirmation, study.study_name))
        raise
    lease.check()
    store_study(study, confirmation=confirmation.as_dict())
    by_number = {t.number: TrialRecord.of(t) for t in study.trials}
    for row in confirmation.configs:
        predicted = by_number[row.trial].predicted.get("speedup") if row.trial is not None else None
        if row.speedup and predicted and abs(predicted / row.speedup - 1) > SURPRISE:
            reporter.note(
                f"{row.label}: predicted {predicted:.2f}x, raced {row.speedup:.2f}x "
                f"({predicted / row.speedup - 1:+.0%}): more than {SURPRISE:.0%} off"
            )
    return entrants


def _first_of_each_category(mix: PromptMix) -> list[int]:
    """The index in `mix` of each category's first prompt (PromptMix.take's one a category)."""
    first = set(mix.take(per_category=1).prompts)
    return [index for index, prompt in enumerate(mix) if prompt in first]


def _refit(study: optuna.Study, targets: dict, entrants: list[Entrant], mix: PromptMix) -> None:
    """Store each target's calibration refitted with everything the race measured, on the prompts each
    entrant ran (for the next run to compare with; the printed errors stay the out-of-sample ones)."""
    stored = dict(StudyRecord.of(study).prediction)
    stored["calibration_refit"] = {
        str(target): model.calibrate(measured).as_dict()
        for target, model in targets.items()
        if (measured := fit_inputs(entrants, targets, mix, target))
    }
    store_study(study, prediction=stored)
