"""The race: a few configurations with the references, measured prompt after prompt on the arbiter until
the answer is known or the budget is spent. Every verdict autotune prints comes from here: the
predicted search's, `confirm`'s (the measured strategy, `autotune confirm`, `nightly`).

Where the engine can keep every entrant loaded at once (llama-server, memory allowing:
autotune.engines.live) a round starts every entrant's server afresh and goes prompt by prompt, in an
order shuffled per round (the prompts seen so far are a random part of the mix, not its first
category), each prompt's entrants back to back in an order rotated per prompt, so a pair is measured
seconds apart and the machine's drift cancels inside it. The race looks after every prompt and asks
the decision (autotune.measure.sequential.decide, a pure function of the times measured so far, the
same one the simulations in tests/race run): a per-prompt sequence that knows a clear winner within a
round, a stratified test over complete rounds that proves a real 1.10x whatever its spread of prompts,
Holm over the entrants, and best-arm stopping (a winner is named once no rival can be 2 % faster).
Where even one target's entrants do not fit, each entrant in turn runs a block of the mix on a server of
its own, the block the unit of pairing (autotune.race.rounds); elsewhere (the in-process engine) each
entrant runs the whole mix in turn. Either way the order is rotated per round, the race looks after
each round, and a budget of rounds counts passes over the mix.

What keeps a verdict honest beyond the statistics (autotune.race.guards, autotune.race.looks):
- a control: the plain command a second time, a server of its own, raced like an entrant. It gives the
  instances' noise the stratified test assumes; a round where it lies more than 4 sd from 1.00x is
  void, set aside and played again (at most MAX_VOID times), and said in the verdict; where its bounds
  over the race exclude 1 the machine's speed moved under the race: it ends there and names no winner;
- the server's own counts: a speedup whose lower bound is above what the entrant's accepted drafts
  allow is a timing artefact, and its entrant fails with that reason, at every look and on the round
  after the decision; unless the control shows the plain command itself faster than its baseline beyond
  that slack (autotune.race.guards.baseline_slowed): then the baseline's server ran slow, and the race
  ends there, the machine's speed moved;
- the printed figure is what decided, and the peak where the race stopped is not all it says: a
  winner, its baseline and the control run one more round on fresh servers after the decision, printed
  apart as a replication, and stored as the winner's speedup (autotune.race.record);
- a measurement that drafted nothing over a round, or whose output is not the baseline's, fails its
  entrant (autotune.race.checks). The references are never dropped: every speedup is over the baseline
  of the same rounds, and `--spec-default` races like any entrant.
"""

from __future__ import annotations

import math
import re
import signal
import time
from contextlib import closing
from dataclasses import dataclass
from typing import Callable, Sequence

from autotune.engines.base import Engine
from autotune.errors import UsageError
from autotune.interrupts import Interrupted
from autotune.measure.paired import MIN_EFFECT, Speedup
from autotune.measure.prompts import PromptMix
from autotune.measure.sequential import ALPHA, SLOWER, STAYS
from autotune.measure.stratified import MAX_VOID
from autotune.race.entrants import Entrant, candidates, speedup_of
from autotune.race.guards import artefact, baseline_slowed, machine_moved
from autotune.race.looks import RaceLook, look_at, round_is_void
from autotune.race.record import Outcome, verdict_of
from autotune.race.rounds import TARGET_BLOCK, RaceStatus, Rounds
from autotune.spec.command import ServerCommand
from autotune.study.records import CONTROL_ROLE
from autotune.study.verdict import (
    BUDGET_SPENT,
    MACHINE_MOVED,
    NONE_CAN_WIN,
    RACE_BUDGET_CAP,
    STOPPED,
    WINNER,
    RaceVerdict,
    coverage,
)

DEFAULT_BUDGET = "4"
#: what the race says of the pairing it chose
PAIRING_NOTES = {
    "prompt": "race: every entrant's llama-server stays loaded; each prompt runs on all of them back to back, "
    "so each pair is measured seconds apart, and the race looks after every prompt",
    "block": "race: the servers do not fit in memory together, so each entrant in turn runs a block of a quarter of "
    "the mix on a server of its own; a block is the unit of pairing, and a round of the budget a pass",
    "round": "race: one configuration at a time, each running the whole mix; a round is the unit of pairing",
}


