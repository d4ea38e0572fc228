"""The race: a few configurations with the references, measured prompt after prompt on the arbiter until
the answer is known or the budget is spent. Every verdict autotune prints comes from here: the
predicted search's, `confirm`'s (the measured strategy, `autotune confirm`, `nightly`).

Where the engine can keep every entrant loaded at once (llama-server, memory allowing:
autotune.engines.live) a round starts every entrant's server afresh and goes prompt by prompt, in an
order shuffled per round (the prompts seen so far are a random part of the mix, not its first
category), each prompt's entrants back to back in an order rotated per prompt, so a pair is measured
seconds apart and the machine's drift cancels inside it. The race looks after every prompt: its bounds
(autotune.measure.paired) hold at every look at once, so an entrant leaves after the prompts that show
it cannot win, and a clear winner is known within a round. Elsewhere each entrant runs the whole mix in
turn, the order rotated per round, a round is the unit of pairing, and the race looks after each round.

What keeps a verdict honest beyond the statistics:
- a control: the plain command a second time, a server of its own, raced like an entrant. Where its
  bounds exclude 1 the machine's speed moved under the race (a second process, a busy neighbour): the
  race ends there and names no winner;
- the server's own counts: a speedup whose lower bound is above what the entrant's accepted drafts
  allow (each target step costs at least a plain decode step, so the mix can run at most
  sum(baseline ms) / sum(baseline ms x steps / tokens) times as fast) is a timing artefact, and its
  entrant fails with that reason;
- the printed figure is not the peak where the race stopped: a winner, its baseline and the control run
  one more round on fresh servers after the decision, and the winner's speedup is the ratio of that
  round alone (its bounds use everything, which they may: they hold at any stopping time);
- a measurement that drafted nothing over a round, or whose output is not the baseline's, fails its
  entrant (autotune.race.checks). The references are never dropped: every speedup is over the baseline
  of the same rounds, and `--spec-default` races like any entrant.
"""

from __future__ import annotations

import math
from contextlib import closing
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

import numpy as np

from autotune.engines.base import Engine
from autotune.errors import UsageError
from autotune.measure.paired import MIN_EFFECT, Speedup, paired_speedup
from autotune.measure.prompts import PromptMix
from autotune.measure.sequential import ALPHA, Decision, judge
from autotune.measure.stats import ci95
from autotune.race.entrants import Entrant, baseline_of, candidates, entrant_units, speedup_of
from autotune.race.rounds import RaceStatus, Rounds
from autotune.spec.command import ServerCommand
from autotune.study.records import BASELINE_ROLE, CONTROL_ROLE, SPEC_DEFAULT_ROLE
from autotune.study.verdict import (
    BUDGET_SPENT, MACHINE_MOVED, NONE_CAN_WIN, WINNER, Confirmation, ConfirmedConfig,
)

SERVING_FIGURES = ("mix_tok_s", "aggregate_tok_s", "per_stream_tok_s", "per_stream_p10_tok_s")
DEFAULT_BUDGET = "4"
#: the one-sided level of each side of the control's test (the plain command against itself)
CONTROL_ALPHA = 0.005
#: how far above the counts' ceiling a lower bound may lie before it is called an artefact (step costs
#: are measured with noise; a verify step is never cheaper than a plain one by more than this)
CEILING_SLACK = 0.05
#: what the race says of the pairing it chose
PAIRING_NOTES = {
    "prompt": "race: every entrant's llama-server stays loaded; each prompt runs on all of them back to back, "
              "so each pair is measured seconds apart, and the race looks after every prompt",
    "round": "race: one configuration at a time, each running the whole mix; a round is the unit of pairing",
}


@dataclass(frozen=True)
class RaceBudget:
    """The most a race may spend: rounds (`6`), or minutes / seconds (`5m`, `300s`)."""

    rounds: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, text: str) -> "RaceBudget":
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(m|min|s)?\s*", str(text))
        if not match or float(match.group(1)) <= 0:
            raise UsageError(f"--race-budget {text}: give rounds (6) or a time (5m, 300s)")
        value, unit = float(match.group(1)), match.group(2)
        if unit is None:
            if not value.is_integer() or value < 1:
                raise UsageError(f"--race-budget {text}: a number of rounds is a whole number, at least 1")
            return cls(rounds=int(value))
        return cls(seconds=value * 60 if unit in ("m", "min") else value)

    def spent(self, rounds: int, elapsed_s: float) -> bool:
        """Whether `rounds` complete rounds or `elapsed_s` seconds use the budget up."""
        if self.rounds is not None:
            return rounds >= self.rounds
        return elapsed_s >= self.seconds

    def left_s(self, rounds: int, elapsed_s: float) -> float:
        """Seconds the budget has left, at the pace so far (a budget of rounds: the rounds left at it)."""
        if self.seconds is not None:
            return max(0.0, self.seconds - elapsed_s)
        pace = elapsed_s / rounds if rounds else math.nan
        return max(0.0, (self.rounds - rounds) * pace) if rounds else math.nan

    def describe(self) -> str:
        return f"{self.rounds} rounds" if self.rounds is not None else f"{self.seconds / 60:g} min"


