"""When a race knows its answer: the decision at one look, a pure function of what was measured (no engine,
no servers), for a batch of independent races at once, so that the race (autotune.race.race, a batch
of one) and its simulations (autotune.measure.simulation) run the very same rule.

Each entrant is compared with its baseline by two anytime-valid tests (autotune.measure.stratified):
the per-prompt sequence, at PROMPT_SHARE of the entrant's level, and the stratified test over
complete rounds, at the rest. Either may reject (a union bound: the entrant's error stays within its
level), so a large effect still decides within the first round while a real 1.10x with a skewed
spread of prompts is proven by the rounds. Whole mixes one configuration at a time, only the paired
test over rounds runs, at the whole level.

At each look:
- **Holm's step-down** shares ALPHA among the `family` (every entrant that began the race, a dropped or
  failed one included: a drop is an acceptance, never a rejection): every entrant whose lower bound at
  alpha / (m - r) (r already rejected) lies above 1 + MIN_EFFECT is *proven* at that level, and the step
  repeats with the new r until none is (the same rejections as Holm's p-value order, with no p-value
  needed). An entrant carries the level it was proven at; one not proven, the level the step-down
  stopped at, where every test still open was kept.
- **Best within 2 %:** the leader is the proven entrant with the highest ratio (the user's ratio of
  summed decode times). It is the *winner* once no live rival's upper bound against it (the same two
  tests, the rival's time against the leader's, at RIVAL level alpha / (family - 1) each) still reaches
  1 + MIN_EFFECT: no entrant left can be more than 2 % faster than it. Until then the race goes on;
  where the budget ends first, the leader is the pick and the rivals still within reach are named.
- **Drops:** an entrant whose upper bound against the leader is below 1 (proven slower than it), or
  whose upper bound against its baseline is below 1 + MIN_EFFECT at its level, leaves: neither can be the
  answer, and a drop only takes a candidate away, so it cannot make a false winner.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.measure.paired import MIN_EFFECT
from autotune.measure.stratified import Evidence, Noise

ALPHA = 0.05
#: the share of each entrant's level spent on the per-prompt sequence (the rest: the stratified test)
PROMPT_SHARE = 0.25
#: which test proved an entrant (`Decision.decided_by`)
UNDECIDED, BY_PROMPTS, BY_ROUNDS = 0, 1, 2
#: why an entrant leaves (`Decision.dropped`)
STAYS, SLOWER, CANNOT_REACH = 0, 1, 2
TEST_NAMES = {BY_PROMPTS: "per-prompt sequence", BY_ROUNDS: "stratified rounds"}


@dataclass(frozen=True)
class Look:
    """What a batch of races measured by a look: per race and entrant (a finalist or `--spec-default`), per
    round and prompt of the mix, the entrant's decode ms (scaled to its baseline's tokens) and its
    target's baseline's, nan where not run; which entrants are still in; each race's noise."""

    reference: np.ndarray  # (races, entrants, rounds, prompts)
    entrants: np.ndarray  # (races, entrants, rounds, prompts)
    alive: np.ndarray  # (races, entrants) bool
    noise: Noise  # arrays (races,)
    per_prompt: bool = True  # prompt by prompt on live servers; False: whole mixes in turn

    def evidence(self, reference: np.ndarray) -> Evidence:
        """Each entrant's evidence against `reference` (broadcast to the entrants' shape)."""
        noise = Noise(self.noise.tau2[:, None], self.noise.sigma2[:, None])
        return Evidence(
            np.broadcast_to(reference, self.entrants.shape), self.entrants, noise, per_prompt=self.per_prompt
        )


