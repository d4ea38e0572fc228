"""Statistics over repeated measurements: the 95% t interval of a mean, Welch's t-test between two
configurations' samples, and the coefficient of variation of one configuration's samples.

One measurement on a busy or small machine moves by 10-25 %; every printed comparison goes through
these, so the tuner, the confirmation, the report and the benchmarks state their uncertainty alike.
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


def welch_p(samples: Sequence[float], reference: Sequence[float]) -> float | None:
    """Welch's t-test p-value (two-sided, unequal variances); None below two samples a side or when
    the test is undefined (no spread on either side)."""
    if len(samples) < 2 or len(reference) < 2:
        return None
    p = stats.ttest_ind(samples, reference, equal_var=False).pvalue
    return None if np.isnan(p) else round(float(p), 6)


def coefficient_of_variation(samples: Sequence[float]) -> float | None:
    """Sample standard deviation over the mean; None below two samples or at a mean of 0."""
    if len(samples) < 2 or not np.mean(samples):
        return None
    return round(float(np.std(samples, ddof=1) / np.mean(samples)), 5)
