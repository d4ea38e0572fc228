"""When a race knows its answer: one look per round, the 5 % error rate spent over the looks and shared
among the entrants.

Every look compares each entrant with the baseline by the paired rule of autotune.measure.paired. A
race that looked after every round at the full 5 % would call A/A differences significant far more
often than 5 %; so the rate is spent over the K planned looks by a spending function (Lan and DeMets):
by look k at most alpha * f(k/K) in all, f(t) = t^SPENDING_POWER. A power above 1 keeps the early
looks, which have few prompts behind them, strict, and leaves most of the rate for the later ones.

Each look's critical value is exact for the looks' correlation, not a union bound: every round adds the
same number of paired units, so the standardised statistics of looks i < j correlate as sqrt(i/j) (the
canonical joint distribution of a group-sequential test), and `boundaries` finds c_1 ... c_K, one at a
time, such that a true null crosses first at look k with probability alpha * (f(k/K) - f((k-1)/K)),
integrating the statistic's sub-density over the continuation region on a grid (deterministic, a few
milliseconds a plan). A look then tests each entrant's one-sided p-value (Student's t on the paired
units) against the normal level of its boundary, 1 - Phi(c_k): at K = 4 and 5 % the last look's is
3.4 % where a union bound over the looks would allow 1.7 %. Within a look, Holm's step-down shares the
rate among the entrants (the most significant against the boundaries for alpha / m, the next
alpha / (m-1), ...), m counting every entrant that began the race: a dropped one keeps its place in
the family, since a drop is an acceptance, never a rejection.

At each look:
- an entrant whose speedup is significantly above 1 + MIN_EFFECT is a *winner*: the race stops, and of
  the winners the highest speedup is the answer (it may still be a little slower than an undecided one,
  but it is proven faster than the plain command, which is the claim the printed line makes);
- an entrant significantly slower than the leader (the highest speedup), by the same paired rule on
  the same units, leaves; so does one that can no longer reach 1 + MIN_EFFECT (its upper bound is below
  it): neither can become the answer. These drops test at the race's whole 5 % (Holm over the
  entrants), not at a look's share: a drop can only take a candidate away, never make a false winner,
  and early drops are what shorten the later rounds (a non-binding futility rule: the winner's
  boundaries are computed as if nothing were ever dropped, so they stay valid);
- the race also ends when no entrant is left (the plain command is the answer) or the budget is spent
  (the plain command, with the fastest entrant and its interval said). It never ends just because one
  entrant is left: that entrant must still prove itself against the baseline.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Hashable

import numpy as np
from scipy import optimize, stats

from autotune.measure.paired import MIN_EFFECT, Speedup

ALPHA = 0.05
SPENDING_POWER = 1.5
_GRID = 4001  # points of the statistic's sub-density: boundaries to about 1e-4


def look_alpha(look: int, planned: int, alpha: float = ALPHA, power: float = SPENDING_POWER) -> float:
    """The error rate look `look` (1-based) of `planned` may spend; 0 past the plan."""
    if look < 1 or look > planned:
        return 0.0
    return alpha * ((look / planned) ** power - ((look - 1) / planned) ** power)


@functools.lru_cache(maxsize=256)
def boundaries(planned: int, alpha: float = ALPHA, power: float = SPENDING_POWER) -> tuple[float, ...]:
    """The one-sided critical values c_1 ... c_planned of the standardised statistic (module docstring):
    under the null, the first crossing happens at look k with probability look_alpha(k, planned)."""
    width = 10.0 * np.sqrt(planned)  # the partial sum S_k = Z_k sqrt(k) lives well inside +-width
    grid = np.linspace(-width, width, _GRID)
    step = grid[1] - grid[0]
    density = None  # sub-density of S_{k-1} on the grid, having crossed no boundary so far
    found: list[float] = []
    for look in range(1, planned + 1):
        spend = look_alpha(look, planned, alpha, power)
        if density is None:
            def crossing(c: float) -> float:
                return float(stats.norm.sf(c)) - spend
            continuation = stats.norm.pdf(grid)  # S_1 ~ N(0, 1)
        else:
            def crossing(c: float, density=density) -> float:  # increments are N(0, 1)
                return float(np.sum(density * stats.norm.sf(c * np.sqrt(look) - grid)) * step) - spend
            continuation = np.convolve(density, stats.norm.pdf(np.arange(-(_GRID // 2), _GRID // 2 + 1) * step),
                                       mode="same") * step
        c = optimize.brentq(crossing, -10.0, 40.0, xtol=1e-6) if spend > 0 else np.inf
        found.append(float(c))
        density = np.where(grid < c * np.sqrt(look), continuation, 0.0)
    return tuple(found)


def nominal_level(look: int, planned: int, alpha: float = ALPHA) -> float:
    """The one-sided p-value a statistic must reach at look `look` of `planned` (0 past the plan)."""
    if look < 1 or look > planned:
        return 0.0
    return float(stats.norm.sf(boundaries(planned, alpha)[look - 1]))


@dataclass
class Decision:
    """What one look decided."""

    alpha: float  # the nominal one-sided level of this look, for one entrant alone
    winner: Hashable | None = None
    significant: set = field(default_factory=set)  # entrants proven faster than 1 + MIN_EFFECT
    dropped: dict = field(default_factory=dict)  # entrant -> why it left

    @property
    def decided(self) -> bool:
        return self.winner is not None


def judge(vs_baseline: dict[Hashable, Speedup], vs_leader: dict[Hashable, Speedup], *, look: int, planned: int,
          family: int | None = None, min_effect: float = MIN_EFFECT) -> Decision:
    """Look `look` of `planned` at the entrants still in: each one's speedup over the baseline, and each
    one's over the leader (the entrant with the highest speedup; it has none). `family`: how many
    entrants began the race (the Holm family; those still in where not given)."""
    decision = Decision(nominal_level(look, planned))
    if not vs_baseline or decision.alpha <= 0:
        return decision
    goal = 1.0 + min_effect
    size = max(family or 0, len(vs_baseline))
    # Holm over the entrants: faster than the goal, each step against the boundaries of its share
    ranked = sorted(vs_baseline, key=lambda key: vs_baseline[key].p_faster(goal))
    for rank, key in enumerate(ranked):
        if vs_baseline[key].p_faster(goal) > nominal_level(look, planned, ALPHA / (size - rank)):
            break
        decision.significant.add(key)
    if decision.significant:
        decision.winner = max(decision.significant, key=lambda key: vs_baseline[key].ratio)
        return decision
    # Holm over the comparisons with the leader: slower than it
    trailing = sorted(vs_leader, key=lambda key: vs_leader[key].p_slower())
    for rank, key in enumerate(trailing):
        if vs_leader[key].p_slower() > ALPHA / (len(trailing) - rank):
            break
        decision.dropped[key] = "significantly slower than the leader, prompt by prompt"
    for key, speedup in vs_baseline.items():
        if key not in decision.dropped and speedup.upper_bound(ALPHA) < goal:
            decision.dropped[key] = (f"cannot reach the minimum effect ({speedup.ratio:.2f}x, at most "
                                     f"{speedup.upper_bound(ALPHA):.3f}x < {goal:.2f}x)")
    return decision
