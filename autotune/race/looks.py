"""What the race's decision reads at a look, built from its entrants: each entrant's and its baseline's decode
times by round and by prompt of the mix (autotune.measure.sequential.Look, a batch of one race), the
noise its control shows, whether the round under way is void, and the figures a row prints (the
interval of the test that decided, at the level that decided)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.measure.paired import MIN_EFFECT
from autotune.measure.prompts import PromptMix
from autotune.measure.sequential import BY_PROMPTS, BY_ROUNDS, PROMPT_SHARE, Decision, Look, bounds, decide
from autotune.measure.stratified import (
    MIN_ROUNDS,
    PRIOR_PAIR_SD,
    TAU_FLOOR,
    VOID_SD,
    Evidence,
    Noise,
    control_noise,
    void_rounds,
)
from autotune.race.entrants import Entrant, baseline_of, candidates, units_of
from autotune.study.records import CONTROL_ROLE, SPEC_DEFAULT_ROLE

#: the two-sided 95 % normal quantile of the replication round's interval
REPLICATION_Z = 1.959964


def grid(entrant: Entrant, baseline: Entrant, mix: PromptMix, figure: str) -> tuple[np.ndarray, np.ndarray]:
    """(the baseline's ms, `entrant`'s ms scaled to the baseline's tokens), each (rounds, prompts) by prompt of
    the mix (one column where a round is one unit: aggregate tok/s), nan where either did not run."""
    index = {p.id: i for i, p in enumerate(mix)}
    per_prompt = figure != "aggregate_tok_s"
    rounds = min(len(entrant.rounds), len(baseline.rounds))
    shape = (rounds, len(mix) if per_prompt else 1)
    reference, own = np.full(shape, np.nan), np.full(shape, np.nan)
    for k in range(rounds):
        base_ms, base_tokens = units_of(baseline.rounds[k], figure)
        ms, tokens = units_of(entrant.rounds[k], figure)
        base_ids = [r.prompt_id for r in baseline.rounds[k].results if r.stream == 0] if per_prompt else [None]
        ids = [r.prompt_id for r in entrant.rounds[k].results if r.stream == 0] if per_prompt else [None]
        by_id = {i: (m, t) for i, m, t in zip(base_ids, base_ms, base_tokens)}
        for prompt, m, t in zip(ids, ms, tokens):
            if prompt in by_id:
                column = index[prompt] if per_prompt else 0
                reference[k, column] = by_id[prompt][0]
                own[k, column] = m * by_id[prompt][1] / max(t, 1)
    return reference, own


def _padded(arrays: list[np.ndarray]) -> np.ndarray:
    rounds = max(a.shape[0] for a in arrays)
    return np.stack([np.pad(a, ((0, rounds - a.shape[0]), (0, 0)), constant_values=np.nan) for a in arrays])


@dataclass(frozen=True)
class RaceLook:
    """One look at a race: its candidates, the decision's input (a batch of one) and the decision."""

    contenders: list[Entrant]
    look: Look
    decision: Decision

    def level(self, entrant: Entrant) -> float:
        return float(self.decision.levels[0, self.contenders.index(entrant)])

    def by(self, entrant: Entrant) -> int:
        return int(self.decision.decided_by[0, self.contenders.index(entrant)])


def noise_of(entrants: list[Entrant], mix: PromptMix, figure: str, rounds: slice = slice(None)) -> Noise:
    """The race's noise from its (first) control on `rounds` (the ones a figure is drawn from: the interval
    that decided knows only the control's rounds before the decision); with none, the floor and the prior."""
    control = next((e for e in entrants if e.role == CONTROL_ROLE and e.failure is None and e.rounds), None)
    if control is None:
        return Noise(np.array([TAU_FLOOR**2]), np.array([PRIOR_PAIR_SD**2]))
    reference, own = grid(control, baseline_of(control, entrants), mix, figure)
    return control_noise(reference[rounds][None], own[rounds][None])


def round_is_void(entrants: list[Entrant], mix: PromptMix, figure: str, round_: int) -> str | None:
    """Why round `round_` is void (its control more than VOID_SD sd from 1.00), or None."""
    control = next((e for e in entrants if e.role == CONTROL_ROLE and e.failure is None), None)
    if control is None or len(control.rounds) <= round_:
        return None
    reference, own = grid(control, baseline_of(control, entrants), mix, figure)
    if not void_rounds(reference[None], own[None])[0, round_]:
        return None
    ratio = np.nansum(reference[round_]) / np.nansum(np.where(np.isfinite(reference[round_]), own[round_], np.nan))
    return f"round {round_ + 1}: the plain command against itself ran {ratio:.3f}x, more than {VOID_SD:g} sd from 1.00x"


def look_at(entrants: list[Entrant], mix: PromptMix, figure: str, pairing: str) -> RaceLook | None:
    """The decision at this look over the candidates still in (None: there are none)."""
    contenders = candidates(entrants)
    if not contenders:
        return None
    pairs = [grid(e, baseline_of(e, entrants), mix, figure) for e in contenders]
    look = Look(
        _padded([r for r, _ in pairs])[None],
        _padded([o for _, o in pairs])[None],
        np.ones((1, len(contenders)), dtype=bool),
        noise_of(entrants, mix, figure),
        per_prompt=pairing == "prompt" and figure != "aggregate_tok_s",
    )
    return RaceLook(contenders, look, decide(look, family_of(entrants)))


def family_of(entrants: list[Entrant]) -> int:
    """The Holm family: every finalist and `--spec-default` that began the race, failed or dropped."""
    return max(1, sum(1 for e in entrants if e.role in ("trial", SPEC_DEFAULT_ROLE)))


@dataclass(frozen=True)
class Printed:
    """A row's printed figures: the point, its interval, the interval's one-sided level, and the test."""

    point: float
    interval: tuple[float, float]
    level: float
    test: int


def printed(
    entrant: Entrant,
    entrants: list[Entrant],
    mix: PromptMix,
    figure: str,
    pairing: str,
    level: float,
    by: int,
    rounds: slice = slice(None),
) -> Printed:
    """`entrant`'s figures against its baseline on `rounds`, from the test `by` (the stratified one where it
    decided, or for an entrant not proven where it has its MIN_ROUNDS complete rounds) at its share of
    `level`."""
    reference, own = grid(entrant, baseline_of(entrant, entrants), mix, figure)
    evidence = Evidence(
        reference[rounds][None],
        own[rounds][None],
        noise_of(entrants, mix, figure, rounds),
        per_prompt=pairing == "prompt" and figure != "aggregate_tok_s",
    )
    stratified = evidence.per_prompt and (by == BY_ROUNDS or (by == 0 and int(evidence.rounds[0]) >= MIN_ROUNDS))
    if stratified:
        one_sided = level * (1 - PROMPT_SHARE)
        low, high = (float(evidence.stratified_bound(one_sided, side)[0]) for side in (-1, 1))
        return Printed(float(evidence.stratified_ratio[0]), (low, high), one_sided, BY_ROUNDS)
    one_sided = level * PROMPT_SHARE if evidence.per_prompt else level
    low, high = (float(evidence.prompt_bound(one_sided, side)[0]) for side in (-1, 1))
    return Printed(float(evidence.ratio[0]), (low, high), one_sided, BY_PROMPTS)


def p_value(entrant: Entrant, entrants: list[Entrant], mix: PromptMix, figure: str, pairing: str) -> float:
    """The least level at which the race's two tests prove `entrant` above 1 + MIN_EFFECT (bisection on
    log level; the tests are monotone in it)."""
    reference, own = grid(entrant, baseline_of(entrant, entrants), mix, figure)
    evidence = Evidence(
        reference[None],
        own[None],
        noise_of(entrants, mix, figure),
        per_prompt=pairing == "prompt" and figure != "aggregate_tok_s",
    )

    def proven(level: float) -> bool:
        return max(float(b[0]) for b in bounds(evidence, level, -1, evidence.per_prompt)) > 1 + MIN_EFFECT

    if not proven(0.999):
        return 1.0
    low, high = math.log(1e-12), math.log(0.999)
    if proven(math.exp(low)):
        return 1e-12
    for _ in range(20):  # to a factor of 1.00003
        middle = (low + high) / 2
        low, high = (low, middle) if proven(math.exp(middle)) else (middle, high)
    return math.exp(high)


def replication_interval(
    entrant: Entrant, entrants: list[Entrant], mix: PromptMix, figure: str, round_: int
) -> tuple[float, float] | None:
    """The 95 % interval of round `round_` alone (a round planned before it ran, so a fixed-sample one) over the
    prompts it ran (the whole mix, or one a category where a budget asked): its log ratio +- 1.96 sd, the sd
    the stratified test's (tau^2 + sigma^2 sum w^2); None where it ran no prompt or a round is not timed
    prompt by prompt."""
    reference, own = grid(entrant, baseline_of(entrant, entrants), mix, figure)
    ran = np.isfinite(reference[round_]) & np.isfinite(own[round_])
    evidence = Evidence(
        reference[round_ : round_ + 1, ran][None], own[round_ : round_ + 1, ran][None], noise_of(entrants, mix, figure)
    )
    if figure == "aggregate_tok_s" or int(evidence.rounds[0]) != 1:
        return None
    half = REPLICATION_Z * math.sqrt(float(evidence.variance[0]))
    return (math.exp(float(evidence.log_ratio[0]) - half), math.exp(float(evidence.log_ratio[0]) + half))
