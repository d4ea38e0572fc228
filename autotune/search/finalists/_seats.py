"""Which predicted configurations race: the finalists.

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

from typing import Callable

import optuna

from autotune.llamacpp.runnable import CommandCheck
from autotune.search.finalists._cover import Candidate, TrueSpeedups, drawn, near_duplicate, one_region
from autotune.search.finalists._error import PRIOR_ERROR_SD
from autotune.spec.types import BLOCK_FAMILY, DRAFT_MODEL_FAMILY, NGRAM_FAMILY, family_of
from autotune.study.records import TrialRecord

#: how far below the overall best a family's best may be predicted and still keep a seat (module docstring)
FAMILY_MARGIN = {NGRAM_FAMILY: 0.15, DRAFT_MODEL_FAMILY: 0.35, BLOCK_FAMILY: 0.35}


def finalists(
    study: optuna.Study, top: int, check: CommandCheck, new_files: frozenset[str] = frozenset()
) -> list[tuple[optuna.trial.FrozenTrial, str]]:
    """Up to `top` predicted trials that race, each with why (module docstring): the best predicted with
    each of `new_files` (file names: a night's new release gets its seat whatever its prediction), each
    family's best within its margin of the overall best, then seat by seat the one that most raises the
    race's expected best under the prediction's error (autotune.search.finalist_cover): first one a
    region among those within their family's margin of the best, then any, never two near duplicates."""
    ranked = sorted(
        (t for t in study.trials if TrialRecord.of(t).role is None and t.value and check.runs(TrialRecord.of(t).argv)),
        key=lambda t: t.value,
        reverse=True,
    )
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

    seated = truth.cover(
        [pool.index(i) for i in guaranteed], top, _apart(truth.candidates, one_region, in_reach)
    )  # a seat a region in reach
    seated = truth.cover(seated, top, _apart(truth.candidates, near_duplicate))  # the rest, no near duplicates
    chances = truth.chances()
    chosen += [(ranked[pool[k]], f"a {chances[k]:.0%} chance of being the fastest") for k in seated[len(chosen) :]]
    return sorted(chosen, key=lambda pair: pair[0].value, reverse=True)


def _kept_seats(
    ranked: list[optuna.trial.FrozenTrial], new_files: frozenset[str]
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
    return Candidate(
        trial.value,
        record.predicted.get("error_sd", PRIOR_ERROR_SD[family]),
        family,
        str(record.config_target),
        (record.spec_type, str(record.config_target), draft),
        dict(record.config.get("params", {})),
        _counts(record),
    )


def _file_names(trial: optuna.trial.FrozenTrial) -> set[str]:
    """The names of the files `trial`'s configuration runs (its target, and its draft where it has one)."""
    config = TrialRecord.of(trial).spec_config()
    return {p.name for p in (config.target, config.draft) if p is not None}


def _counts(record: TrialRecord) -> tuple:
    """Its replayed drafted, accepted and verify steps (empty where not stored)."""
    counts = tuple(record.predicted.get(key) for key in ("drafted", "accepted", "verify_steps"))
    return () if None in counts else counts
