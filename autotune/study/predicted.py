"""`autotune search` by prediction (the default at temperature 0 with one stream): measure the references
once, predict every configuration of the space, then race the best few on llama-server.

1. The arbiter (llama-server when one resolves, else the in-process engine) measures each target's
   baseline and `--spec-default`: the baseline's output is the trajectory every lossless configuration
   follows, and both runs calibrate the cost model.
2. In-process, where it is cheap and repeatable: the baseline again (where its output parts from the
   arbiter's is recorded per prompt), the cost curves of the target and of each draft, the draft
   models' greedy chains and the DFlash/DSpark drafts' blocks along the trajectories.
3. A predicted study (the study name's engine part is `predicted`) replays and costs every configuration
   the sampler proposes: exhaustively where the grid is small (BruteForceSampler), else with TPE.
4. The race (autotune.study.race): the K best, no two with the same type and the same replayed counts,
   with the references, in interleaved rounds on the arbiter; the calibration is refitted with what it
   measured, and the printed command and figures are the race's.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace

import optuna

from autotune.engines import choose_engine, create_engine
from autotune.engines.dflash.drafter import DFLASH_TYPES
from autotune.engines.drafters.build import CHAINABLE_TYPES
from autotune.engines.python import PythonEngine
from autotune.errors import TrialFailure
from autotune.hardware import hardware_key
from autotune.llamacpp.runnable import CommandCheck, command_check
from autotune.llamacpp.server_binary import command_binary
from autotune.models.files import file_sha256
from autotune.predict.block_drafts import BlockPlan
from autotune.predict.chains import chain_length
from autotune.predict.predictor import Prediction
from autotune.predict.target import measure_target
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config
from autotune.spec.space import SearchSpace
from autotune.spec.types import DRAFT_MODEL_TYPES, spec_members
from autotune.study.best import BestResult, best_result
from autotune.study.catalog import study_name, study_names
from autotune.study.race import Entrant, race
from autotune.study.records import (
    BASELINE_ROLE, SPEC_DEFAULT_ROLE, StudyRecord, TrialRecord, config_attrs, store_study, store_trial, trial_attrs,
)
from autotune.study.references import measures_spec_default
from autotune.study.search import (
    ConfirmOptions, SearchInputs, SearchOptions, check_inputs, run_search, runnable_space,
)
from autotune.study.suggest import suggest_config
from autotune.study.tuner import SearchReporter, SearchSettings
from storage import open_storage, resolve_storage_url

PREDICTED_ENGINE = "predicted"
#: a grid at most this large is predicted point by point; a larger one by this many TPE trials
BRUTE_FORCE_LIMIT = 2000
#: two predicted configurations of one type this close in speedup race as one (the better)
NEAR = 0.02
#: a raced configuration whose measured speedup is further than this from its prediction is said so
SURPRISE = 0.15


@dataclass(frozen=True)
class RaceOptions:
    """How `search` predicts and races (--race-top, --race-rounds, --predict-trials)."""

    top: int = 4
    rounds: int = 3
    predict_trials: int = 400


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


def replayable(spec_type: str) -> bool:
    """Whether the replay covers `spec_type`: the engine's chainable drafters and their combinations, or
    DFlash/DSpark on their own (their blocks; the in-process engine chains them with nothing)."""
    return spec_type in DFLASH_TYPES or all(member in CHAINABLE_TYPES or member == "none"
                                            for member in spec_members(spec_type))


def run_predicted_search(options: SearchOptions, *, reporter: SearchReporter, server_bin: str | None,
                         race_options: RaceOptions = RaceOptions(),
                         confirm_options: ConfirmOptions = ConfirmOptions()) -> BestResult:
    """Predict, then race (see the module docstring); returns the study's best (the race's winner). A search
    that cannot be predicted (`cannot_predict`) is measured instead (`run_search`), said in one line."""
    settings = options.settings
    inputs = check_inputs(options, reporter.note)
    reason = cannot_predict(settings, inputs.space)
    if reason is not None:
        reporter.note(f"not predicted: {reason}; measuring instead (as --strategy measure)")
        return run_search(options, reporter=reporter, server_bin=server_bin, confirm_options=confirm_options)
    model = inputs.space.model
    arbiter = choose_engine(None, server_bin=server_bin)
    binary, missing = command_binary(server_bin)
    if missing:
        reporter.note(missing)
    command = ServerCommand(model.context_size, tuple(model.base_flags), binary=binary, threads=settings.threads,
                            sampling=settings.sampling)
    engine_args = dict(context_size=model.context_size, threads=settings.threads, server_bin=server_bin,
                       base_flags=model.base_flags, sampling=settings.sampling)
    with create_engine(arbiter, **engine_args) as engine:
        for note in engine.startup_notes:
            reporter.note(note)
        space = runnable_space(inputs.space, engine, inputs.candidates, reporter, sampling=settings.sampling)
        space = _predictable(space, reporter)
        references = {}
        for target in inputs.candidates.targets:
            engine.prepare(SpecConfig(target), inputs.mix, max_tokens=settings.max_tokens)
            reporter.note(f"measuring the baseline of {target.name} on the {arbiter} engine: its output is the trajectory")
            baseline = engine.measure(SpecConfig(target), inputs.mix, max_tokens=settings.max_tokens)
            spec_default = None
            if measures_spec_default(engine):
                spec_default = engine.measure(spec_default_config(target), inputs.mix, max_tokens=settings.max_tokens)
            references[target] = (baseline, spec_default)
        build = engine.build_info
    targets = _target_models(inputs, settings, arbiter, references, space, reporter)
    storage = open_storage(resolve_storage_url(options.storage_url))
    for note in inputs.notes:
        reporter.note(note)
    name = study_name(settings.model, hardware_key(), PREDICTED_ENGINE)
    if name in study_names(storage):
        reporter.note(f"replacing the earlier predicted study {name!r}")
        optuna.delete_study(study_name=name, storage=storage)
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    store_study(study, model=settings.model, hardware=hardware_key(), engine=PREDICTED_ENGINE, objective="decode",
                measurement={"prompts": [p.id for p in inputs.mix], "prompt_source": inputs.mix.source,
                             "max_tokens": settings.max_tokens, "repeats": 1, "sampling": settings.sampling.as_dict()},
                files=inputs.candidates.fingerprint(), llama_server=command.as_dict())
    baselines = _add_references(study, targets, command, arbiter, build)
    _predict_space(study, space, inputs, targets, command, baselines, race_options.predict_trials, settings.seed,
                   reporter)
    check = command_check(server_bin)
    _race(study, targets, inputs, settings, command, arbiter, engine_args, race_options, reporter, check)
    return best_result(study, check=check)


def _predictable(space: SearchSpace, reporter: SearchReporter) -> SearchSpace:
    """The part of `space` the replay covers; the rest is said in one line (measure it: --strategy measure)."""
    left = sorted(t for t in space.spec_types if not replayable(t))
    if left:
        reporter.note(f"not predicted: {', '.join(left)} (the replay covers the n-gram types, draft-simple and their "
                      "combinations, and draft-dflash and draft-dspark alone); --strategy measure measures them")
    return space.restricted_to({t for t in space.spec_types if replayable(t)})


def _target_models(inputs: SearchInputs, settings: SearchSettings, arbiter: str,
                   references: dict, space: SearchSpace, reporter: SearchReporter) -> dict:
    """Each target's trajectories, cost curves, draft chains and initial calibration, measured in-process."""
    drafts_of: dict = {}
    blocks_of: dict = {}
    for spec_type, pairs in inputs.candidates.pairs.items():
        if spec_type not in space.spec_types:
            continue
        for target, draft in pairs:
            if spec_type in DFLASH_TYPES:
                blocks_of.setdefault(target, []).append((BlockPlan.of(space, spec_type), draft))
            elif spec_type in DRAFT_MODEL_TYPES:
                drafts_of.setdefault(target, set()).add(draft)
    model = inputs.space.model
    with PythonEngine(context_size=model.context_size, threads=settings.threads, base_flags=model.base_flags,
                      sampling=settings.sampling) as local:
        return {target: measure_target(local, target, baseline, spec_default, inputs.mix, arbiter=arbiter,
                                       max_tokens=settings.max_tokens, drafts=sorted(drafts_of.get(target, ())),
                                       chain_length=chain_length(space), block_drafts=blocks_of.get(target, []),
                                       note=reporter.note)
                for target, (baseline, spec_default) in references.items()}


