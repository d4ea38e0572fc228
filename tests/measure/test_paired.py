"""The paired speedup, its interval and p-values, against values worked out by hand from the delta-method
formula (module docstring of autotune.measure.paired), and the statistics of one configuration's samples."""

from __future__ import annotations

import math

import pytest

from autotune.measure.paired import Units, paired_speedup
from autotune.measure.stats import ci95, coefficient_of_variation

REFERENCE = Units.of([[10, 12, 9, 11]], [[1, 1, 1, 1]])
ENTRANT = Units.of([[8, 10, 8, 9]], [[1, 1, 1, 1]])


def test_prompt_pairing_by_hand():
    # S = 42/35 = 1.2; residuals a - S b = 0.4, 0, -0.6, 0.2; Var(S) = 4/3 * 0.56 / 35^2; se(log S) = 0.0205738
    speedup = paired_speedup(REFERENCE, ENTRANT, pair_by_unit=True)
    assert speedup.ratio == pytest.approx(1.2)
    assert speedup.log_se == pytest.approx(0.0205738, rel=1e-5) and speedup.df == 3
    low, high = speedup.interval()  # t(0.975, 3) = 3.182446: 1.2 * exp(-+0.0654743)
    assert (low, high) == (pytest.approx(1.123947, rel=1e-5), pytest.approx(1.281199, rel=1e-5))
    assert speedup.p_faster() == pytest.approx(0.0015146, rel=1e-3)  # t = ln 1.2 / 0.0205738 = 8.862 on 3 df
    assert speedup.p_slower() == pytest.approx(1 - 0.0015146, rel=1e-4)


def test_round_pairing_counts_a_round_as_one_unit():
    # the same eight units as two rounds of two prompts: residuals of the round sums 0.4 and -0.4, 1 df
    reference = Units.of([[10, 12], [9, 11]], [[1, 1], [1, 1]])
    entrant = Units.of([[8, 10], [8, 9]], [[1, 1], [1, 1]])
    speedup = paired_speedup(reference, entrant, pair_by_unit=False)
    assert speedup.ratio == pytest.approx(1.2) and speedup.df == 1
    assert speedup.log_se == pytest.approx(0.0190476, rel=1e-5)
    low, high = speedup.interval()  # t(0.975, 1) = 12.7062: far wider than the prompt pairing's
    assert (low, high) == (pytest.approx(0.942046, rel=1e-5), pytest.approx(1.528588, rel=1e-5))


def test_the_speedup_is_the_ratio_of_decode_times_on_the_reference_tokens():
    # an entrant that generated fewer tokens on a prompt (a near-tie changed its output) is scaled to the
    # reference's tokens there: 40 tokens in 400 ms is 470 ms for 47
    reference = Units.of([[470.0, 470.0]], [[47, 47]])
    entrant = Units.of([[400.0, 235.0]], [[40, 47]])
    assert paired_speedup(reference, entrant, pair_by_unit=True).ratio == pytest.approx(940 / 705)


def test_identical_units_have_no_spread_and_an_exact_answer():
    same = paired_speedup(REFERENCE, Units.of([[5, 6, 4.5, 5.5]], [[1] * 4]), pair_by_unit=True)
    assert same.ratio == pytest.approx(2.0) and same.log_se == pytest.approx(0.0, abs=1e-12)
    assert same.p_faster(1.99) == 0.0 and same.p_faster(2.01) == 1.0


def test_with_one_cluster_nothing_can_be_said():
    one_round = paired_speedup(Units.of([[10, 12]], [[1, 1]]), Units.of([[8, 10]], [[1, 1]]), pair_by_unit=False)
    assert one_round.ratio == pytest.approx(22 / 18) and one_round.df == 0
    assert one_round.interval() == (0.0, math.inf) and one_round.p_faster() == 1.0
    assert one_round.lower_bound(0.05) == 0.0 and one_round.upper_bound(0.05) == math.inf


def test_only_the_rounds_both_ran_are_compared():
    longer = Units.of([[10, 12, 9, 11], [1000, 1000, 1000, 1000]], [[1] * 4] * 2)
    assert paired_speedup(longer, ENTRANT, pair_by_unit=True).ratio == pytest.approx(1.2)


def test_one_configurations_samples():
    low, high = ci95([1.0, 2.0, 3.0])  # mean 2, sem 0.57735, t(0.975, 2) = 4.302653
    assert (low, high) == (pytest.approx(-0.484), pytest.approx(4.484))
    assert ci95([5.0]) is None and ci95([4.0, 4.0]) == (4.0, 4.0)
    assert coefficient_of_variation([9.0, 10.0, 11.0]) == pytest.approx(0.1)
