"""The predicted study's configurations: every point of the space replayed once (each spec type's own
grid point by point where it is small, TPE across the types whose grids are products of millions), the
references chosen per family to calibrate the costs, and the predictions stored as trials with their error
band (autotune.search.finalists chooses which of them race).
"""

from __future__ import annotations

import functools
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
from autotune.search.finalists import band, family_error_sds, floored
from autotune.search.inputs import SearchInputs, SearchReporter
from autotune.search.measured import suggest_config
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.space import SearchSpace
from autotune.spec.types import BASELINE, DRAFT_MODEL_TYPES, family_of
from autotune.study.records import PREDICTED_ENGINE, config_attrs, trial_attrs

#: a spec type whose own grid is at most this large is predicted point by point; the larger ones (products
#: of millions) by `--predict-trials` TPE trials
BRUTE_FORCE_LIMIT = 2000


@dataclass(frozen=True)
class Replayed:
    """One configuration of the space, replayed: its counts and the draft costs its steps pay."""

    config: SpecConfig
    replay: Replay
    charge: DraftCharge

    @property
    def family(self) -> str | None:
        return family_of(self.config.spec_type)


def replay_space(
    space: SearchSpace, inputs: SearchInputs, targets: dict, *, trials: int, seed: int | None, reporter: SearchReporter
) -> tuple[list[Replayed], float]:
    """Replay the space's configurations (each once): every point of each spec type whose own grid holds
    at most BRUTE_FORCE_LIMIT, and `trials` TPE trials across the other types, sampling by the prediction
    under the targets' current calibration; returns them and the grid's size."""
    sizes = type_grids(space, inputs)
    small = {t for t, size in sizes.items() if size <= BRUTE_FORCE_LIMIT}
    large = set(sizes) - small
    seen: dict[tuple, Replayed] = {}
    skipped: dict[tuple, str] = {}

    def objective(trial: optuna.Trial, searched: SearchSpace) -> float:
        config = suggest_config(trial, searched, inputs.candidates)
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        for part, sampler, budget in (
            (small, optuna.samplers.BruteForceSampler(seed=seed), sum(sizes[t] for t in small)),
            (large, optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=50), trials),
        ):
            if part:
                searched = space.restricted_to(part)
                scratch = optuna.create_study(direction="maximize", sampler=sampler)
                scratch.optimize(functools.partial(objective, searched=searched), n_trials=int(budget))
    if skipped:
        reporter.note(f"{len(skipped)} configurations not predicted, e.g. {next(iter(skipped.values()))}")
    how = [f"every point of {', '.join(sorted(small))}"] if small else []
    how += (
        [f"{trials} TPE trials over {', '.join(sorted(large))} ({sum(sizes[t] for t in large):.3g} points)"]
        if large
        else []
    )
    reporter.note(f"replayed {len(seen)} configurations ({'; '.join(how)})")
    return list(seen.values()), sum(sizes.values())


def prediction(replayed: Replayed, targets: dict) -> Prediction:
    return targets[replayed.config.target].predicted(replayed.replay, replayed.charge)


def family_references(
    replayed: list[Replayed], targets: dict, runs: CommandCheck | None, command: ServerCommand, skip: set[str]
) -> list[SpecConfig]:
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


def store_predictions(
    study: optuna.Study,
    replayed: list[Replayed],
    targets: dict,
    command: ServerCommand,
    baselines: dict[str, int],
    categories: list[str],
) -> None:
    """Every replayed configuration as a trial of the stored study, predicted under the final calibration
    (each category's predicted speedup with it), each with its family's error sd and the band it gives
    (autotune.search.prediction_error)."""
    trials = []
    plain = {target: model.prediction(model.target) for target, model in targets.items()}
    sds = family_error_sds(study)
    for item in replayed:
        predicted = prediction(item, targets)
        stored = predicted.as_dict(plain[item.config.target], categories)
        if stored["speedup"]:
            error_sd = floored(sds[item.family], targets[item.config.target].calibration.error)
            stored.update(error_sd=error_sd, speedup_band=band(stored["speedup"], error_sd))
        figures = {
            "mix_tok_s": round(predicted.tok_s, 3),
            "acceptance": predicted.replay.acceptance,
            "n_drafted": predicted.replay.drafted,
            "n_accepted": predicted.replay.accepted,
        }
        attrs = trial_attrs(
            config=config_attrs(item.config),
            argv=command.argv(item.config),
            engine=PREDICTED_ENGINE,
            hardware=hardware_key(),
            predicted=stored,
            speedup=predicted.as_dict()["speedup"],
            figures=figures,
            speedup_baseline_trial=baselines[str(item.config.target)],
            lossless=None,
            lossless_reason="not measured: predicted along the baseline's output",
            model_revisions=file_revisions([item.config.target, item.config.draft]),
        )
        trials.append(optuna.trial.create_trial(value=predicted.speedup or 0.0, user_attrs=attrs))
    study.add_trials(trials)


def type_grids(space: SearchSpace, inputs: SearchInputs) -> dict[str, float]:
    """Each spec type's own grid size (inf with a continuous parameter), of the types with something to run."""
    return {
        t: grid_size(space.restricted_to({t}), inputs)
        for t in inputs.candidates.spec_types([t for t in space.spec_types if t != BASELINE])
    }


def replays_at_most(space: SearchSpace, inputs: SearchInputs, trials: int) -> int:
    """How many configurations `replay_space` replays at most: the small types' grids, and `trials`."""
    sizes = type_grids(space, inputs).values()
    return int(sum(s for s in sizes if s <= BRUTE_FORCE_LIMIT)) + (
        trials if any(s > BRUTE_FORCE_LIMIT for s in sizes) else 0
    )


def grid_size(space: SearchSpace, inputs: SearchInputs) -> float:
    """How many configurations the space holds (inf with a continuous parameter)."""
    total = 0
    for spec_type, ranges in space.spec_types.items():
        if spec_type == "none":
            continue
        size = (
            max(len(inputs.candidates.pairs.get(spec_type, ())), 1)
            if spec_type in DRAFT_MODEL_TYPES
            else len(inputs.candidates.targets)
        )
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
