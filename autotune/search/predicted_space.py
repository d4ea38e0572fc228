"""The predicted study's configurations: every point of the space replayed once (exhaustively on a small
grid, else by TPE), the references chosen per family to calibrate the costs, the predictions stored as
trials, and the finalists that race.

Finalists: the best `top` by predicted speedup, except that each family's best (autotune.spec.types:
n-gram, draft model, block draft) races whenever its prediction is within that family's margin of the
overall best, so a family the cost model underrates cannot drop out of the race. The margins are the
worst prediction errors seen per family on llama-server (the benchmarks of issues 22 and 25, and
examples/benchmarks/predictor.py): n-gram types were off by up to 15 %, draft-simple by up to 32 %; block
drafts have no llama-server figure on this CPU yet and take the draft model's margin.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import optuna

from autotune.errors import TrialFailure
from autotune.hardware import hardware_key
from autotune.llamacpp.runnable import CommandCheck
from autotune.models.hub import file_revisions
from autotune.predict.predictor import DraftCharge, Prediction
from autotune.predict.replay import Replay
from autotune.search.search import SearchInputs
from autotune.search.suggest import suggest_config
from autotune.search.tuner import SearchReporter
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.space import SearchSpace
from autotune.spec.types import BLOCK_FAMILY, DRAFT_MODEL_FAMILY, DRAFT_MODEL_TYPES, NGRAM_FAMILY, family_of
from autotune.study.records import PREDICTED_ENGINE, TrialRecord, config_attrs, trial_attrs

#: a grid at most this large is predicted point by point; a larger one by `--predict-trials` TPE trials
BRUTE_FORCE_LIMIT = 2000
#: two predicted configurations of one type this close in speedup race as one (the better)
NEAR = 0.02
#: how far below the overall best a family's best may be predicted and still race (module docstring)
FAMILY_MARGIN = {NGRAM_FAMILY: 0.15, DRAFT_MODEL_FAMILY: 0.35, BLOCK_FAMILY: 0.35}


@dataclass(frozen=True)
class Replayed:
    """One configuration of the space, replayed: its counts and the draft costs its steps pay."""

    config: SpecConfig
    replay: Replay
    charge: DraftCharge

    @property
    def family(self) -> str | None:
        return family_of(self.config.spec_type)


def replay_space(space: SearchSpace, inputs: SearchInputs, targets: dict, *, trials: int, seed: int | None,
                 reporter: SearchReporter) -> tuple[list[Replayed], float]:
    """Replay the space's configurations (each once), sampling by the prediction under the targets'
    current calibration; returns them and the grid's size."""
    grid = grid_size(space, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if grid <= BRUTE_FORCE_LIMIT:
            sampler, budget = optuna.samplers.BruteForceSampler(seed=seed), grid
        else:
            sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=50)
            budget = trials
    scratch = optuna.create_study(direction="maximize", sampler=sampler)
    seen: dict[tuple, Replayed] = {}
    skipped: dict[tuple, str] = {}

    def objective(trial: optuna.Trial) -> float:
        config = suggest_config(trial, space, inputs.candidates)
        key = (config.describe(), str(config.target), str(config.draft))
        if key not in seen and key not in skipped:
            try:
                seen[key] = Replayed(config, *targets[config.target].replay(config))
            except TrialFailure as exc:
                skipped[key] = str(exc)
        if key in skipped:
            raise optuna.TrialPruned(skipped[key])
        return prediction(seen[key], targets).speedup or 0.0

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    scratch.optimize(objective, n_trials=budget)
    if skipped:
        reporter.note(f"{len(skipped)} configurations not predicted, e.g. {next(iter(skipped.values()))}")
    how = "every point of the grid" if grid <= BRUTE_FORCE_LIMIT else f"{budget} TPE trials over a grid of {grid}"
    reporter.note(f"replayed {len(seen)} configurations ({how})")
    return list(seen.values()), grid


def prediction(replayed: Replayed, targets: dict) -> Prediction:
    return targets[replayed.config.target].predicted(replayed.replay, replayed.charge)