def _add_references(study: optuna.Study, targets: dict, command: ServerCommand, arbiter: str,
                    build: str) -> dict[str, int]:
    """The measured references as the study's first trials, baselines first (what every speedup is over);
    returns each target's baseline trial number."""
    baselines = {str(target): number for number, target in enumerate(targets)}
    rows = [(BASELINE_ROLE, m.target, m.baseline, m) for m in targets.values()]
    rows += [(SPEC_DEFAULT_ROLE, spec_default_config(m.target.target), m.spec_default, m)
             for m in targets.values() if m.spec_default is not None]
    for role, config, measurement, target_model in rows:
        speedup = measurement.mix_tok_s / target_model.baseline.mix_tok_s
        attrs = trial_attrs(
            role=role, target=str(config.target), config=config_attrs(config), argv=command.argv(config),
            engine=arbiter, llama_cpp_build=build, hardware=hardware_key(),
            model_files={p.name: file_sha256(p) for p in {config.target, config.draft} if p},
            figures=measurement.summary(), per_prompt=[r.figures() for r in measurement.results],
            per_category=measurement.per_category(), output_tokens=[r.tokens for r in measurement.results],
            speedup=None if role == BASELINE_ROLE else round(speedup, 4),
            speedup_baseline_trial=baselines[str(config.target)],
            predicted=target_model.prediction(config).as_dict(),
        )
        study.add_trial(optuna.trial.create_trial(value=speedup, user_attrs=attrs))
    return baselines


