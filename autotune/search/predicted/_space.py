"""The predicted study's configurations: every point of the space replayed once (each spec type's own
grid point by point where it is small, TPE across the types whose grids are products of millions), the
references chosen per family to calibrate the costs, the predictions stored as trials with their error
band, and the finalists that race.

Finalists are chosen by their chance of being the fastest under the prediction's error per family
(autotune.search.prediction_error), seat by seat so that the race's best is as near the true best as it
can be: one seat a region first, among the configurations within their family's margin (below) of the
best predicted, so one biased corner cannot take every seat while another region is within an error seen
(autotune.search.finalist_cover); then the seats left, the same way, but for near duplicates. Two seats
are kept whatever the draws say: a night's new file's best, and each family's best whenever its
prediction is within that family's margin of the overall best, so a family the cost model underrates
cannot drop out of the race.
The margins are the worst prediction errors seen per family on llama-server (the benchmarks of issues
22 and 25, and examples/benchmarks/predictor.py): n-gram types were off by up to 15 %, draft-simple by up
to 32 %; block drafts have no llama-server figure on this CPU yet and take the draft model's margin.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable

import optuna

from autotune.errors import TrialFailure
from autotune.hardware import hardware_key
from autotune.llamacpp.runnable import CommandCheck
from autotune.models.hub import file_revisions
from autotune.predict.predictor import DraftCharge, Prediction
from autotune.predict.replay import Replay
from autotune.search.predicted._finalist_cover import Candidate, drawn, near_duplicate, one_region, TrueSpeedups
from autotune.search.predicted._prediction_error import band, family_error_sds, floored, PRIOR_ERROR_SD
from autotune.search.inputs import SearchInputs
from autotune.search.measured import suggest_config
from autotune.search.inputs import SearchReporter
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.space import SearchSpace
from autotune.spec.types import BASELINE, BLOCK_FAMILY, DRAFT_MODEL_FAMILY, DRAFT_MODEL_TYPES, NGRAM_FAMILY, family_of
from autotune.study.records import PREDICTED_ENGINE, TrialRecord, config_attrs, trial_attrs

#: a spec type whose own grid is at most this large is predicted point by point; the larger ones (products
#: of millions) by `--predict-trials` TPE trials
BRUTE_FORCE_LIMIT = 2000
#: how far below the overall best a family's best may be predicted and still keep a seat (module docstring)
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
                (large, optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=50),
                 trials)):
            if part:
                searched = space.restricted_to(part)
                scratch = optuna.create_study(direction="maximize", sampler=sampler)
                scratch.optimize(lambda trial: objective(trial, searched), n_trials=int(budget))
    if skipped:
        reporter.note(f"{len(skipped)} configurations not predicted, e.g. {next(iter(skipped.values()))}")
    how = [f"every point of {', '.join(sorted(small))}"] if small else []
    how += [f"{trials} TPE trials over {', '.join(sorted(large))} ({sum(sizes[t] for t in large):.3g} points)"] \
        if large else []
    reporter.note(f"replayed {len(seen)} configurations ({'; '.join(how)})")
    return list(seen.values()), sum(sizes.values())


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
        figures = {"mix_tok_s": round(predicted.tok_s, 3), "acceptance": predicted.replay.acceptance,
                   "n_drafted": predicted.replay.drafted, "n_accepted": predicted.replay.accepted}
        attrs = trial_attrs(
            config=config_attrs(item.config), argv=command.argv(item.config), engine=PREDICTED_ENGINE,
            hardware=hardware_key(), predicted=stored,
            speedup=predicted.as_dict()["speedup"],
            figures=figures, speedup_baseline_trial=baselines[str(item.config.target)], lossless=None,
            lossless_reason="not measured: predicted along the baseline's output",
            model_revisions=file_revisions([item.config.target, item.config.draft]))
        trials.append(optuna.trial.create_trial(value=predicted.speedup or 0.0, user_attrs=attrs))
    study.add_trials(trials)


def finalists(study: optuna.Study, top: int, check: CommandCheck, new_files: frozenset[str] = frozenset()
              ) -> list[tuple[optuna.trial.FrozenTrial, str]]:
    """Up to `top` predicted trials that race, each with why (module docstring): the best predicted with
    each of `new_files` (file names: a night's new release gets its seat whatever its prediction), each
    family's best within its margin of the overall best, then seat by seat the one that most raises the
    race's expected best under the prediction's error (autotune.search.finalist_cover): first one a
    region among those within their family's margin of the best, then any, never two near duplicates."""
    ranked = sorted((t for t in study.trials if TrialRecord.of(t).role is None and t.value
                     and check.runs(TrialRecord.of(t).argv)), key=lambda t: t.value, reverse=True)
    if not ranked:
        return []
    chosen = _kept_seats(ranked, new_files)
    candidates = [_candidate(t) for t in ranked]
    guaranteed = [ranked.index(t) for t, _ in chosen]
    pool = drawn(candidates)
    pool += [i for i in guaranteed if i not in pool]
    truth = TrueSpeedups([candidates[i] for i in pool])

    def in_reach(c: Candidate) -> bool:  # within its family's margin: an error seen could make it the best
        return c.speedup * (1 + FAMILY_MARGIN[c.family]) >= ranked[0].value

    seated = truth.cover([pool.index(i) for i in guaranteed], top,
                         _apart(truth.candidates, one_region, in_reach))  # a seat a region in reach
    seated = truth.cover(seated, top, _apart(truth.candidates, near_duplicate))  # the rest, no near duplicates
    chances = truth.chances()
    chosen += [(ranked[pool[k]], f"a {chances[k]:.0%} chance of being the fastest") for k in seated[len(chosen):]]
    return sorted(chosen, key=lambda pair: pair[0].value, reverse=True)


def _kept_seats(ranked: list[optuna.trial.FrozenTrial], new_files: frozenset[str]
                ) -> list[tuple[optuna.trial.FrozenTrial, str]]:
    """The seats kept whatever the draws say (module docstring), each with why: each new file's best
    predicted, and each family's best within its margin of the overall best (`ranked[0]`)."""
    chosen: list[tuple[optuna.trial.FrozenTrial, str]] = []
    for name in sorted(new_files):
        best = next((t for t in ranked if name in _file_names(t)), None)
        if best is not None and all(best is not t for t, _ in chosen):
            chosen.append((best, f"the best predicted with the new {name}"))
    for family, margin in FAMILY_MARGIN.items():
        best = next((t for t in ranked if family_of(TrialRecord.of(t).spec_type) == family), None)
        if best is not None and best.value * (1 + margin) >= ranked[0].value and all(best is not t for t, _ in chosen):
            why = "the best predicted" if best is ranked[0] else f"its family's best, within its {margin:.0%} margin"
            chosen.append((best, why))
    return chosen


def _apart(candidates: list[Candidate], duplicate, eligible=lambda candidate: True) -> Callable[[int, list[int]], bool]:
    """Whether candidate k may take a seat beside those `taken`: `eligible`, and a `duplicate` of none of them."""
    return lambda k, taken: eligible(candidates[k]) and not any(duplicate(candidates[j], candidates[k]) for j in taken)


def _candidate(trial: optuna.trial.FrozenTrial) -> Candidate:
    """A predicted trial as the error model sees it (a trial stored before error sds: its family's prior)."""
    record = TrialRecord.of(trial)
    family = family_of(record.spec_type)
    draft = record.config.get("draft")
    return Candidate(trial.value, record.predicted.get("error_sd", PRIOR_ERROR_SD[family]), family,
                     str(record.config_target), (record.spec_type, str(record.config_target), draft),
                     dict(record.config.get("params", {})), _counts(record))


def _file_names(trial: optuna.trial.FrozenTrial) -> set[str]:
    """The names of the files `trial`'s configuration runs (its target, and its draft where it has one)."""
    config = TrialRecord.of(trial).spec_config()
    return {p.name for p in (config.target, config.draft) if p is not None}


def _counts(record: TrialRecord) -> tuple:
    """Its replayed drafted, accepted and verify steps (empty where not stored)."""
    counts = tuple(record.predicted.get(key) for key in ("drafted", "accepted", "verify_steps"))
    return () if None in counts else counts


def type_grids(space: SearchSpace, inputs: SearchInputs) -> dict[str, float]:
    """Each spec type's own grid size (inf with a continuous parameter), of the types with something to run."""
    return {t: grid_size(space.restricted_to({t}), inputs)
            for t in inputs.candidates.spec_types([t for t in space.spec_types if t != BASELINE])}


def replays_at_most(space: SearchSpace, inputs: SearchInputs, trials: int) -> int:
    """How many configurations `replay_space` replays at most: the small types' grids, and `trials`."""
    sizes = type_grids(space, inputs).values()
    return int(sum(s for s in sizes if s <= BRUTE_FORCE_LIMIT)) + (trials if any(s > BRUTE_FORCE_LIMIT for s in sizes)
                                                                 else 0)


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
