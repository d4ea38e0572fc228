"""The sample a block recording takes: windows spread along a trajectory, and the error a ratio estimate
over them states."""

from __future__ import annotations

import pytest

from autotune.predict.block_sample import WINDOW, WindowCounts, ratio_error, sample_windows


def test_windows_cover_the_fraction_asked_spread_along_the_trajectory():
    windows = sample_windows(1000, 0.25, seed=3)
    covered = sum(end - start for start, end in windows)
    assert covered == pytest.approx(250, abs=WINDOW)
    assert all(end - start <= WINDOW and start % WINDOW == 0 for start, end in windows)
    assert windows[0][0] < 1000 * 0.25 and windows[-1][1] > 1000 * 0.75  # from the start to the end, not a block
    assert sample_windows(1000, 0.25, seed=3) == windows  # seeded
    assert len({sample_windows(1000, 0.25, seed=s) for s in range(10)}) > 1  # a random start
    assert sample_windows(1000, 1.0, seed=3) == ((0, 1000),) and sample_windows(20, 0.1, seed=0) == ((0, 20),)


def test_the_ratio_error_grows_with_the_spread_between_windows_and_vanishes_for_a_census():
    even = [WindowCounts(64, 32)] * 10
    uneven = [WindowCounts(96, 32), WindowCounts(32, 32)] * 5
    assert ratio_error(even, 0.1) == 0.0
    assert ratio_error(uneven, 0.1) > 0.1
    assert ratio_error(uneven, 1.0) == 0.0
    assert ratio_error(uneven, 0.5) < ratio_error(uneven, 0.1)  # the finite population correction
