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

`mixture_bounds` is the same boundary for arrays of v at once (a race's decision is judged on a batch of
simulated races as cheaply as on one): read off a fine grid of exact roots, log-spaced in v, where
u / sqrt(v + rho) is smooth, so linear interpolation in log v is good to about 1e-5 of u.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, special, stats

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


#: the grid `mixture_bounds` interpolates on: v from 1e-4 to 1e5, 40 points a decade
_GRID_LOG_V = np.linspace(math.log(1e-4), math.log(1e5), 361)


@functools.lru_cache(maxsize=256)
def _grid(alpha: float, v_opt: float) -> np.ndarray:
    """u(v) / sqrt(v + rho) at every point of _GRID_LOG_V, by bisection on all of them at once (log M is
    increasing in s, and u / sqrt(v + rho) lies in [0, high))."""
    rho = best_rho(v_opt)
    scale = np.exp(_GRID_LOG_V) + rho
    threshold = math.log(1.0 / alpha)
    low = np.zeros_like(scale)
    high = np.full_like(scale, 2.0 + math.sqrt(2.0 * threshold + abs(math.log(rho / scale.max())) + 1.0))
    for _ in range(60):
        middle = (low + high) / 2
        s = middle * np.sqrt(scale)
        reached = _log_mixtures(s, scale, rho) >= threshold
        low, high = np.where(reached, low, middle), np.where(reached, middle, high)
    return (low + high) / 2


def _log_mixtures(s: np.ndarray, scale: np.ndarray, rho: float) -> np.ndarray:
    """log M(s, v) for arrays, with scale = v + rho."""
    return 0.5 * np.log(4.0 * rho / scale) + s * s / (2.0 * scale) + special.log_ndtr(s / np.sqrt(scale))


def mixture_bounds(v: np.ndarray, alpha: float, v_opt: float) -> np.ndarray:
    """`mixture_bound` at every element of `v` (each within 1e-4 to 1e5), interpolated (module docstring)."""
    v = np.asarray(v, dtype=float)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), not {alpha}")
    x = np.log(np.clip(v, 1e-4, 1e5))
    return np.interp(x, _GRID_LOG_V, _grid(float(alpha), float(v_opt))) * np.sqrt(v + best_rho(v_opt))


def mixture_p(s: np.ndarray, v: np.ndarray, v_opt: float) -> np.ndarray:
    """The least alpha whose boundary at `v` a sum `s` reaches: 1 / M(s, v), at most 1 (arrays)."""
    rho = best_rho(v_opt)
    return np.minimum(1.0, np.exp(-_log_mixtures(np.asarray(s, dtype=float), np.asarray(v, dtype=float) + rho, rho)))