def _predict_space(study: optuna.Study, space: SearchSpace, inputs: SearchInputs, targets: dict,
                   command: ServerCommand, baselines: dict[str, int], trials: int, seed: int | None,
                   reporter: SearchReporter) -> None:
    """Replay and cost the space's configurations in an in-memory study, then store its trials."""
    grid = _grid_size(space, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if grid <= BRUTE_FORCE_LIMIT:
            sampler = optuna.samplers.BruteForceSampler(seed=seed)
            budget = grid
        else:
            sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=50)
            budget = trials
    scratch = optuna.create_study(direction="maximize", sampler=sampler)
    seen: dict[tuple, Prediction] = {}
    skipped: dict[tuple, str] = {}

    def objective(trial: optuna.Trial) -> float:
        config = suggest_config(trial, space, inputs.candidates)
        label = (config.describe(), str(config.target), str(config.draft))
        if label not in seen and label not in skipped:
            try:
                seen[label] = targets[config.target].prediction(config)
            except TrialFailure as exc:
                skipped[label] = str(exc)
        if label in skipped:
            raise optuna.TrialPruned(skipped[label])
        predicted = seen[label]
        store_trial(
            trial,
            config=config_attrs(config), argv=command.argv(config), engine=PREDICTED_ENGINE,
            hardware=hardware_key(), predicted=predicted.as_dict(), speedup=predicted.as_dict()["speedup"],
            figures={"mix_tok_s": round(predicted.tok_s, 3), "acceptance": predicted.replay.acceptance,
                     "n_drafted": predicted.replay.drafted, "n_accepted": predicted.replay.accepted},
            speedup_baseline_trial=baselines[str(config.target)],
            lossless=None, lossless_reason="not measured: predicted along the baseline's output",
        )
        return predicted.speedup or 0.0

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    scratch.optimize(objective, n_trials=budget)
    if skipped:
        reporter.note(f"{len(skipped)} configurations not predicted, e.g. {next(iter(skipped.values()))}")
    reporter.note(f"predicted {len(seen)} configurations ({'every point of the grid' if grid <= BRUTE_FORCE_LIMIT else f'{budget} TPE trials over a grid of {grid}'})")
    complete = [t for t in scratch.trials if t.state == optuna.trial.TrialState.COMPLETE]
    study.add_trials([replace_trial(t) for t in complete])
    store_study(study, prediction={
        "trajectories": {str(t): m.trajectories.as_dict() for t, m in targets.items()},
        "costs": {str(t): m.cost.as_dict() for t, m in targets.items()},
        "calibration": {str(t): m.calibration.as_dict() for t, m in targets.items()},
        "predicted_configurations": len(seen), "grid": grid,
    })


def replace_trial(trial: optuna.trial.FrozenTrial) -> optuna.trial.FrozenTrial:
    """A scratch trial as a new trial of the stored study (its number is the stored study's to give)."""
    return optuna.trial.create_trial(params=trial.params, distributions=trial.distributions, value=trial.value,
                                     user_attrs=trial.user_attrs)