OnMeasured = Callable[[int, "Entrant", "Speedup | None"], None]
OnLook = Callable[[RaceStatus], None]


def race(engine: Engine, entrants: list[Entrant], mix: PromptMix, *, max_tokens: int, budget: RaceBudget,
         command: ServerCommand, figure: str = "mix_tok_s", seed: int = 0,
         on_measured: OnMeasured = lambda round_, entrant, speedup: None,
         on_dropped: Callable[[Entrant], None] = lambda entrant: None,
         on_start: Callable[[str], None] = lambda pairing: None,
         on_look: OnLook = lambda status: None) -> Confirmation:
    """Run the race (see the module docstring); a control is added for each baseline. `on_measured` hears
    each entrant after each round with its speedup so far (None for a baseline), `on_dropped` each
    entrant that leaves, `on_start` the pairing chosen ("prompt" or "round"), `on_look` where the race
    stands after each look."""
    entrants = entrants + [Entrant(CONTROL_ROLE, None, e.config) for e in entrants if e.is_baseline]
    rounds = Rounds(engine, entrants, mix, max_tokens, command, figure, on_dropped, seed=seed)
    on_start(rounds.pairing)
    ended, winners, levels, decided_round = BUDGET_SPENT, set(), {}, None
    started = time.monotonic()
    with closing(rounds.looks()) as looks:
        for _ in looks:
            moved = _machine_moved(rounds.entrants, figure, rounds.pairing)
            if moved is not None:
                ended = MACHINE_MOVED
                break
            for entrant in rounds.entrants:
                artefact = _artefact(entrant, rounds.entrants, figure, rounds.pairing)
                if artefact is not None:
                    rounds.drop(entrant, artefact, failed=True)
            decision = _look(rounds.entrants, figure, rounds.pairing)
            levels = decision.levels or levels
            for entrant in rounds.entrants:
                if id(entrant) in decision.dropped:
                    rounds.drop(entrant, decision.dropped[id(entrant)])
            elapsed = time.monotonic() - started
            on_look(rounds.status(budget.left_s(rounds.complete, elapsed)))
            if rounds.between_rounds:
                _report(rounds.entrants, rounds.current, figure, rounds.pairing, on_measured)
            if decision.decided:
                ended, winners, decided_round = WINNER, decision.significant, rounds.current
                break
            if not candidates(rounds.entrants):
                ended = NONE_CAN_WIN
                break
            if budget.spent(rounds.complete, elapsed) and (rounds.between_rounds or budget.seconds is not None):
                break
    for entrant in rounds.entrants:
        if entrant.in_race and (inactive := rounds.inactive(entrant)) is not None:
            rounds.drop(entrant, inactive, failed=True)
    after_decision = None
    if ended == WINNER:
        winner = max((e for e in rounds.entrants if id(e) in winners),
                     key=lambda e: speedup_of(e, rounds.entrants, figure, rounds.pairing).ratio)
        after_decision = rounds.confirm(winner)
        moved = _machine_moved(rounds.entrants, figure, rounds.pairing)
        if moved is not None:
            ended, winners = MACHINE_MOVED, set()
        elif not winner.in_race:  # its checks failed on the confirming round
            ended, winners = NONE_CAN_WIN, set()
        else:
            winners = {id(winner)}
    return _confirmation(engine, rounds, mix, command, figure, ended, winners, levels, decided_round, after_decision,
                         moved)


def measure_rounds(engine: Engine, entrants: list[Entrant], mix: PromptMix, *, max_tokens: int, rounds: int,
                   command: ServerCommand, on_measured: OnMeasured = lambda round_, entrant, speedup: None,
                   on_dropped: Callable[[Entrant], None] = lambda entrant: None, by_prompt: bool = True,
                   seed: int = 0) -> str:
    """`rounds` rounds of the race's interleaving (each round's prompt order shuffled from `seed`), with its
    checks but without its verdict: what the prediction's check and the verdict benchmark measure.
    `by_prompt` False measures whole mixes in turn even where the servers would fit together (to compare
    the two pairings). Returns the pairing."""
    measured = Rounds(engine, entrants, mix, max_tokens, command, "mix_tok_s", on_dropped, by_prompt=by_prompt,
                      seed=seed)
    with closing(measured.looks(per_prompt=False)) as looks:
        for _ in looks:
            _report(measured.entrants, measured.current, "mix_tok_s", measured.pairing, on_measured)
            if measured.complete >= rounds:
                break
    return measured.pairing


