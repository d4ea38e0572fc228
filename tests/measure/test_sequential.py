"""The sequential rule: how the error rate is spent over the looks, and what one look decides."""

from __future__ import annotations

import pytest

from autotune.measure.paired import Speedup
import numpy as np
from scipy import stats

from autotune.measure.sequential import ALPHA, SPENDING_POWER, boundaries, judge, look_alpha, nominal_level


def test_the_looks_spend_the_error_rate_once_and_the_early_ones_little():
    for planned in (1, 3, 6, 10):
        assert sum(look_alpha(k, planned) for k in range(1, planned + 1)) == pytest.approx(ALPHA)
    assert look_alpha(1, 6) == pytest.approx(ALPHA * (1 / 6) ** SPENDING_POWER)
    assert look_alpha(1, 6) < look_alpha(6, 6) and look_alpha(7, 6) == 0.0 and look_alpha(0, 6) == 0.0


def test_one_look_is_the_plain_one_sided_test():
    assert boundaries(1) == pytest.approx((stats.norm.isf(ALPHA),), abs=1e-4)  # 1.6449


def test_the_boundaries_cross_under_the_null_as_often_as_the_looks_spend():
    """Against a simulation of the statistic's paths (not the grid the boundaries came from): a true null
    first crosses at each look with the probability that look spends, and at all with ALPHA."""
    planned, paths = 5, 400_000
    rng = np.random.default_rng(7)
    z = np.cumsum(rng.standard_normal((paths, planned)), axis=1) / np.sqrt(np.arange(1, planned + 1))
    crossed = z >= np.array(boundaries(planned))
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    for look in range(1, planned + 1):
        assert np.mean(first == look - 1) == pytest.approx(look_alpha(look, planned), abs=0.0012)
    assert np.mean(first >= 0) == pytest.approx(ALPHA, abs=0.0015)
    # exact for the correlation of the looks, so less strict than a union bound over them at the last look
    assert nominal_level(planned, planned) > look_alpha(planned, planned) * 1.5


def speedup(ratio: float, log_se: float, df: int = 32) -> Speedup:
    return Speedup(ratio, log_se, df, rounds=3, prompts=11)


def test_a_clear_win_stops_the_race_and_the_fastest_proven_one_is_the_winner():
    decision = judge({"a": speedup(1.25, 0.02), "b": speedup(1.30, 0.03), "c": speedup(1.01, 0.02)},
                     {"a": speedup(0.96, 0.02), "c": speedup(0.78, 0.02)}, look=2, planned=6)
    assert decision.decided and decision.winner == "b" and decision.significant == {"a", "b"}


def test_a_difference_under_the_minimum_effect_is_never_a_win_however_certain():
    decision = judge({"a": speedup(1.015, 0.0005)}, {}, look=6, planned=6)
    assert not decision.decided
    assert decision.dropped["a"].startswith("cannot reach the minimum effect (1.01x, at most 1.0")


def test_the_same_evidence_wins_at_the_last_look_and_not_at_the_first():
    evidence = {"a": speedup(1.10, 0.027)}  # t = (ln 1.10 - ln 1.02) / 0.027 = 2.80 on 32 df
    assert not judge(evidence, {}, look=1, planned=6).decided  # level 0.0034 needs t > 2.89
    assert judge(evidence, {}, look=6, planned=6).decided  # level 0.0307 needs t > 1.94


def test_holm_shares_a_look_among_the_entrants_dropped_ones_included():
    one = judge({"a": speedup(1.10, 0.032)}, {}, look=6, planned=6)  # t = 2.36
    crowded = judge({"a": speedup(1.10, 0.032), "b": speedup(1.0, 0.05), "c": speedup(1.0, 0.05)},
                    {"b": speedup(0.91, 0.06), "c": speedup(0.91, 0.06)}, look=6, planned=6)
    assert one.decided and not crowded.decided  # 0.0307 alone (t > 1.94), 0.0090 for alpha / 3 (t > 2.49)
    left_alone = judge({"a": speedup(1.10, 0.032)}, {}, look=6, planned=6, family=3)  # the two others dropped
    assert not left_alone.decided


def test_an_entrant_clearly_slower_than_the_leader_leaves_and_a_close_one_stays():
    decision = judge({"lead": speedup(1.15, 0.05), "slow": speedup(0.80, 0.05), "close": speedup(1.12, 0.05)},
                     {"slow": speedup(0.70, 0.03), "close": speedup(0.97, 0.04)}, look=3, planned=6)
    assert not decision.decided
    assert decision.dropped == {"slow": "significantly slower than the leader, prompt by prompt"}
