"""The error model finalists are chosen under: each candidate's chance of being the fastest, held against
the normal law its stated shares give, and the seat by seat cover that spreads them."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm

from autotune.search.finalists._cover import (
    DRAWS,
    SAME_REGION,
    SHARES,
    Candidate,
    TrueSpeedups,
    closeness,
    drawn,
    near_duplicate,
    one_region,
)

SD = 0.10


def simple(m: int, n: int, speedup: float, family: str = "n-gram") -> Candidate:
    return Candidate(
        speedup, SD, family, "t", ("ngram-simple", "t", None), {"ngram_simple_size_m": m, "ngram_simple_size_n": n}
    )


def mod(n_max: int, speedup: float) -> Candidate:
    return Candidate(speedup, SD, "n-gram", "t", ("ngram-mod", "t", None), {"ngram_mod_n_max": n_max})


def binomial_tolerance(p: float) -> float:
    return 4 * math.sqrt(p * (1 - p) / DRAWS) + 1e-9


@pytest.mark.parametrize(
    "a, b, correlation",
    [
        (simple(15, 4, 1.60), Candidate(1.50, SD, "draft model", "t", ("draft-simple", "t", "d"), {}), 0.0),
        (simple(15, 4, 1.60), mod(16, 1.50), SHARES["family"]),
        (simple(15, 4, 1.60), simple(15, 4, 1.50), 1 - SHARES["own"]),  # one point of the grid: all but its own
    ],
)
def test_the_chance_of_the_lower_prediction_is_the_normal_law_of_the_shares(a, b, correlation):
    sd_difference = SD * math.sqrt(2 * (1 - correlation))
    expected = norm.cdf(-math.log(a.speedup / b.speedup) / sd_difference)
    chances = TrueSpeedups([a, b], seed=3).chances()
    assert chances[1] == pytest.approx(expected, abs=binomial_tolerance(expected))
    assert chances.sum() == pytest.approx(1.0)


def test_draws_are_seeded():
    candidates = [simple(m, 3, 1.5 + m / 100) for m in range(2, 12)]
    assert (TrueSpeedups(candidates, seed=7).chances() == TrueSpeedups(candidates, seed=7).chances()).all()


def test_a_second_seat_goes_to_another_type_not_to_the_first_seats_corner():
    corner, beside, other_type = simple(15, 4, 1.61), simple(16, 4, 1.60), mod(16, 1.58)
    truth = TrueSpeedups([corner, beside, other_type])
    assert truth.cover([], 2, lambda i, seated: True) == [0, 2]


def test_cover_keeps_the_seats_given_and_stops_where_nothing_is_allowed():
    truth = TrueSpeedups([simple(15, 4, 1.60), simple(3, 2, 1.40), mod(16, 1.30)])
    assert truth.cover([2], 3, lambda i, seated: i != 1) == [2, 0]


def test_regions_follow_the_parameters_ratio():
    assert closeness(simple(13, 3, 1.0), simple(13, 3, 1.0)) == pytest.approx(1.0)
    assert one_region(simple(13, 3, 1.0), simple(18, 4, 1.3))  # issue 50's corner: m13-18 moved together
    assert not one_region(simple(3, 2, 1.0), simple(13, 3, 1.3))
    assert not one_region(simple(15, 4, 1.0), mod(15, 1.0))  # another type is never one region, even alike
    assert near_duplicate(simple(3, 2, 1.0), simple(32, 6, 1.01))  # one kind within 2 %: one seat however far
    assert closeness(simple(3, 2, 1.0), simple(13, 3, 1.0)) < SAME_REGION


def test_candidates_too_far_below_the_best_are_not_drawn():
    far = Candidate(1.60 * math.exp(-5 * math.hypot(SD, SD)), SD, "n-gram", "t", ("ngram-mod", "t", None), {})
    candidates = [simple(3, 2, 1.50), far, simple(15, 4, 1.60)]
    assert drawn(candidates) == [2, 0]
