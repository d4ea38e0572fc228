"""Statistics over one configuration's repeated measurements: the 95% t interval of their mean and their
coefficient of variation (a measured trial's `--repeats`). Comparisons between configurations are
paired, prompt by prompt or round by round: autotune.measure.paired.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats


def ci95(samples: Sequence[float]) -> tuple[float, float] | None:
    """The 95% t interval of the mean of `samples`, rounded to 3 decimals; None below two samples, the
    mean itself when they do not spread."""
    if len(samples) < 2:
        return None
    mean = float(np.mean(samples))
    sem = float(stats.sem(samples))
    if sem == 0.0:
        return (round(mean, 3), round(mean, 3))
    low, high = stats.t.interval(0.95, len(samples) - 1, loc=mean, scale=sem)
    return (round(float(low), 3), round(float(high), 3))


def coefficient_of_variation(samples: Sequence[float]) -> float | None:
    """Sample standard deviation over the mean; None below two samples or at a mean of 0."""
    if len(samples) < 2 or not np.mean(samples):
        return None
    return round(float(np.std(samples, ddof=1) / np.mean(samples)), 5)