@dataclass(frozen=True)
class RaceBudget:
    """The most a race may spend: rounds (`6`), or minutes / seconds (`5m`, `300s`). `cap` is what set it
    (autotune.study.verdict.BUDGET_CAPS): the race's own `--race-budget`, `confirm --repeats`, or what the
    search's budget (the user's, or the space's default) leaves the race."""

    rounds: int | None = None
    seconds: float | None = None
    cap: str = RACE_BUDGET_CAP

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
        return f"{self.rounds} rounds" if self.rounds is not None else f"{self.seconds / 60:.3g} min"


def start_line(rounds: Rounds, memory_note: str | None) -> str:
    """What the race says as it starts: the pairing it chose (the targets alternating, where they do), and, where
    free memory was not known, that note instead of a guess."""
    if memory_note:
        return memory_note
    if rounds.alternating:
        return (
            f"race: the targets' servers do not fit in memory together, so each target's load in turn, the targets "
            f"alternating every {TARGET_BLOCK} prompts; each prompt runs on a target's servers back to back, and the "
            "race looks after every prompt and stops for its budget only where every target ran the same prompts"
        )
    return PAIRING_NOTES[rounds.pairing]


OnMeasured = Callable[[int, "Entrant", "Speedup | None"], None]
OnLook = Callable[[RaceStatus], None]


def race(
    engine: Engine,
    entrants: list[Entrant],
    mix: PromptMix,
    *,
    max_tokens: int,
    budget: RaceBudget,
    command: ServerCommand,
    figure: str = "mix_tok_s",
    seed: int = 0,
    replicate_on: Sequence[int] | None = None,
    on_measured: OnMeasured = lambda round_, entrant, speedup: None,
    on_dropped: Callable[[Entrant], None] = lambda entrant: None,
    on_start: Callable[[str], None] = lambda line: None,
    on_look: OnLook = lambda status: None,
) -> RaceVerdict:
    """Run the race (see the module docstring); a control is added for each baseline. `on_measured` hears
    each entrant after each round with its speedup so far (None for a baseline), `on_dropped` each
    entrant that leaves, `on_start` the line that says the pairing chosen (start_line), `on_look` where the race
    stands after each look. `replicate_on`: the mix's prompts the round after the decision runs (None: all of
    them; a budget may ask for one a category)."""
    entrants = entrants + [Entrant(CONTROL_ROLE, None, e.config) for e in entrants if e.is_baseline]
    rounds = Rounds(engine, entrants, mix, max_tokens, command, figure, on_dropped, seed=seed)
    outcome = Outcome(BUDGET_SPENT, {}, budget_cap=budget.cap)
    try:
        on_start(start_line(rounds, engine.memory_note))
        _run(rounds, mix, figure, budget, outcome, on_measured, on_look)
        for entrant in rounds.entrants:
            if entrant.in_race and (inactive := rounds.inactive(entrant)) is not None:
                rounds.drop(entrant, inactive, failed=True)
        if outcome.winner is not None and not outcome.winner.in_race:
            outcome.ended, outcome.winner = NONE_CAN_WIN, None
        if outcome.winner is not None:
            _replicate(rounds, mix, figure, outcome, replicate_on)
    except KeyboardInterrupt as stop:  # the replication included: a winner not yet replicated is no verdict
        outcome.ended, outcome.winner, outcome.within_reach = STOPPED, None, ()
        raise RaceStopped(verdict_of(engine, rounds, mix, command, figure, outcome), stop) from stop
    return verdict_of(engine, rounds, mix, command, figure, outcome)


class RaceStopped(Interrupted):
    """A stop signal arrived once the race had begun: `confirmation` is where it stood, undecided (STOPPED).
    It is the stop itself to every other handler: the command still exits with 128 + the signal's number."""

    def __init__(self, confirmation: RaceVerdict, stop: KeyboardInterrupt):
        super().__init__(getattr(stop, "signum", signal.SIGINT))
        self.confirmation = confirmation


