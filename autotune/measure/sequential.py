"""When a race knows its answer: a look after every prompt, each at the full error rate, shared among
the entrants.

Every look compares each entrant with the baseline, and with the leader, by the paired rule of
autotune.measure.paired, whose bounds hold at every look at once: no share of the error rate is
spent per look and no number of looks is planned, so a race may look after each prompt and stop at
the first decisive one. Within a look, Holm's step-down shares the rate among the entrants (the most
significant against alpha / m, the next alpha / (m-1), ...), m counting every entrant that began the
race: a dropped one keeps its place in the family, since a drop is an acceptance, never a rejection.
The level an entrant was judged at is the level its printed interval is drawn at.

At each look:
- an entrant whose lower bound is above 1 + MIN_EFFECT at its Holm level is a *winner*: the race
  stops, and of the winners the highest speedup is the answer;
- an entrant whose upper bound is below the leader's speedup's side (significantly slower than the
  leader, by the same paired rule on the same units) leaves; so does one whose upper bound is below
  1 + MIN_EFFECT: neither can become the answer. Both are tested at the entrant's Holm level of the
  whole rate; a drop only takes a candidate away, so it cannot make a false winner;
- the race also ends when no entrant is left (the plain command is the answer) or the budget is spent
  (the plain command, with the fastest entrant and its interval said).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

from autotune.measure.paired import MIN_EFFECT, Speedup

ALPHA = 0.05


def holm_levels(p_values: dict[Hashable, float], family: int, alpha: float = ALPHA) -> dict[Hashable, float]:
    """Each key's Holm level (alpha / (family - rank)) in the order of its p-value, smallest first."""
    ranked = sorted(p_values, key=p_values.__getitem__)
    size = max(family, len(ranked))
    return {key: alpha / (size - rank) for rank, key in enumerate(ranked)}


@dataclass
class Decision:
    """What one look decided."""

    levels: dict = field(default_factory=dict)  # entrant -> the one-sided level it was judged at
    winner: Hashable | None = None
    significant: set = field(default_factory=set)  # entrants proven faster than 1 + MIN_EFFECT
    dropped: dict = field(default_factory=dict)  # entrant -> why it left

    @property
    def decided(self) -> bool:
        return self.winner is not None


def judge(vs_baseline: dict[Hashable, Speedup], vs_leader: dict[Hashable, Speedup], *,
          family: int | None = None, min_effect: float = MIN_EFFECT, alpha: float = ALPHA) -> Decision:
    """A look at the entrants still in: each one's speedup over the baseline, and each one's over the
    leader (the entrant with the highest speedup; it has none). `family`: how many entrants began the
    race (the Holm family; those still in where not given)."""
    if not vs_baseline:
        return Decision()
    goal = 1.0 + min_effect
    size = max(family or 0, len(vs_baseline))
    p_values = {key: speedup.p_faster(goal) for key, speedup in vs_baseline.items()}
    levels = holm_levels(p_values, size, alpha)
    decision = Decision(levels)
    for key in sorted(p_values, key=p_values.__getitem__):  # Holm's step-down: stop at the first kept
        if p_values[key] > levels[key]:
            break
        decision.significant.add(key)
    if decision.significant:
        decision.winner = max(decision.significant, key=lambda key: vs_baseline[key].ratio)
        return decision
    behind = {key: speedup.p_slower() for key, speedup in vs_leader.items()}
    behind_levels = holm_levels(behind, size, alpha)
    for key in sorted(behind, key=behind.__getitem__):
        if behind[key] > behind_levels[key]:
            break
        decision.dropped[key] = "significantly slower than the leader"
    for key, speedup in vs_baseline.items():
        bound = speedup.upper_bound(levels[key])
        if key not in decision.dropped and bound < goal:
            decision.dropped[key] = (f"cannot reach the minimum effect ({speedup.ratio:.2f}x, at most "
                                     f"{bound:.3f}x < {goal:.2f}x)")
    return decision
