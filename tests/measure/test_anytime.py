"""The one-sided normal-mixture boundary: crossed by a Gaussian walk at some look, of many, no more often
than its level, against simulated paths (not the formula it was solved from)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.measure.anytime import mixture_bound


def test_a_walk_crosses_the_boundary_at_any_of_its_looks_at_most_alpha_of_the_time():
    looks, paths, alpha = 200, 20_000, 0.05
    rng = np.random.default_rng(11)
    walks = np.cumsum(rng.standard_normal((paths, looks)), axis=1)
    bounds = np.array([mixture_bound(float(v), alpha, 11.0) for v in range(1, looks + 1)])
    crossed = np.mean((walks >= bounds).any(axis=1))
    assert crossed <= alpha  # Ville: over every look at once
    assert crossed >= alpha / 10  # and not vacuous


def test_the_boundary_grows_slower_than_the_walk_it_bounds_and_is_stricter_at_smaller_alpha():
    # a drift of 0.5 sd per step crosses it eventually; a fixed-sample z bound would be sqrt(v) * 1.645
    assert mixture_bound(400.0, 0.05, 11.0) < 0.5 * 400
    assert mixture_bound(11.0, 0.05, 11.0) > 1.645 * math.sqrt(11.0)  # the price of looking at every step
    assert mixture_bound(11.0, 0.001, 11.0) > mixture_bound(11.0, 0.05, 11.0)


def test_alpha_outside_0_1_is_refused():
    with pytest.raises(ValueError):
        mixture_bound(10.0, 0.0, 11.0)
