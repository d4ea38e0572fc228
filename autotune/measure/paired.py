"""The speedup of one configuration over another, measured on the same prompts in the same rounds, with
its 95 % interval from the pairing.

The speedup is the user's ratio: the mix's decode time of the reference over the entrant's, summed over
the same (round, prompt) units, `S = sum(a) / sum(b)`. (Each entrant unit is first scaled to the
reference's tokens, so a near-tie that changes an output's length does not change the work compared;
at temperature 0 the token counts are equal and S is the plain ratio of decode times, which is the
ratio of mix tok/s.)

Its interval: the delta method for a ratio estimator, on clusters of units. With cluster sums A_c, B_c,
the linearised residual e_c = A_c - S B_c gives Var(S) ~ C/(C-1) sum(e_c^2) / (sum B_c)^2 with C-1
degrees of freedom, and the interval is taken on log S (a ratio's distribution is skewed) with
Student's t. Why this and not a bootstrap: it is exact enough from a handful of clusters, costs
nothing per look (the race looks after every round), and its one-sided tail gives the p-value the
sequential rule needs; a bootstrap over 11 prompts has too few distinct resamples to reach the small
alphas that repeated looks and several entrants require.

What a cluster is follows how the units were measured. When the entrant and the reference ran the same
prompt back to back (the race's live servers, seconds apart), each (round, prompt) unit is its own
cluster: the box's drift cancels inside the pair and what is left is the prompt's own noise. When they
ran whole rounds minutes apart (one server at a time, the in-process engine, several streams), a
round's drift is shared by all its prompts, so each round is one cluster and the interval is honest,
and wide, about it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

#: a difference smaller than this is never a win (pyperf never calls a 1 % difference significant)
MIN_EFFECT = 0.02


@dataclass(frozen=True)
class Units:
    """One configuration's measured units: per round, per prompt, the decode ms and decode tokens."""

    decode_ms: tuple[tuple[float, ...], ...]
    tokens: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, decode_ms: Sequence[Sequence[float]], tokens: Sequence[Sequence[int]]) -> "Units":
        return cls(tuple(tuple(float(v) for v in r) for r in decode_ms), tuple(tuple(int(v) for v in r) for r in tokens))

    @property
    def rounds(self) -> int:
        return len(self.decode_ms)

    def columns(self, indices: Sequence[int]) -> "Units":
        """These units restricted to the prompts at `indices` (a category of the mix)."""
        return Units(tuple(tuple(r[i] for i in indices) for r in self.decode_ms),
                     tuple(tuple(r[i] for i in indices) for r in self.tokens))

    def tok_s(self) -> float:
        """Mix tok/s over every unit: sum of tokens over sum of decode time."""
        ms = sum(map(sum, self.decode_ms))
        return sum(map(sum, self.tokens)) * 1000.0 / ms if ms > 0 else 0.0


@dataclass(frozen=True)
class Speedup:
    """The paired speedup of an entrant over a reference (see the module docstring)."""

    ratio: float
    log_se: float  # standard error of log(ratio)
    df: int  # clusters - 1
    rounds: int
    prompts: int

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """The two-sided `level` interval of the speedup."""
        if self.df < 1 or not math.isfinite(self.log_se):
            return (0.0, math.inf)
        half = float(stats.t.ppf(0.5 + level / 2, self.df)) * self.log_se
        return (self.ratio * math.exp(-half), self.ratio * math.exp(half))

    def lower_bound(self, alpha: float) -> float:
        """The one-sided 1 - alpha lower confidence bound of the speedup."""
        return self._bound(alpha, -1)

    def upper_bound(self, alpha: float) -> float:
        """The one-sided 1 - alpha upper confidence bound of the speedup."""
        return self._bound(alpha, 1)

    def p_faster(self, than: float = 1.0) -> float:
        """One-sided p-value of `speedup <= than` (small: the entrant is faster than `than`)."""
        return self._p(than, faster=True)

    def p_slower(self, than: float = 1.0) -> float:
        """One-sided p-value of `speedup >= than` (small: the entrant is slower than `than`)."""
        return self._p(than, faster=False)

    def _p(self, than: float, *, faster: bool) -> float:
        if self.ratio <= 0:  # nothing measured: never faster, and nothing to say it is slower either
            return 1.0 if faster else 0.0
        if self.df < 1 or not math.isfinite(self.log_se):
            return 1.0
        gap = (math.log(self.ratio) - math.log(than)) * (1 if faster else -1)
        if self.log_se == 0:
            return 0.0 if gap > 0 else 1.0
        return float(stats.t.sf(gap / self.log_se, self.df))

    def _bound(self, alpha: float, side: int) -> float:
        if self.df < 1 or not math.isfinite(self.log_se):
            return 0.0 if side < 0 else math.inf
        return self.ratio * math.exp(side * float(stats.t.ppf(1 - alpha, self.df)) * self.log_se)


def paired_speedup(reference: Units, entrant: Units, *, pair_by_unit: bool) -> Speedup:
    """`entrant`'s speedup over `reference` on the rounds both measured (the first `min` of each).

    `pair_by_unit`: the two ran each prompt back to back, so every (round, prompt) unit is a cluster;
    otherwise every round is one (see the module docstring)."""
    rounds = min(reference.rounds, entrant.rounds)
    prompts = len(reference.decode_ms[0]) if rounds else 0
    if rounds == 0 or prompts == 0:
        return Speedup(0.0, math.inf, 0, rounds, prompts)
    a = np.array(reference.decode_ms[:rounds], dtype=float)
    entrant_ms = np.array(entrant.decode_ms[:rounds], dtype=float)
    ref_tokens = np.array(reference.tokens[:rounds], dtype=float)
    own_tokens = np.maximum(np.array(entrant.tokens[:rounds], dtype=float), 1.0)
    b = entrant_ms * ref_tokens / own_tokens  # the entrant's time for the reference's tokens
    if pair_by_unit:
        a_c, b_c = a.ravel(), b.ravel()
    else:
        a_c, b_c = a.sum(axis=1), b.sum(axis=1)
    total_b = float(b_c.sum())
    if total_b <= 0:
        return Speedup(0.0, math.inf, 0, rounds, prompts)
    ratio = float(a_c.sum()) / total_b
    clusters = len(a_c)
    if clusters < 2:
        return Speedup(ratio, math.inf, 0, rounds, prompts)
    residuals = a_c - ratio * b_c
    variance = clusters / (clusters - 1) * float(np.sum(residuals ** 2)) / total_b ** 2
    return Speedup(ratio, math.sqrt(variance) / ratio if ratio > 0 else math.inf, clusters - 1, rounds, prompts)