@dataclass(frozen=True)
class Decision:
    """What one look decided, per race (and entrant)."""

    proven: np.ndarray  # (races, entrants) proven above 1 + MIN_EFFECT
    levels: np.ndarray  # (races, entrants) the one-sided level each was judged at
    decided_by: np.ndarray  # (races, entrants) BY_PROMPTS or BY_ROUNDS where proven
    leader: np.ndarray  # (races,) the proven entrant with the highest ratio, else the live one; -1: none
    winner: np.ndarray  # (races,) the leader once no rival is within reach; -1: not yet
    within_reach: np.ndarray  # (races, entrants) rivals whose bound against the leader still reaches the goal
    dropped: np.ndarray  # (races, entrants) SLOWER or CANNOT_REACH


def rival_level(family: int, alpha: float = ALPHA) -> float:
    """The one-sided level of each rival's bound against the leader."""
    return alpha / max(1, family - 1)


def bounds(evidence: Evidence, level, side: int, per_prompt: bool) -> tuple[np.ndarray, np.ndarray]:
    """(the per-prompt sequence's bound, the stratified one) at an entrant's `level`, split as the
    module docstring says; the stratified one is none (0 or inf) where whole mixes are the unit."""
    if not per_prompt:
        return evidence.prompt_bound(level, side), np.full(evidence.ratio.shape, 0.0 if side < 0 else np.inf)
    level = np.asarray(level, dtype=float)
    return evidence.prompt_bound(level * PROMPT_SHARE, side), evidence.stratified_bound(
        level * (1 - PROMPT_SHARE), side
    )


def decide(look: Look, family: int, alpha: float = ALPHA) -> Decision:
    """The look's decision (module docstring); `family`: the entrants that began each race."""
    races, entrants = look.alive.shape
    goal = 1.0 + MIN_EFFECT
    size = max(family, entrants)
    versus_baseline = look.evidence(look.reference)
    proven = np.zeros((races, entrants), dtype=bool)
    levels = np.zeros((races, entrants))
    decided_by = np.zeros((races, entrants), dtype=np.int8)
    rejected = np.zeros(races)
    for _ in range(entrants):  # Holm's step-down, each step at alpha / (size - rejected)
        level = np.broadcast_to((alpha / np.maximum(size - rejected, 1))[:, None], (races, entrants))
        by_prompts, by_rounds = bounds(versus_baseline, level, -1, look.per_prompt)
        new = look.alive & ~proven & ((by_prompts > goal) | (by_rounds > goal))
        if not new.any():
            break
        levels = np.where(new, level, levels)
        decided_by = np.where(new, np.where(by_rounds > goal, BY_ROUNDS, BY_PROMPTS), decided_by)
        proven |= new
        rejected = rejected + new.sum(1)
    levels = np.where(proven, levels, (alpha / np.maximum(size - rejected, 1))[:, None])

    ratio = np.where(look.alive, versus_baseline.ratio, -np.inf)
    pool = np.where(proven.any(1, keepdims=True), np.where(proven, ratio, -np.inf), ratio)
    leader = np.where(look.alive.any(1), np.argmax(pool, axis=1), -1)
    leading = np.take_along_axis(look.entrants, np.maximum(leader, 0)[:, None, None, None], axis=1)
    rivals = look.alive & (np.arange(entrants)[None, :] != leader[:, None])
    upper = np.minimum(*bounds(look.evidence(leading), rival_level(size, alpha), 1, look.per_prompt))
    dropped = np.where(rivals & (upper < 1.0), SLOWER, STAYS).astype(np.int8)
    own_upper = np.minimum(*bounds(versus_baseline, levels, 1, look.per_prompt))
    dropped = np.where(look.alive & ~proven & (dropped == STAYS) & (own_upper < goal), CANNOT_REACH, dropped)
    reach = rivals & (dropped == STAYS) & (upper >= goal)
    leader_proven = np.take_along_axis(proven, np.maximum(leader, 0)[:, None], axis=1)[:, 0] & (leader >= 0)
    winner = np.where(leader_proven & ~reach.any(1), leader, -1)
    dropped = np.where(winner[:, None] >= 0, STAYS, dropped).astype(np.int8)
    return Decision(proven, levels, decided_by, leader, winner, reach, dropped)