def _run(
    rounds: Rounds,
    mix: PromptMix,
    figure: str,
    budget: RaceBudget,
    outcome: Outcome,
    on_measured: OnMeasured,
    on_look: OnLook,
) -> None:
    """The race's looks until it is decided, no entrant can win, or the budget is spent (`outcome` says which)."""
    last = None
    started = time.monotonic()
    with closing(rounds.looks()) as looks:
        for _ in looks:
            if _void(rounds, mix, figure, outcome):
                if len(outcome.voided) > MAX_VOID:
                    outcome.ended, outcome.moved = MACHINE_MOVED, "the control moved in every replayed round"
                    break
                continue
            outcome.moved = machine_moved(rounds.entrants, figure, rounds.pairing)
            if outcome.moved is not None:
                outcome.ended = MACHINE_MOVED
                break
            artefacts = [
                (e, reason)
                for e in rounds.entrants
                if (reason := artefact(e, rounds.entrants, figure, rounds.pairing)) is not None
            ]
            if artefacts and (moved := baseline_slowed(rounds.entrants, figure, rounds.pairing)) is not None:
                outcome.ended, outcome.moved = MACHINE_MOVED, moved  # the baseline's doing, not the entrants'
                break
            for entrant, reason in artefacts:
                rounds.drop(entrant, reason, failed=True)
            last = look_at(rounds.entrants, mix, figure, rounds.pairing)
            if last is not None:
                _apply(last, rounds, outcome)
            elapsed = time.monotonic() - started
            on_look(rounds.status(budget.left_s(rounds.passes, elapsed)))
            if rounds.between_rounds:
                _report(rounds.entrants, rounds.current, figure, rounds.pairing, on_measured)
            if outcome.winner is not None:
                outcome.ended, outcome.decided_round = WINNER, rounds.current
                break
            if not candidates(rounds.entrants):
                outcome.ended = NONE_CAN_WIN
                break
            valid = rounds.passes - len(outcome.voided)
            if budget.spent(valid, elapsed) and (rounds.between_rounds or (budget.seconds is not None and rounds.even)):
                _leader_at_the_end(last, outcome, rounds.current)
                break


def _void(rounds: Rounds, mix: PromptMix, figure: str, outcome: Outcome) -> bool:
    """Whether the round under way is void (its control moved: autotune.race.looks.round_is_void); at its
    end its measurements are set aside, said in the verdict, and another round is played."""
    if rounds.pairing != "prompt":
        return False
    reason = round_is_void(rounds.entrants, mix, figure, rounds.current)
    if reason is not None and rounds.between_rounds:
        rounds.void(rounds.current)
        outcome.voided += (reason,)
    return reason is not None


def _apply(look: RaceLook, rounds: Rounds, outcome: Outcome) -> None:
    """A look's decision on the race: each candidate's level and test, the drops, the winner."""
    decision = look.decision
    for index, entrant in enumerate(look.contenders):
        outcome.judged[id(entrant)] = (look.level(entrant), look.by(entrant))
        if decision.dropped[0, index] != STAYS:
            rounds.drop(entrant, _why_dropped(look, index))
    if decision.winner[0] >= 0:
        outcome.winner = look.contenders[int(decision.winner[0])]


def _why_dropped(look: RaceLook, index: int) -> str:
    if look.decision.dropped[0, index] == SLOWER:
        return "significantly slower than the leader"
    ratio = float(look.look.evidence(look.look.reference).ratio[0, index])
    return f"cannot reach the minimum effect ({ratio:.2f}x, its upper bound below {1 + MIN_EFFECT:.2f}x)"


def _leader_at_the_end(look: RaceLook | None, outcome: Outcome, round_: int) -> None:
    """The budget is spent: the proven leader, if any, is the pick, and the rivals still within reach are
    named."""
    if look is None or look.decision.leader[0] < 0:
        return
    leader = int(look.decision.leader[0])
    if not look.decision.proven[0, leader]:
        return
    outcome.winner, outcome.decided_round = look.contenders[leader], round_
    outcome.within_reach = tuple(
        e.label for i, e in enumerate(look.contenders) if look.decision.within_reach[0, i] and e.in_race
    )


def _replicate(rounds: Rounds, mix: PromptMix, figure: str, outcome: Outcome, prompts: Sequence[int] | None) -> None:
    """The winner, its baseline and its control run one more round on fresh servers, over `prompts` of the mix
    (None: all of it), again where its control moved, within MAX_VOID; the guards are asked of it; a winner
    that fails them is no winner."""
    winner = outcome.winner
    while True:
        outcome.after_decision = rounds.confirm(winner, prompts)
        if not _void(rounds, mix, figure, outcome) or len(outcome.voided) > MAX_VOID:
            break
    after = slice(outcome.after_decision, outcome.after_decision + 1)
    for reason in (
        artefact(winner, rounds.entrants, figure, rounds.pairing),
        artefact(winner, rounds.entrants, figure, rounds.pairing, after),
    ):
        if reason is not None:
            rounds.drop(winner, reason, failed=True)
    outcome.moved = machine_moved(rounds.entrants, figure, rounds.pairing)
    if outcome.moved is not None or len(outcome.voided) > MAX_VOID:
        outcome.ended, outcome.winner = MACHINE_MOVED, None
        outcome.moved = outcome.moved or "the control moved in every replayed round"
    elif not winner.in_race:  # its checks failed on the confirming round
        outcome.ended, outcome.winner = NONE_CAN_WIN, None


