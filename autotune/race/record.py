"""A race as stored with its study (autotune.study.verdict): each entrant's row with the figures it prints.

A winner's row carries the interval of the test that decided (autotune.measure.sequential), at the
level that decided, with that test's point at the decision inside it; its `speedup` is the round run on
fresh servers after the decision alone (a race stops where its estimate is high), with that round's
own 95 % interval beside it, printed as a replication. Every other row carries its interval at the
level its last look judged it at (the stratified test's where a round was complete), and that test's
point as its speedup; the control's is the plain paired test at CONTROL_ALPHA each side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from autotune.engines.base import Engine
from autotune.measure.prompts import PromptMix
from autotune.measure.sequential import ALPHA, TEST_NAMES
from autotune.measure.stats import ci95
from autotune.race.entrants import Entrant, baseline_of, entrant_units, speedup_of
from autotune.race.guards import CONTROL_ALPHA, count_ceiling
from autotune.race.looks import family_of, p_value, printed, replication_interval
from autotune.race.rounds import Rounds
from autotune.spec.command import ServerCommand
from autotune.study.records import CONTROL_ROLE, SPEC_DEFAULT_ROLE
from autotune.study.verdict import RACE_BUDGET_CAP, RacedConfig, RaceVerdict

SERVING_FIGURES = ("mix_tok_s", "aggregate_tok_s", "per_stream_tok_s", "per_stream_p10_tok_s")


@dataclass
class Outcome:
    """How a race ended and what it decided: per entrant id, the (level, test) of its last look."""

    ended: str
    judged: dict
    winner: Entrant | None = None
    decided_round: int | None = None
    after_decision: int | None = None
    moved: str | None = None
    voided: tuple[str, ...] = ()
    within_reach: tuple[str, ...] = ()
    budget_cap: str = RACE_BUDGET_CAP  # what set the race's budget (RaceBudget.cap)


def verdict_of(
    engine: Engine, rounds: Rounds, mix: PromptMix, command: ServerCommand, figure: str, outcome: Outcome
) -> RaceVerdict:
    """The stored race (module docstring)."""
    entrants, pairing = rounds.entrants, rounds.pairing
    family = family_of(entrants)

    def row(entrant: Entrant) -> RacedConfig:
        measured_rounds = [m for m in entrant.rounds if m.results]
        samples = [round(getattr(m, figure), 3) for m in measured_rounds]
        measured = bool(measured_rounds) and entrant.failure is None
        units = entrant_units(entrant, figure)
        mean = float(np.mean(samples)) if samples else 0.0
        figures = dict(speedup=None, speedup_ci=None, speedup_ci_level=round(1 - ALPHA / family, 6), p_value=None)
        if measured and not entrant.is_baseline:
            figures.update(_figures(entrant, entrants, mix, figure, pairing, outcome, family))
        return RacedConfig(
            label=entrant.label,
            role=entrant.role,
            trial=entrant.trial,
            target=str(entrant.config.target),
            argv=command.argv(entrant.config),
            samples=samples,
            mean_tok_s=round(mean, 3),
            ci95=(ci95(samples) or (mean, mean)) if samples else (0.0, 0.0),
            failure=entrant.failure,
            dropped=entrant.dropped if measured else None,
            figures={name: [round(getattr(m, name), 3) for m in measured_rounds] for name in SERVING_FIGURES},
            concurrency=command.parallel,
            significant=entrant is outcome.winner,
            rounds=len(entrant.rounds),
            prompts=len(mix),
            decode_ms=[list(r) for r in units.decode_ms],
            tokens=[list(r) for r in units.tokens],
            family=entrant.family,
            ceiling=None if entrant.is_baseline else _rounded(count_ceiling(entrant, baseline_of(entrant, entrants))),
            **figures,
        )

    return RaceVerdict(
        engine=engine.name,
        build=engine.build_info,
        repeats=len(rounds.orders),
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        baselines=[row(e) for e in entrants if e.is_baseline],
        configs=[row(e) for e in entrants if e.role in ("trial", "preset")],
        spec_defaults=[row(e) for e in entrants if e.role == SPEC_DEFAULT_ROLE],
        controls=[row(e) for e in entrants if e.role == CONTROL_ROLE],
        prompt_ids=[p.id for p in mix],
        categories=[p.category for p in mix],
        pairing=pairing,
        ended=outcome.ended,
        orders=[list(o) for o in rounds.orders],
        decided_round=outcome.decided_round,
        after_decision_round=outcome.after_decision,
        looks=sum(len(m.results) for m in entrants[0].rounds) if pairing == "prompt" else len(rounds.orders),
        machine_moved=outcome.moved,
        void_rounds=list(outcome.voided),
        within_reach=list(outcome.within_reach),
        budget_cap=outcome.budget_cap,
    )


def _figures(
    entrant: Entrant, entrants: list[Entrant], mix: PromptMix, figure: str, pairing: str, outcome: Outcome, family: int
) -> dict:
    """A measured entrant's speedup, interval, level and p-value (module docstring)."""
    if entrant.role == CONTROL_ROLE:
        speedup = speedup_of(entrant, entrants, figure, pairing)
        return dict(
            speedup=_rounded(speedup.ratio) if speedup.ratio > 0 else None,
            speedup_ci=_interval(speedup.interval(CONTROL_ALPHA)),
            speedup_ci_level=1 - CONTROL_ALPHA,
            p_value=round(speedup.p_faster(), 6),
        )
    level, test = outcome.judged.get(id(entrant), (ALPHA / family, 0))
    found = dict(p_value=round(p_value(entrant, entrants, mix, figure, pairing), 6))
    after = outcome.after_decision
    if entrant is outcome.winner and after is not None:
        decided = printed(entrant, entrants, mix, figure, pairing, level, test, slice(0, after))
        again = speedup_of(entrant, entrants, figure, pairing, slice(after, after + 1))
        replication = replication_interval(entrant, entrants, mix, figure, after)
        return found | dict(
            speedup=_rounded(again.ratio),
            speedup_at_decision=_rounded(decided.point),
            speedup_ci=_interval(decided.interval),
            speedup_ci_level=round(1 - decided.level, 6),
            decided_by=TEST_NAMES[decided.test],
            replication_ci=None if replication is None else _interval(replication),
        )
    shown = printed(entrant, entrants, mix, figure, pairing, level, test)
    return found | dict(
        speedup=_rounded(shown.point) if shown.point > 0 else None,
        speedup_ci=_interval(shown.interval),
        speedup_ci_level=round(1 - shown.level, 6),
        decided_by=TEST_NAMES.get(test),
    )


def _interval(interval: tuple[float, float]) -> tuple[float, float]:
    return tuple(round(v, 4) if math.isfinite(v) else v for v in interval)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
