"""When a race knows its answer: one look per round, the 5 % error rate spent over the looks and shared
among the entrants.

Every look compares each entrant with the baseline by the paired rule of autotune.measure.paired. A
race that looked after every round at the full 5 % would call A/A differences significant far more
often than 5 %; so each look spends only part of it: look k of K planned spends
alpha * (f(k/K) - f((k-1)/K)) with f(t) = t^SPENDING_POWER. By the union bound over the looks (Bonferroni,
valid whatever the correlation between looks) the whole race wrongly declares a winner at most 5 % of
the time. A power above 1 keeps the early looks, which have few prompts behind them, strict, and leaves
most of the error rate for the later ones. Within a look, Holm's step-down shares it among the
entrants still in (the most significant is tested at alpha_k / m, the next at alpha_k / (m-1), ...).

At each look:
- an entrant whose speedup is significantly above 1 + MIN_EFFECT is a *winner*: the race stops, and of
  the winners the highest speedup is the answer (it may still be a little slower than an undecided one,
  but it is proven faster than the plain command, which is the claim the printed line makes);
- an entrant significantly slower than the leader (the highest speedup), by the same paired rule on
  the same units, leaves; so does one that can no longer reach 1 + MIN_EFFECT (its upper bound is below
  it): neither can become the answer. These drops test at the race's whole 5 % (Holm over the
  entrants), not at a look's share: a drop can only take a candidate away, never make a false winner,
  and early drops are what shorten the later rounds;
- the race also ends when no entrant is left (the plain command is the answer) or the budget is spent
  (the plain command, with the fastest entrant and its interval said). It never ends just because one
  entrant is left: that entrant must still prove itself against the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

from autotune.measure.paired import MIN_EFFECT, Speedup

ALPHA = 0.05
SPENDING_POWER = 1.5


def look_alpha(look: int, planned: int, alpha: float = ALPHA, power: float = SPENDING_POWER) -> float:
    """The error rate look `look` (1-based) of `planned` may spend; 0 past the plan."""
    if look < 1 or look > planned:
        return 0.0
    return alpha * ((look / planned) ** power - ((look - 1) / planned) ** power)


@dataclass
class Decision:
    """What one look decided."""

    alpha: float  # spent at this look
    winner: Hashable | None = None
    significant: set = field(default_factory=set)  # entrants proven faster than 1 + MIN_EFFECT
    dropped: dict = field(default_factory=dict)  # entrant -> why it left

    @property
    def decided(self) -> bool:
        return self.winner is not None


def judge(vs_baseline: dict[Hashable, Speedup], vs_leader: dict[Hashable, Speedup], *, look: int, planned: int,
          min_effect: float = MIN_EFFECT) -> Decision:
    """Look `look` of `planned` at the entrants still in: each one's speedup over the baseline, and each
    one's over the leader (the entrant with the highest speedup; it has none)."""
    alpha = look_alpha(look, planned)
    decision = Decision(alpha)
    if not vs_baseline or alpha <= 0:
        return decision
    goal = 1.0 + min_effect
    # Holm over the entrants: faster than the goal
    ranked = sorted(vs_baseline, key=lambda key: vs_baseline[key].p_faster(goal))
    for rank, key in enumerate(ranked):
        if vs_baseline[key].p_faster(goal) > alpha / (len(ranked) - rank):
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
