"""The normal-mixture boundary for arrays (a batch of races at once) against the scalar one it interpolates,
and its p-value against the boundary it inverts."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.measure.anytime import mixture_bound, mixture_bounds, mixture_p


@pytest.mark.parametrize("alpha", [0.05, 0.0125, 1e-4])
def test_the_array_boundary_is_the_scalar_one_and_its_p_value_inverts_it(alpha):
    v = np.array([1e-3, 0.4, 1.0, 2.5, 4.0, 11.0, 44.0, 300.0])
    exact = np.array([mixture_bound(float(x), alpha, 4.0) for x in v])
    assert mixture_bounds(v, alpha, 4.0) == pytest.approx(exact, rel=2e-5)
    assert mixture_p(exact, v, 4.0) == pytest.approx(alpha, rel=1e-6)
    assert np.all(mixture_p(exact * 0.9, v, 4.0) > alpha)