def _report(entrants: list[Entrant], round_: int, figure: str, pairing: str, on_measured: OnMeasured) -> None:
    """Each entrant that ran round `round_` to its end, with its speedup so far (None: a baseline)."""
    for entrant in entrants:
        if len(entrant.rounds) > round_ and (entrant.in_race or (entrant.dropped_after or 0) > round_):
            on_measured(round_, entrant, None if entrant.is_baseline else speedup_of(entrant, entrants, figure, pairing))


def status_line(status: RaceStatus, levels_alpha: float = ALPHA) -> str:
    """`race round 2, prompt 5/11, ~3 min left: ngram-mod …: 1.12x [1.03-1.22]; …`: the live line."""
    left = "" if math.isnan(status.left_s) else f", ~{status.left_s / 60:.0f} min left"
    parts = []
    for label, speedup in status.standings:
        low, high = speedup.interval(levels_alpha)
        bounds = f" [{low:.2f}-{high:.2f}]" if math.isfinite(high) and high > 0 else ""
        parts.append(f"{label}: {speedup.ratio:.2f}x{bounds}")
    return f"race round {status.round_ + 1}, prompt {status.prompts_done}/{status.prompts}{left}: " + "; ".join(parts)


def round_line(round_: int, entrant: Entrant, speedup: Speedup | None) -> str:
    """`race round 2: ngram-mod …: 71.3 tok/s, 1.18x [1.09-1.27]`: what a race says of an entrant after a
    round (its speedup so far over its baseline, paired; bounds each side at the race's 5 %)."""
    head = f"race round {round_ + 1}: {entrant.label}: "
    if entrant.failure is not None or len(entrant.rounds) <= round_:
        return head + f"FAILED ({entrant.failure or entrant.dropped})"
    line = head + f"{entrant.rounds[round_].mix_tok_s:.1f} tok/s"
    if speedup is not None and speedup.ratio > 0:
        low, high = speedup.interval(ALPHA)
        line += f", {speedup.ratio:.2f}x" + (f" [{low:.2f}-{high:.2f}]" if math.isfinite(high) else "")
    return line


def _look(entrants: list[Entrant], figure: str, pairing: str) -> Decision:
    """The sequential rule's look; entrants are keyed by id()."""
    contenders = candidates(entrants)
    vs_baseline = {id(e): speedup_of(e, entrants, figure, pairing) for e in contenders}
    if not vs_baseline:
        return Decision()
    leader = max(contenders, key=lambda e: vs_baseline[id(e)].ratio)
    vs_leader = {id(e): paired_speedup(entrant_units(leader, figure), entrant_units(e, figure),
                                       pair_by_unit=pairing == "prompt")
                 for e in contenders if e is not leader}
    family = sum(1 for e in entrants if e.role in ("trial", SPEC_DEFAULT_ROLE) and e.failure is None)  # dropped too
    return judge(vs_baseline, vs_leader, family=family)


def _machine_moved(entrants: list[Entrant], figure: str, pairing: str) -> str | None:
    """Why the race cannot be believed, where a control's bounds exclude 1: the plain command ran at two
    speeds in the same race (None: the controls agree with their baselines)."""
    for control in (e for e in entrants if e.role == CONTROL_ROLE and e.rounds and e.failure is None):
        speedup = speedup_of(control, entrants, figure, pairing)
        low, high = speedup.interval(CONTROL_ALPHA)
        if low > 1.0 or high < 1.0:
            return (f"the machine's speed moved during the race: the plain command against itself measured "
                    f"{speedup.ratio:.3f}x [{low:.3f}-{high:.3f}], which rules out 1.00x")
    return None


def _artefact(entrant: Entrant, entrants: list[Entrant], figure: str, pairing: str) -> str | None:
    """Why `entrant`'s speedup is a timing artefact (None: its server's own counts allow it): see the module
    docstring. Only where it runs the baseline's runtime settings: other threads or batch sizes change
    the cost of a step itself."""
    if (entrant.role in (BASELINE_ROLE, CONTROL_ROLE) or not entrant.in_race or figure != "mix_tok_s"
            or entrant.config.runtime != baseline_of(entrant, entrants).config.runtime):
        return None
    speedup = speedup_of(entrant, entrants, figure, pairing)
    low = speedup.lower_bound(ALPHA)
    ceiling = _ceiling(entrant, baseline_of(entrant, entrants))
    if ceiling is None or low <= ceiling * (1 + CEILING_SLACK):
        return None
    return (f"a timing artefact: at least {low:.2f}x measured, while its server's own counts (accepted drafts per "
            f"target step) allow at most {ceiling:.2f}x")