def _grid_size(space: SearchSpace, inputs: SearchInputs) -> int:
    """How many configurations the space holds (inf with a continuous parameter)."""
    total = 0
    for spec_type, ranges in space.spec_types.items():
        if spec_type == "none":
            continue
        size = max(len(inputs.candidates.pairs.get(spec_type, ())), 1) if spec_type in DRAFT_MODEL_TYPES \
            else len(inputs.candidates.targets)
        for r in ranges:
            if r.is_fixed:
                continue
            if r.choices or r.param.kind is bool:
                size *= len(r.choices) if r.choices else 2
            elif r.param.kind is int:
                size *= (int(r.high) - int(r.low)) // int(r.step or 1) + 1
            elif r.step:
                size *= int(round((r.high - r.low) / r.step)) + 1
            else:
                return math.inf
        total += size
    return total


def _race(study: optuna.Study, targets: dict, inputs: SearchInputs, settings: SearchSettings,
          command: ServerCommand, arbiter: str, engine_args: dict, race_options: RaceOptions,
          reporter: SearchReporter, check: CommandCheck) -> None:
    """Race the best predicted configurations whose command `check`'s llama-server runs with the references;
    store the race as the confirmation and the calibration refitted with every configuration it measured."""
    entrants = [Entrant(TrialRecord.of(t).role, t.number, TrialRecord.of(t).spec_config())
                for t in study.trials if TrialRecord.of(t).role in (BASELINE_ROLE, SPEC_DEFAULT_ROLE)]
    picked = _finalists(study, race_options.top, check)
    entrants += [Entrant("trial", t.number, TrialRecord.of(t).spec_config()) for t in picked]
    reporter.note(f"racing the {len(picked)} best predicted with the references on the {arbiter} engine, "
                  f"up to {race_options.rounds} interleaved rounds")
    if arbiter == "server":
        command = replace(command, binary=check.binary)
    with create_engine(arbiter, **engine_args) as engine:
        confirmation = race(
            engine, entrants, inputs.mix, max_tokens=settings.max_tokens, rounds=race_options.rounds, command=command,
            on_measured=lambda r, label, tok_s: reporter.note(
                f"race round {r + 1}: {label}: " + ("FAILED" if tok_s is None else f"{tok_s:.1f} tok/s")),
            on_dropped=lambda e: reporter.note(f"race: {e.label} leaves after round {e.dropped_after}: {e.dropped}"))
    store_study(study, confirmation=confirmation.as_dict())
    by_number = {t.number: TrialRecord.of(t) for t in study.trials}
    for row in confirmation.configs:
        predicted = by_number[row.trial].predicted.get("speedup")
        if row.speedup is not None and predicted and abs(row.speedup / predicted - 1) > SURPRISE:
            reporter.note(f"{row.label}: raced at {row.speedup:.2f}x, predicted {predicted:.2f}x "
                          f"({row.speedup / predicted - 1:+.0%}): more than {SURPRISE:.0%} off")
    _refit(study, targets, entrants)


def _finalists(study: optuna.Study, top: int, check: CommandCheck) -> list[optuna.trial.FrozenTrial]:
    """The `top` best predicted trials `check`'s llama-server runs, no two near-duplicates of one type: the
    same replayed counts, or a predicted speedup within NEAR of one already chosen (racing both would
    measure one thing twice)."""
    ranked = sorted((t for t in study.trials if TrialRecord.of(t).role is None and t.value is not None
                     and check.runs(TrialRecord.of(t).argv)), key=lambda t: t.value, reverse=True)
    chosen: list[optuna.trial.FrozenTrial] = []
    for trial in ranked:
        record = TrialRecord.of(trial)
        duplicate = any(
            TrialRecord.of(c).spec_type == record.spec_type and TrialRecord.of(c).config_target == record.config_target
            and (_counts(TrialRecord.of(c)) == _counts(record) or abs(c.value / trial.value - 1) <= NEAR)
            for c in chosen)
        if not duplicate:
            chosen.append(trial)
        if len(chosen) == top:
            break
    return chosen


def _counts(record: TrialRecord) -> tuple:
    return tuple(record.predicted.get(key) for key in ("drafted", "accepted", "verify_steps"))


def _refit(study: optuna.Study, targets: dict, entrants: list[Entrant]) -> None:
    """Refit each target's calibration with everything the race measured and store the error."""
    prediction = dict(StudyRecord.of(study).prediction)
    refitted = {}
    for target, target_model in targets.items():
        measured = [(e.config, e.prompt_decode_ms()) for e in entrants
                    if e.config.target == target and e.mix_tok_s]
        if measured:
            refitted[str(target)] = target_model.calibrate(measured).as_dict()
    prediction["calibration_refit"] = refitted
    store_study(study, prediction=prediction)

