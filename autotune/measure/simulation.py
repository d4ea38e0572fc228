"""Races on synthetic rounds: the race's own decision (autotune.measure.sequential.decide) and void-round
guard (autotune.measure.stratified.void_rounds) run on made-up measurements, thousands of races at
once, with no llama.cpp. They guard the statistics (tests/race/test_simulated.py) and print its rates
(examples/benchmarks/race_simulation.py).

A race: PROMPTS prompts of TOKENS_RANGE decode tokens (drawn per race), each round's prompt order
shuffled; every server instance (the baseline's, the control's, each entrant's) started afresh each
round with a speed of its own (log-normal, `instance_sd` the sd of a pair's log ratio; with chance
`slow` an instance runs SLOW_FACTOR slower); every measurement off by `noise` (relative sd). Each
entrant's speedup differs from prompt to prompt by a profile (PROFILES), scaled so its time-weighted
ratio over the mix (the user's) is exactly its `truth`. The race looks after every prompt, voids a round
whose control moved (and plays another, at most MAX_VOID), and ends with a winner, with no entrant
left, or when `budget` valid rounds are spent: then the proven leader, if any, is the pick.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.measure.sequential import Look, decide
from autotune.measure.stratified import MAX_VOID, control_noise, void_rounds

PROMPTS = 11
TOKENS_RANGE = (48, 400)
MS_PER_TOKEN = 20.0
SLOW_FACTOR = 1.08


def _profile(name: str, rng: np.random.Generator, races: int) -> np.ndarray:
    """(races, PROMPTS) relative per-prompt speedups of a profile, in a random prompt order per race."""
    base = {
        "uniform": np.ones(PROMPTS),
        "spread": np.linspace(0.95, 1.35, PROMPTS),  # a real configuration: some prompts gain, some not
        "skewed": np.array([1.0] * 7 + [1.05, 1.3, 1.8, 2.6]),  # n-gram-like: a few prompts copy a lot
        "rare-slow": np.array([1.06] * 9 + [0.7, 0.7]),  # a little faster on most, much slower on two
    }[name]
    return np.array([rng.permutation(base) for _ in range(races)])


PROFILES = ("uniform", "spread", "skewed", "rare-slow")


def scenarios() -> list[tuple["Scenario", int | None, str]]:
    """The issue's scenarios, each with the entrant whose pick counts and what a pick of it is: "error" (a
    false winner: at most the nominal rate) or "power" (at least 95 %)."""
    found = [(Scenario("A/A", (1.0,), ("uniform",)), 0, "error")]
    found += [(Scenario(f"edge 1.02x, {p}", (1.02,), (p,)), 0, "error") for p in PROFILES]
    found += [
        (Scenario("edge 1.02x, 2 % instance sd", (1.02,), ("spread",), instance_sd=0.02), 0, "error"),
        (Scenario("edge 1.02x, slow instances", (1.02,), ("spread",), slow=0.1), 0, "error"),
    ]
    found += [(Scenario(f"1.10x, {p}", (1.10,), (p,)), 0, "power") for p in PROFILES]
    found += [(Scenario("1.08x uniform against 1.20x skewed", (1.08, 1.20), ("uniform", "skewed")), 1, "power")]
    return found


@dataclass(frozen=True)
class Scenario:
    """Entrants (each a true speedup and a profile) and the machine they race on."""

    name: str
    truths: tuple[float, ...]
    profiles: tuple[str, ...]
    instance_sd: float = 0.01
    slow: float = 0.0
    noise: float = 0.025


@dataclass(frozen=True)
class Outcomes:
    """Per race: the pick (an entrant's index, -1 for the plain command), whether the rule named it
    (else the budget ended with it leading), the valid rounds played and the void ones."""

    pick: np.ndarray
    named: np.ndarray
    rounds: np.ndarray
    voids: np.ndarray

    def rate(self, entrant: int) -> int:
        """Races that picked `entrant`."""
        return int(np.sum(self.pick == entrant))


def measurements(scenario: Scenario, races: int, slots: int, rng: np.random.Generator):
    """(baseline, control, entrants, positions): decode ms (races, slots, PROMPTS) and (races, entrants,
    slots, PROMPTS), and each prompt's position in its round's order."""
    tokens = rng.uniform(*TOKENS_RANGE, (races, 1, PROMPTS))
    base = tokens * MS_PER_TOKEN

    def run(speedup: np.ndarray | float) -> np.ndarray:
        own = rng.normal(0.0, scenario.instance_sd / np.sqrt(2), (races, slots, 1))
        slow = np.where(rng.random((races, slots, 1)) < scenario.slow, SLOW_FACTOR, 1.0)
        return base / speedup * np.exp(own) * slow * (1 + rng.normal(0.0, scenario.noise, (races, slots, PROMPTS)))

    entrants = []
    for truth, profile in zip(scenario.truths, scenario.profiles):
        shape = _profile(profile, rng, races)[:, None, :]
        ratio = base.sum(-1, keepdims=True) / (base / shape).sum(-1, keepdims=True)
        entrants.append(run(shape * truth / ratio))
    positions = np.argsort(rng.random((races, slots, PROMPTS)), axis=-1)
    return run(1.0), run(1.0), np.stack(entrants, axis=1), positions


def simulate(scenario: Scenario, races: int, *, budget: int = 4, family: int = 3, seed: int = 0) -> Outcomes:
    """`races` races of `scenario` judged look by look as the race judges them (module docstring)."""
    rng = np.random.default_rng(seed)
    slots = budget + MAX_VOID
    baseline, control, entrants, positions = measurements(scenario, races, slots, rng)
    count = entrants.shape[1]
    pick, named = np.full(races, -1), np.zeros(races, dtype=bool)
    rounds, voids = np.zeros(races, dtype=int), np.zeros(races, dtype=int)
    active = np.ones(races, dtype=bool)
    alive = np.ones((races, count), dtype=bool)
    void = np.zeros((races, slots), dtype=bool)
    slot_index = np.arange(slots)[None, :, None]
    for slot in range(slots):
        for position in range(PROMPTS):
            if not active.any():
                return Outcomes(pick, named, rounds, voids)
            seen = (slot_index < slot) | ((slot_index == slot) & (positions <= position))
            seen = seen[..., : slot + 1, :] & ~void[:, : slot + 1, None]
            now = np.flatnonzero(active)
            ref = np.where(seen, baseline[:, : slot + 1], np.nan)[now]
            ctrl = np.where(seen, control[:, : slot + 1], np.nan)[now]
            moved = void_rounds(ref, ctrl)[:, slot]
            void[now[moved], slot] = True
            voids[now[moved]] += 1
            ended = now[moved][voids[now[moved]] > MAX_VOID]
            active[ended] = False
            keep = ~moved
            now, ref, ctrl = now[keep], ref[keep], ctrl[keep]
            if now.size == 0:
                continue
            shown = np.where(seen[now][:, None], entrants[now][:, :, : slot + 1], np.nan)
            decision = decide(
                Look(np.broadcast_to(ref[:, None], shown.shape), shown, alive[now], control_noise(ref, ctrl)), family
            )
            won = decision.winner >= 0
            pick[now[won]], named[now[won]] = decision.winner[won], True
            rounds[now[won]] = slot + (position == PROMPTS - 1)
            active[now[won]] = False
            alive[now] &= decision.dropped == 0
            active[now[~alive[now].any(1)]] = False
            if position == PROMPTS - 1:
                going = now[~won & active[now]]
                rounds[going] += 1
                spent = going[rounds[going] >= budget]
                leader = decision.leader[np.searchsorted(now, spent)]
                proven = decision.proven[np.searchsorted(now, spent), np.maximum(leader, 0)] & (leader >= 0)
                pick[spent] = np.where(proven, leader, -1)
                active[spent] = False
    return Outcomes(pick, named, rounds, voids)
