"""The paired speedup and its anytime-valid bounds: the ratio by hand, the bounds against a separate
solution of the test they invert, their coverage over simulated races that look after every prompt
(server instances with a speed of their own included), and one configuration's sample statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from autotune.measure.paired import INSTANCE_PAIR_SD, MIN_EFFECT, Units, paired_speedup
from autotune.measure.stats import ci95, coefficient_of_variation

REFERENCE = Units.of([[10, 12, 9, 11]], [[1, 1, 1, 1]])
ENTRANT = Units.of([[8, 10, 8, 9]], [[1, 1, 1, 1]])


def test_the_ratio_is_the_ratio_of_summed_decode_times():
    assert paired_speedup(REFERENCE, ENTRANT, pair_by_unit=True).ratio == pytest.approx(42 / 35)


def test_round_pairing_bounds_by_hand():
    # two rounds as two units, no instance term: X(r) = A - r B summed over units, standardised by the
    # prior-shrunk sd, must reach the one-sided normal mixture (rho tuned to 11 units, alpha 0.05)
    reference = Units.of([[10, 12], [9, 11], [10, 11], [12, 10]], [[1, 1]] * 4)
    entrant = Units.of([[8, 10], [8, 9], [8, 9], [10, 8]], [[1, 1]] * 4)
    speedup = paired_speedup(reference, entrant, pair_by_unit=False)
    a, b = np.array([22.0, 20, 21, 22]), np.array([18.0, 17, 17, 18])
    assert speedup.ratio == pytest.approx(a.sum() / b.sum())
    log_inv = math.log(1 / 0.1)
    rho = 11.0 / (2 * log_inv + math.log(1 + 2 * log_inv))
    u = optimize.brentq(
        lambda s: (
            0.5 * math.log(4 * rho / (4 + rho))
            + s * s / (2 * (4 + rho))
            + stats.norm.logcdf(s / math.sqrt(4 + rho))
            - math.log(20.0)
        ),
        0,
        50,
    )

    def z(r):
        x = a - r * b
        return x.sum() / math.sqrt((np.sum((x - x.mean()) ** 2) + 2 * (0.03 * a.mean()) ** 2) / 5)

    low = optimize.brentq(lambda r: z(r) - u, 0.5, a.sum() / b.sum())
    assert speedup.lower_bound(0.05) == pytest.approx(low, rel=1e-5)
    assert speedup.p_faster(low * 0.999) <= 0.05 < speedup.p_faster(low * 1.001)


def test_prompt_pairing_adds_the_instances_term():
    units = Units.of([[10, 12, 9, 11, 10, 12, 9, 11, 10, 11, 12]], [[1] * 11])
    faster = Units.of([[v / 1.2 for v in units.decode_ms[0]]], [[1] * 11])
    by_prompt = paired_speedup(units, faster, pair_by_unit=True)
    no_instances = paired_speedup(units, faster, pair_by_unit=True, instance_sd=0.0)
    assert by_prompt.ratio == pytest.approx(1.2)
    assert by_prompt.lower_bound(0.05) < no_instances.lower_bound(0.05) * math.exp(-2 * INSTANCE_PAIR_SD)
    assert by_prompt.lower_bound(0.05) > 1 + MIN_EFFECT  # one round proves a clean 1.2x


def test_the_speedup_is_the_ratio_of_decode_times_on_the_reference_tokens():
    # an entrant that generated fewer tokens on a prompt (a near-tie changed its output) is scaled to the
    # reference's tokens there: 40 tokens in 400 ms is 470 ms for 47
    reference = Units.of([[470.0, 470.0]], [[47, 47]])
    entrant = Units.of([[400.0, 235.0]], [[40, 47]])
    assert paired_speedup(reference, entrant, pair_by_unit=True).ratio == pytest.approx(940 / 705)


def test_with_too_few_units_nothing_can_be_said():
    one_round = paired_speedup(Units.of([[10, 12]], [[1, 1]]), Units.of([[8, 10]], [[1, 1]]), pair_by_unit=False)
    assert one_round.ratio == pytest.approx(22 / 18)
    assert one_round.interval() == (0.0, math.inf) and one_round.p_faster() == 1.0


def test_only_the_units_both_ran_are_compared():
    longer = Units.of([[10, 12, 9, 11], [1000, 1000, 1000, 1000]], [[1] * 4] * 2)
    assert paired_speedup(longer, ENTRANT, pair_by_unit=True).ratio == pytest.approx(1.2)
    prefix = Units.of([[8, 10]], [[1, 1]])  # an entrant that left after two prompts of the round
    assert paired_speedup(REFERENCE, prefix, pair_by_unit=True).ratio == pytest.approx(22 / 18)


def _race_paths(true_ratio: float, races: int, rounds: int, prompts: int, instance_sd: float, seed: int):
    """Simulated races of one entrant: prompt lengths unequal, 3 % noise per prompt, each round's two
    fresh servers off by `instance_sd` each; yields each race's (reference, entrant) units look by look."""
    rng = np.random.default_rng(seed)
    for _ in range(races):
        lengths = rng.uniform(100, 900, prompts)
        a_rounds, b_rounds = [], []
        for _ in range(rounds):
            base, own = np.exp(rng.normal(0, instance_sd, 2))
            order = rng.permutation(prompts)
            a_rounds.append(lengths[order] * base * (1 + rng.normal(0, 0.03, prompts)))
            b_rounds.append(lengths[order] / true_ratio * own * (1 + rng.normal(0, 0.03, prompts)))
        yield a_rounds, b_rounds


def _crossed(a_rounds, b_rounds, prompts: int, alpha: float, above: float) -> bool:
    for k in range(len(a_rounds)):
        for n in range(1, prompts + 1):
            a = [list(r) for r in a_rounds[:k]] + [list(a_rounds[k][:n])]
            b = [list(r) for r in b_rounds[:k]] + [list(b_rounds[k][:n])]
            tokens = [[1] * len(r) for r in a]
            if paired_speedup(Units.of(a, tokens), Units.of(b, tokens), pair_by_unit=True).lower_bound(alpha) > above:
                return True
    return False


def test_at_the_edge_a_race_that_looks_after_every_prompt_errs_at_most_alpha_of_the_time():
    """A true 1.02x, servers with 1 % of their own speed each: the lower bound passes 1.02 at some look of
    4 rounds x 11 prompts in at most 5 % of 150 races (the delta-method rule of before: 15 %)."""
    errors = sum(_crossed(a, b, 11, 0.05, 1.02) for a, b in _race_paths(1.02, 150, 4, 11, 0.01, seed=3))
    assert errors / 150 <= 0.05


def test_a_real_difference_is_found():
    found = sum(_crossed(a, b, 11, 0.05, 1.02) for a, b in _race_paths(1.2, 20, 1, 11, 0.007, seed=5))
    assert found == 20


def test_one_configurations_samples():
    low, high = ci95([1.0, 2.0, 3.0])  # mean 2, sem 0.57735, t(0.975, 2) = 4.302653
    assert (low, high) == (pytest.approx(-0.484), pytest.approx(4.484))
    assert ci95([5.0]) is None and ci95([4.0, 4.0]) == (4.0, 4.0)
    assert coefficient_of_variation([9.0, 10.0, 11.0]) == pytest.approx(0.1)