def _ceiling(entrant: Entrant, baseline: Entrant) -> float | None:
    """The fastest `entrant` can be over `baseline` on the prompts both ran, given its accepted drafts."""
    spent = saved = 0.0
    for own, base in zip(entrant.rounds, baseline.rounds):
        for result, reference in zip(own.results, base.results):
            if result.n_generated <= 1:
                continue
            steps = max(result.n_generated - result.n_accepted, 1)
            spent += reference.decode_ms * steps / result.n_generated
            saved += reference.decode_ms
    return saved / spent if spent > 0 else None


def _confirmation(engine: Engine, rounds: Rounds, mix: PromptMix, command: ServerCommand, figure: str,
                  ended: str, winners: set, levels: dict, decided_round: int | None,
                  after_decision: int | None, moved: str | None) -> Confirmation:
    entrants, pairing = rounds.entrants, rounds.pairing
    family = max(1, sum(1 for e in entrants if e.role in ("trial", SPEC_DEFAULT_ROLE)))

    def row(entrant: Entrant) -> ConfirmedConfig:
        measured_rounds = [m for m in entrant.rounds if m.results]
        samples = [round(getattr(m, figure), 3) for m in measured_rounds]
        measured = bool(measured_rounds) and entrant.failure is None
        speedup = None if entrant.is_baseline or not measured else speedup_of(entrant, entrants, figure, pairing)
        level = CONTROL_ALPHA if entrant.role == CONTROL_ROLE else levels.get(id(entrant), ALPHA / family)
        printed = at_decision = speedup
        if speedup is not None and id(entrant) in winners and after_decision is not None:
            printed = speedup_of(entrant, entrants, figure, pairing, slice(after_decision, after_decision + 1))
            at_decision = speedup_of(entrant, entrants, figure, pairing, slice(0, after_decision))
        units = entrant_units(entrant, figure)
        mean = float(np.mean(samples)) if samples else 0.0
        return ConfirmedConfig(
            label=entrant.label, role=entrant.role, trial=entrant.trial, target=str(entrant.config.target),
            argv=command.argv(entrant.config), samples=samples, mean_tok_s=round(mean, 3),
            ci95=(ci95(samples) or (mean, mean)) if samples else (0.0, 0.0),
            p_value=None if speedup is None else round(speedup.p_faster(1 + MIN_EFFECT), 6),
            speedup=None if printed is None or printed.ratio <= 0 else round(printed.ratio, 4),
            failure=entrant.failure, dropped=entrant.dropped if measured else None,
            figures={name: [round(getattr(m, name), 3) for m in measured_rounds] for name in SERVING_FIGURES},
            concurrency=command.parallel,
            speedup_ci=None if speedup is None else _rounded(speedup.interval(level)),
            speedup_ci_level=round(1 - level, 6),
            speedup_at_decision=None if printed is speedup or speedup is None else round(at_decision.ratio, 4),
            significant=id(entrant) in winners, rounds=len(entrant.rounds),
            prompts=len(mix), decode_ms=[list(r) for r in units.decode_ms], tokens=[list(r) for r in units.tokens],
            family=entrant.family, ceiling=None if entrant.is_baseline else _rounded_or_none(
                _ceiling(entrant, baseline_of(entrant, entrants))),
        )

    return Confirmation(
        engine=engine.name, build=engine.build_info, repeats=len(rounds.orders),
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        baselines=[row(e) for e in entrants if e.is_baseline],
        configs=[row(e) for e in entrants if e.role in ("trial", "preset")],
        spec_defaults=[row(e) for e in entrants if e.role == SPEC_DEFAULT_ROLE],
        controls=[row(e) for e in entrants if e.role == CONTROL_ROLE],
        prompt_ids=[p.id for p in mix], categories=[p.category for p in mix], pairing=pairing, ended=ended,
        orders=[list(o) for o in rounds.orders], decided_round=decided_round, after_decision_round=after_decision,
        looks=sum(len(m.results) for m in entrants[0].rounds) if pairing == "prompt" else len(rounds.orders),
        machine_moved=moved,
    )


def _rounded(interval: tuple[float, float]) -> tuple[float, float]:
    return tuple(round(v, 4) if math.isfinite(v) else v for v in interval)


def _rounded_or_none(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
