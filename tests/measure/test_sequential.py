"""The decision at one look (a pure function of the measured times): Holm's levels as the step-down used
them, a winner only once no rival can be 2 % faster, drops, and the union of the two tests."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.measure.sequential import (
    ALPHA,
    BY_PROMPTS,
    BY_ROUNDS,
    CANNOT_REACH,
    PROMPT_SHARE,
    SLOWER,
    Look,
    decide,
)
from autotune.measure.stratified import PRIOR_PAIR_SD, TAU_FLOOR, Noise

LENGTHS = np.random.default_rng(1).uniform(48, 400, 11) * 20
QUIET = Noise(np.array([TAU_FLOOR**2]), np.array([PRIOR_PAIR_SD**2]))


def look(
    speedups: list[float],
    rounds: int,
    prompts: int = 11,
    noise: float = 0.01,
    seed: int = 0,
    profile: np.ndarray | None = None,
) -> Look:
    """One race: the baseline and one entrant per speedup, `rounds` complete rounds then `prompts` of the next."""
    rng = np.random.default_rng(seed)
    shape = np.ones(11) if profile is None else profile
    total = rounds + (prompts < 11)

    def run(factor):
        times = LENGTHS / factor * (1 + rng.normal(0, noise, (total, 11)))
        if prompts < 11:
            times[-1, prompts:] = np.nan
        return times

    reference = run(np.ones(11))
    entrants = np.stack([run(s * shape) for s in speedups])[None]
    return Look(np.broadcast_to(reference, entrants.shape), entrants, np.ones((1, len(speedups)), dtype=bool), QUIET)


def test_holm_levels_are_the_step_downs_and_a_kept_entrant_carries_the_level_it_stopped_at():
    decision = decide(look([1.5, 1.3, 1.0], rounds=2), family=3)
    assert decision.proven[0].tolist() == [True, True, False]
    assert decision.levels[0, :2].tolist() == pytest.approx([ALPHA / 3, ALPHA / 3])  # both passed the first step
    assert decision.levels[0, 2] == pytest.approx(ALPHA / 1)  # two rejected: the step-down kept it at alpha / 1
    assert set(decision.decided_by[0, :2].tolist()) <= {BY_PROMPTS, BY_ROUNDS}
    assert decision.winner[0] == 0 and not decision.dropped.any()  # a look that names a winner drops no one


def test_an_entrant_proven_slower_than_the_leader_leaves():
    decision = decide(look([1.015, 0.8], rounds=2), family=2)
    assert decision.leader[0] == 0 and decision.winner[0] == -1
    assert decision.dropped[0].tolist() == [0, SLOWER]


def test_the_family_counts_every_entrant_that_began_the_race():
    alone = decide(look([1.08], rounds=1, noise=0.02, seed=3), family=1)
    among_twenty = decide(look([1.08], rounds=1, noise=0.02, seed=3), family=20)
    assert alone.levels[0, 0] == pytest.approx(ALPHA) and among_twenty.levels[0, 0] == pytest.approx(ALPHA / 20)


def test_a_winner_is_named_only_once_no_rival_can_still_be_2_percent_faster():
    close = decide(look([1.30, 1.29], rounds=1, noise=0.03, seed=5), family=2)
    assert close.proven[0].all() and close.winner[0] == -1  # both proven; one round cannot split 1 %
    assert close.within_reach[0].sum() == 1 and not close.within_reach[0, close.leader[0]]
    apart = decide(look([1.30, 1.12], rounds=2, noise=0.01, seed=6), family=2)
    assert apart.winner[0] == 0


def test_a_large_effect_is_proven_by_the_per_prompt_sequence_within_the_first_round():
    decision = decide(look([1.4], rounds=0, prompts=7, seed=7), family=3)
    assert decision.winner[0] == 0 and decision.decided_by[0, 0] == BY_PROMPTS
    assert decision.levels[0, 0] * PROMPT_SHARE < ALPHA / 3  # it spent only its share of the level


def test_a_skewed_1_10x_is_proven_by_the_rounds():
    skewed = np.array([1.0] * 7 + [1.05, 1.3, 1.8, 2.6])
    ratio = LENGTHS.sum() / (LENGTHS / skewed).sum()
    decision = decide(look([1.10 / ratio], rounds=2, noise=0.025, seed=8, profile=skewed), family=3)
    assert decision.winner[0] == 0 and decision.decided_by[0, 0] == BY_ROUNDS


def test_a_difference_under_the_minimum_effect_is_never_a_win_however_certain():
    decision = decide(look([1.005], rounds=8, noise=0.001), family=1)
    assert not decision.proven.any() and decision.dropped[0, 0] == CANNOT_REACH
