"""The one-sided normal-mixture boundary: a bound on a running sum that holds at every look at once.

For a sum S_v of increments that are (conditionally) Gaussian with variance process v, Robbins' normal
mixture over the tilt lambda >= 0 (half-normal, scale rho) is a nonnegative supermartingale,

    M(s, v) = 2 sqrt(rho / (v + rho)) exp(s^2 / (2 (v + rho))) Phi(s / sqrt(v + rho)),

so by Ville's inequality P(there is a v with S_v >= u(v)) <= alpha, where u(v) solves
M(u, v) = 1 / alpha (Howard, Ramdas, McAuliffe, Sekhon 2021, "Time-uniform, nonparametric,
nonasymptotic confidence sequences", the one-sided normal mixture). A test that compares S_v with
u(v) after every prompt, and stops whenever it likes, keeps its error rate at alpha with no spending
plan and no count of looks fixed in advance. rho only moves where the boundary is tightest; it is
tuned to `v_opt` at ALPHA_OPT as Howard et al. tune it (the two-sided optimum at 2 ALPHA_OPT), and never
to the alpha asked for, so that the boundaries of every alpha come from one supermartingale and a
p-value (the least alpha whose boundary is crossed) inverts them exactly.

Why not the `confseq` package, which implements these boundaries: on PyPI it is a C++ extension shipped
as a source distribution only (0.0.11), built against Boost at install time; this boundary is one
closed form and a root, in scipy.
"""

from __future__ import annotations

import functools
import math

from scipy import optimize, stats

#: the level the mixture's scale is tuned at (the race's error rate)
ALPHA_OPT = 0.05


def best_rho(v_opt: float, alpha: float = ALPHA_OPT) -> float:
    """The mixture scale that makes the one-sided boundary at level `alpha` tightest near `v_opt`."""
    log_inv = math.log(1.0 / (2.0 * alpha))
    return v_opt / (2.0 * log_inv + math.log(1.0 + 2.0 * log_inv))


def log_mixture(s: float, v: float, rho: float) -> float:
    """log M(s, v) of the module docstring."""
    scale = v + rho
    return 0.5 * math.log(4.0 * rho / scale) + s * s / (2.0 * scale) + float(stats.norm.logcdf(s / math.sqrt(scale)))


@functools.lru_cache(maxsize=4096)
def mixture_bound(v: float, alpha: float, v_opt: float) -> float:
    """u(v): the least s at which the one-sided mixture reaches 1 / alpha (see the module docstring)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), not {alpha}")
    rho = best_rho(v_opt)
    threshold = math.log(1.0 / alpha)
    high = math.sqrt(v + rho) * (2.0 + math.sqrt(2.0 * threshold + abs(math.log(rho / (v + rho)))))
    while log_mixture(high, v, rho) < threshold:
        high *= 2.0
    return optimize.brentq(lambda s: log_mixture(s, v, rho) - threshold, 0.0, high, xtol=1e-9)