def measure_rounds(
    engine: Engine,
    entrants: list[Entrant],
    mix: PromptMix,
    *,
    max_tokens: int,
    rounds: int,
    command: ServerCommand,
    on_measured: OnMeasured = lambda round_, entrant, speedup: None,
    on_dropped: Callable[[Entrant], None] = lambda entrant: None,
    by_prompt: bool = True,
    seed: int = 0,
) -> str:
    """`rounds` rounds of the race's interleaving (each round's prompt order shuffled from `seed`), with its
    checks but without its verdict: what the prediction's check and the verdict benchmark measure.
    `by_prompt` False measures whole mixes in turn even where the servers would fit together (to compare
    the two pairings). Returns the pairing."""
    measured = Rounds(
        engine, entrants, mix, max_tokens, command, "mix_tok_s", on_dropped, by_prompt=by_prompt, seed=seed
    )
    with closing(measured.looks(per_prompt=False)) as looks:
        for _ in looks:
            _report(measured.entrants, measured.current, "mix_tok_s", measured.pairing, on_measured)
            if measured.passes >= rounds:
                break
    return measured.pairing


def _report(entrants: list[Entrant], round_: int, figure: str, pairing: str, on_measured: OnMeasured) -> None:
    """Each entrant that ran round `round_` to its end, with its speedup so far (None: a baseline)."""
    for entrant in entrants:
        if len(entrant.rounds) > round_ and (entrant.in_race or (entrant.dropped_after or 0) > round_):
            on_measured(
                round_, entrant, None if entrant.is_baseline else speedup_of(entrant, entrants, figure, pairing)
            )


def status_line(status: RaceStatus, levels_alpha: float = ALPHA) -> str:
    """`race round 2, prompt 5/11, ~3 min left, 90% CI: ngram-mod …: 1.12x [1.03-1.22]; …`: the live line.
    Its intervals are the plain paired bounds at `levels_alpha` each side (valid at every look), one level
    for the line; the decision's own tests and levels are in the verdict."""
    left = "" if math.isnan(status.left_s) else f", ~{status.left_s / 60:.0f} min left"
    parts = []
    for label, speedup in status.standings:
        low, high = speedup.interval(levels_alpha)
        bounds = f" [{low:.2f}-{high:.2f}]" if math.isfinite(high) and high > 0 else ""
        parts.append(f"{label}: {speedup.ratio:.2f}x{bounds}")
    return (
        f"race round {status.round_ + 1}, prompt {status.prompts_done}/{status.prompts}{left}, "
        f"{coverage(levels_alpha)}: " + "; ".join(parts)
    )


def standing_line(confirmation: RaceVerdict, run: str) -> str:
    """What a stopped race says before the command exits: where it stood, undecided, and where it is kept."""
    leader = confirmation.fastest
    standing = (
        "no entrant ahead of the plain command"
        if leader is None or not leader.speedup_ci
        else (
            f"the leader {leader.label} at {leader.speedup:.2f}x [{leader.ci_label} {leader.speedup_ci[0]:.2f}-"
            f"{leader.speedup_ci[1]:.2f}]"
        )
    )
    return (
        f"stopped in race round {confirmation.repeats}, undecided: {standing}; kept as {run}, "
        "where `autotune best` shows it while no finished race of this model is newer"
    )


def round_line(round_: int, entrant: Entrant, speedup: Speedup | None) -> str:
    """`race round 2: ngram-mod …: 71.3 tok/s, 1.18x [90% CI 1.09-1.27]`: what a race says of an entrant
    after a round (its speedup so far over its baseline, paired; bounds each side at the race's 5 %)."""
    head = f"race round {round_ + 1}: {entrant.label}: "
    if entrant.failure is not None or len(entrant.rounds) <= round_:
        return head + f"FAILED ({entrant.failure or entrant.dropped})"
    line = head + f"{entrant.rounds[round_].mix_tok_s:.1f} tok/s"
    if speedup is not None and speedup.ratio > 0:
        low, high = speedup.interval(ALPHA)
        line += f", {speedup.ratio:.2f}x" + (
            f" [{coverage(ALPHA)} {low:.2f}-{high:.2f}]" if math.isfinite(high) else ""
        )
    return line