def family_references(replayed: list[Replayed], targets: dict, runs: CommandCheck | None,
                      command: ServerCommand, skip: set[str]) -> list[SpecConfig]:
    """One configuration per (target, family) to calibrate that family's cost: its best predicted under
    the baseline-only calibration, where the speedup will be decided; `skip`: labels already measured
    (llama.cpp's default, the n-gram family's long-draft reference)."""
    best: dict[tuple, tuple[float, SpecConfig]] = {}
    for item in replayed:
        if item.config.describe() in skip or (runs is not None and not runs.runs(command.argv(item.config))):
            continue
        key = (item.config.target, item.family)
        speedup = prediction(item, targets).speedup or 0.0
        if key not in best or speedup > best[key][0]:
            best[key] = (speedup, item.config)
    return [config for _, config in best.values()]


def store_predictions(study: optuna.Study, replayed: list[Replayed], targets: dict, command: ServerCommand,
                      baselines: dict[str, int], categories: list[str]) -> None:
    """Every replayed configuration as a trial of the stored study, predicted under the final calibration
    (each category's predicted speedup with it)."""
    trials = []
    plain = {target: model.prediction(model.target) for target, model in targets.items()}
    for item in replayed:
        predicted = prediction(item, targets)
        figures = {"mix_tok_s": round(predicted.tok_s, 3), "acceptance": predicted.replay.acceptance,
                   "n_drafted": predicted.replay.drafted, "n_accepted": predicted.replay.accepted}
        attrs = trial_attrs(
            config=config_attrs(item.config), argv=command.argv(item.config), engine=PREDICTED_ENGINE,
            hardware=hardware_key(), predicted=predicted.as_dict(plain[item.config.target], categories),
            speedup=predicted.as_dict()["speedup"],
            figures=figures, speedup_baseline_trial=baselines[str(item.config.target)], lossless=None,
            lossless_reason="not measured: predicted along the baseline's output",
            model_revisions=file_revisions([item.config.target, item.config.draft]))
        trials.append(optuna.trial.create_trial(value=predicted.speedup or 0.0, user_attrs=attrs))
    study.add_trials(trials)


def finalists(study: optuna.Study, top: int, check: CommandCheck, new_files: frozenset[str] = frozenset()
              ) -> list[tuple[optuna.trial.FrozenTrial, str]]:
    """The predicted trials that race, each with why (module docstring): the best predicted with each of
    `new_files` (file names: a night's new release gets its seat whatever its prediction), each family's
    best within its margin of the overall best, then the rest by predicted speedup up to `top`, no two
    near-duplicates of one type (the same replayed counts, or a speedup within NEAR of one chosen)."""
    ranked = sorted((t for t in study.trials if TrialRecord.of(t).role is None and t.value is not None
                     and check.runs(TrialRecord.of(t).argv)), key=lambda t: t.value, reverse=True)
    if not ranked:
        return []
    overall = ranked[0].value
    chosen: list[tuple[optuna.trial.FrozenTrial, str]] = []
    for name in sorted(new_files):
        best = next((t for t in ranked if name in _file_names(t)), None)
        if best is not None and all(best is not t for t, _ in chosen):
            chosen.append((best, f"the best predicted with the new {name}"))
    for family, margin in FAMILY_MARGIN.items():
        best = next((t for t in ranked if family_of(TrialRecord.of(t).spec_type) == family), None)
        if best is not None and best.value * (1 + margin) >= overall and all(best is not t for t, _ in chosen):
            why = "the best predicted" if best is ranked[0] else f"its family's best, within its {margin:.0%} margin"
            chosen.append((best, why))
    for trial in ranked:
        if len(chosen) >= top:
            break
        if not any(t is trial or _near_duplicate(t, trial) for t, _ in chosen):
            chosen.append((trial, "by rank"))
    return sorted(chosen, key=lambda pair: pair[0].value, reverse=True)


def _file_names(trial: optuna.trial.FrozenTrial) -> set[str]:
    """The names of the files `trial`'s configuration runs (its target, and its draft where it has one)."""
    config = TrialRecord.of(trial).spec_config()
    return {p.name for p in (config.target, config.draft) if p is not None}


def _near_duplicate(chosen: optuna.trial.FrozenTrial, trial: optuna.trial.FrozenTrial) -> bool:
    a, b = TrialRecord.of(chosen), TrialRecord.of(trial)
    return a.spec_type == b.spec_type and a.config_target == b.config_target and (
        _counts(a) == _counts(b) or abs(chosen.value / trial.value - 1) <= NEAR)


def _counts(record: TrialRecord) -> tuple:
    return tuple(record.predicted.get(key) for key in ("drafted", "accepted", "verify_steps"))


def grid_size(space: SearchSpace, inputs: SearchInputs) -> float:
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
