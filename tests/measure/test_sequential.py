"""The sequential rule: what one look decides, with Holm's share of the error rate per entrant."""

from __future__ import annotations

import numpy as np

from autotune.measure.paired import Units, paired_speedup
from autotune.measure.sequential import ALPHA, holm_levels, judge

LENGTHS = np.random.default_rng(1).uniform(200, 800, 22)


def speedup(ratio: float, noise: float = 0.01, prompts: int = 22, seed: int = 0):
    """A measured speedup of `ratio` over `prompts` prompts of one round pairing, `noise` per prompt."""
    rng = np.random.default_rng(seed)
    a = LENGTHS[:prompts]
    b = a / ratio * (1 + rng.normal(0, noise, prompts))
    tokens = [[1] * prompts]
    return paired_speedup(Units.of([a], tokens), Units.of([b], tokens), pair_by_unit=True, instance_sd=0.0)


def test_holm_levels_go_from_alpha_over_m_up():
    assert holm_levels({"a": 0.001, "b": 0.2, "c": 0.01}, 3) == {"a": ALPHA / 3, "c": ALPHA / 2, "b": ALPHA}
    assert holm_levels({"a": 0.001}, 4) == {"a": ALPHA / 4}  # the family counts the entrants that left


def test_a_clear_win_stops_the_race_and_the_fastest_proven_one_is_the_winner():
    decision = judge({"a": speedup(1.25, seed=1), "b": speedup(1.30, seed=2), "c": speedup(1.01, seed=3)},
                     {"a": speedup(0.96, seed=4), "c": speedup(0.78, seed=5)})
    assert decision.decided and decision.winner == "b" and decision.significant == {"a", "b"}
    assert sorted(decision.levels.values()) == [ALPHA / 3, ALPHA / 2, ALPHA]


def test_a_difference_under_the_minimum_effect_is_never_a_win_however_certain():
    decision = judge({"a": speedup(1.005, noise=0.001)}, {})
    assert not decision.decided
    assert decision.dropped["a"].startswith("cannot reach the minimum effect (1.0")


def test_holm_shares_the_rate_among_the_entrants_dropped_ones_included():
    evidence = speedup(1.05, noise=0.1, prompts=22, seed=7)
    p = evidence.p_faster(1.02)
    assert ALPHA / 20 < p < ALPHA  # proven alone, not among twenty
    assert judge({"a": evidence}, {}).decided
    assert not judge({"a": evidence}, {}, family=20).decided


def test_an_entrant_clearly_slower_than_the_leader_leaves_and_a_close_one_stays():
    decision = judge({"lead": speedup(1.04, noise=0.05), "slow": speedup(0.80, noise=0.05),
                      "close": speedup(1.03, noise=0.05)},
                     {"slow": speedup(0.70, seed=8), "close": speedup(0.99, noise=0.05, seed=9)})
    assert not decision.decided
    assert set(decision.dropped) == {"slow"} and decision.dropped["slow"] == "significantly slower than the leader"
