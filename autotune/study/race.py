"""The race: a few configurations with the references, measured round after round on the arbiter until
the answer is known or the budget is spent. Every verdict autotune prints comes from here: the
predicted search's, `confirm`'s (the measured strategy, `autotune confirm`, `nightly`).

A round measures every entrant still in on every prompt of the mix. Where the engine can keep every
entrant loaded at once (llama-server, memory allowing: autotune.engines.live) a round starts every
entrant's server afresh and goes prompt by prompt, each prompt's entrants back to back in an order
rotated per prompt and round, so a pair is measured seconds apart and the machine's drift cancels
inside it; elsewhere each entrant runs the whole
mix in turn, the order rotated per round, and a round is the unit of pairing (autotune.measure.paired).
After each round every entrant is compared with its target's baseline and with the leader, and the
sequential rule (autotune.measure.sequential) names a winner, drops entrants or goes on. A measurement
that drafted nothing, or whose output is not the baseline's, drops its entrant at once
(autotune.study.checks). The references are never dropped: every speedup is over the baseline of the
same rounds, and `--spec-default` races like any entrant.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import numpy as np

from autotune.engines.base import Engine
from autotune.errors import TrialFailure, UsageError
from autotune.measure.device_lock import device_lock
from autotune.measure.measurement import GenerationResult, Measurement
from autotune.measure.paired import MIN_EFFECT, Speedup, Units, paired_speedup
from autotune.measure.prompts import PromptMix
from autotune.measure.sequential import Decision, judge
from autotune.measure.stats import ci95
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.default import SPEC_DEFAULT_FLAG
from autotune.study.checks import MeasurementCheck
from autotune.study.records import BASELINE_ROLE, SPEC_DEFAULT_ROLE
from autotune.study.verdict import BUDGET_SPENT, NONE_CAN_WIN, WINNER, Confirmation, ConfirmedConfig

#: the figures a race can compare, and what one unit of each is (see `units_of`)
FIGURES = ("mix_tok_s", "e2e_tok_s", "aggregate_tok_s")
SERVING_FIGURES = ("mix_tok_s", "aggregate_tok_s", "per_stream_tok_s", "per_stream_p10_tok_s")
DEFAULT_BUDGET = "4"
#: what the race says of the pairing it chose
PAIRING_NOTES = {
    "prompt": "race: every entrant's llama-server stays loaded; each prompt runs on all of them back to back, "
              "so each pair is measured seconds apart",
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

    def planned_rounds(self, first_round_s: float) -> int:
        """The looks the error rate is spent over: the rounds, or as many as the time holds at the first
        round's pace (fixed after the first round: a plan that moved would spend the rate twice)."""
        if self.rounds is not None:
            return self.rounds
        return max(1, int(self.seconds // max(first_round_s, 1e-3)))

    def describe(self) -> str:
        return f"{self.rounds} rounds" if self.rounds is not None else f"{self.seconds / 60:g} min"


@dataclass
class Entrant:
    """One configuration in the race and what it measured so far."""

    role: str  # "baseline", "spec-default", "trial" or "preset"
    trial: int | None  # the study trial it came from
    config: SpecConfig
    family: str | None = None
    rounds: list[Measurement] = field(default_factory=list)
    dropped: str | None = None  # why it left the race
    dropped_after: int | None = None  # the round it left after
    failure: str | None = None  # it could not be measured at all

    @property
    def is_baseline(self) -> bool:
        return self.role == BASELINE_ROLE

    @property
    def label(self) -> str:
        if self.role == SPEC_DEFAULT_ROLE:
            return f"{SPEC_DEFAULT_FLAG} ({self.config.describe()})"
        return f"the preset in use ({self.config.describe()})" if self.role == "preset" else self.config.describe()

    @property
    def in_race(self) -> bool:
        return self.dropped is None

    def units(self, figure: str) -> Units:
        return Units.of(*zip(*(units_of(m, figure) for m in self.rounds))) if self.rounds else Units((), ())

    def prompt_decode_ms(self) -> list[float]:
        """Each prompt's decode ms, the mean over the rounds measured."""
        return np.mean(np.array([[r.decode_ms for r in m.results] for m in self.rounds]), axis=0).tolist()


def units_of(measurement: Measurement, figure: str) -> tuple[list[float], list[int]]:
    """One round of `figure` as units of (ms, tokens): per prompt for decode (decode ms, decode tokens) and
    end-to-end (prompt + decode ms, generated tokens); the whole busy period for aggregate tok/s."""
    results = [r for r in measurement.results if r.stream == 0]
    if figure == "mix_tok_s":
        return [r.decode_ms for r in results], [r.decode_tokens for r in results]
    if figure == "e2e_tok_s":
        return [r.prompt_ms + r.decode_ms for r in results], [r.n_generated for r in results]
    if figure == "aggregate_tok_s":
        wall = measurement.busy_ms if measurement.busy_ms is not None else measurement.generation_ms
        return [wall], [sum(r.n_generated for r in measurement.results)]
    raise ValueError(f"a race cannot compare {figure!r} (one of {', '.join(FIGURES)})")


OnMeasured = Callable[[int, "Entrant", "Speedup | None"], None]


def race(engine: Engine, entrants: list[Entrant], mix: PromptMix, *, max_tokens: int, budget: RaceBudget,
         command: ServerCommand, figure: str = "mix_tok_s",
         on_measured: OnMeasured = lambda round_, entrant, speedup: None,
         on_dropped: Callable[[Entrant], None] = lambda entrant: None,
         on_start: Callable[[str], None] = lambda pairing: None) -> Confirmation:
    """Run the race (see the module docstring). `on_measured` hears each entrant after each round with its
    speedup so far (None for a baseline), `on_dropped` each entrant that leaves, `on_start` the pairing
    chosen ("prompt" or "round")."""
    planned, ended, played, winners = 0, BUDGET_SPENT, 0, set()
    started = time.monotonic()
    rounds = _Rounds(engine, entrants, mix, max_tokens, command, figure, on_dropped)
    on_start(rounds.pairing)
    entrants = rounds.entrants
    while True:
        round_started = time.monotonic()
        played = rounds.play()
        if played == 1:
            planned = budget.planned_rounds(time.monotonic() - round_started)
        decision = _look(entrants, figure, rounds.pairing, played, planned)
        _report(entrants, played, figure, rounds.pairing, on_measured)
        for entrant in entrants:
            if id(entrant) in decision.dropped:
                rounds.drop(entrant, decision.dropped[id(entrant)])
        if decision.decided:
            ended, winners = WINNER, decision.significant
            break
        if not _candidates(entrants):
            ended = NONE_CAN_WIN
            break
        if played >= planned or (budget.seconds is not None and time.monotonic() - started >= budget.seconds):
            break
    return _confirmation(engine, entrants, mix, command, figure, rounds.pairing, played, planned, ended, winners)


def measure_rounds(engine: Engine, entrants: list[Entrant], mix: PromptMix, *, max_tokens: int, rounds: int,
                   command: ServerCommand, on_measured: OnMeasured = lambda round_, entrant, speedup: None,
                   on_dropped: Callable[[Entrant], None] = lambda entrant: None, by_prompt: bool = True) -> str:
    """`rounds` rounds of the race's interleaving, with its checks but without its verdict: what measures
    the references a prediction is calibrated on. `by_prompt` False measures whole mixes in turn even
    where the servers would fit together (to compare the two pairings). Returns the pairing."""
    measured = _Rounds(engine, entrants, mix, max_tokens, command, "mix_tok_s", on_dropped, by_prompt)
    for _ in range(rounds):
        _report(measured.entrants, measured.play(), "mix_tok_s", measured.pairing, on_measured)
    return measured.pairing


class _Rounds:
    """The rounds of a race: the pairing the engine allows and, after each round, the checks (a failure or
    a wrong output drops its entrant; the baseline may not go). Prompt by prompt, every entrant's server
    starts afresh each round: llama-server's n-gram drafters keep what they saw across requests, so a
    server kept for a second round would draft from the mix it has already generated, which no user's
    server does (and the prediction, one pass of the mix, does not model)."""

    def __init__(self, engine: Engine, entrants: list[Entrant], mix: PromptMix, max_tokens: int,
                 command: ServerCommand, figure: str, on_dropped: Callable[[Entrant], None], by_prompt: bool = True):
        self.engine, self.mix, self.max_tokens, self.on_dropped = engine, mix, max_tokens, on_dropped
        self.entrants = sorted(entrants, key=lambda e: not e.is_baseline)  # baselines first: the check keeps theirs
        self.check = MeasurementCheck.for_command(engine, mix, command)
        by_prompt = (by_prompt and figure == "mix_tok_s" and command.parallel == 1
                     and engine.holds_at_once([e.config for e in self.entrants]))
        self.pairing = "prompt" if by_prompt else "round"
        self.played = 0

    def play(self) -> int:
        """One more round; returns how many have been played."""
        if self.pairing == "prompt":
            failures = _prompt_by_prompt_round(self.engine, self.entrants, self.mix, self.max_tokens, self.played)
        else:
            failures = _whole_mix_round(self.engine, self.entrants, self.mix, self.max_tokens, self.played)
        self.played += 1
        for entrant in self.entrants:
            reason = failures.get(id(entrant))
            if reason is None and entrant.in_race:
                reason = self.check.failure(entrant.config, entrant.rounds[-1])
            if reason is not None:
                self.drop(entrant, reason, failed=True)
        failed = next((e for e in self.entrants if e.is_baseline and not e.in_race), None)
        if failed is not None:
            raise TrialFailure(f"the baseline could not be measured on the {self.engine.name} engine: {failed.dropped}")
        return self.played

    def drop(self, entrant: Entrant, reason: str, failed: bool = False) -> None:
        """`entrant` leaves after this round: `failed` where it could not be measured or its measurement
        does not count (it drafted nothing, its output is not the baseline's), else for the verdict."""
        if not entrant.in_race:
            return
        entrant.dropped, entrant.dropped_after = reason, self.played
        if failed or not entrant.rounds:
            entrant.failure = reason
        self.on_dropped(entrant)


def _report(entrants: list[Entrant], played: int, figure: str, pairing: str, on_measured: OnMeasured) -> None:
    """Each entrant measured in round `played` and still in, with its speedup so far (None: a baseline)."""
    for entrant in entrants:
        if len(entrant.rounds) == played and entrant.in_race:
            on_measured(played - 1, entrant, None if entrant.is_baseline else speedup_of(entrant, entrants, figure, pairing))


def round_line(round_: int, entrant: Entrant, speedup: Speedup | None) -> str:
    """`race round 2: ngram-mod …: 71.3 tok/s, 1.18x [95% CI 1.09-1.27]`: what a race says of an entrant
    after a round (its speedup so far over its baseline, paired)."""
    head = f"race round {round_ + 1}: {entrant.label}: "
    if entrant.failure is not None or not entrant.rounds:
        return head + f"FAILED ({entrant.failure or entrant.dropped})"
    line = head + f"{entrant.rounds[-1].mix_tok_s:.1f} tok/s"
    if speedup is not None and speedup.ratio > 0:
        low, high = speedup.interval()
        line += f", {speedup.ratio:.2f}x" + (f" [95% CI {low:.2f}-{high:.2f}]" if math.isfinite(high) else "")
    return line


def _candidates(entrants: list[Entrant]) -> list[Entrant]:
    """The entrants that could still win: in the race, the finalists and `--spec-default` (a baseline is
    what they race against; the preset in use is measured beside them, to compare a winner with)."""
    return [e for e in entrants if e.in_race and e.role in ("trial", SPEC_DEFAULT_ROLE) and e.rounds]


def _baseline(entrant: Entrant, entrants: list[Entrant]) -> Entrant:
    return next(e for e in entrants if e.is_baseline and e.config.target == entrant.config.target)


def speedup_of(entrant: Entrant, entrants: list[Entrant], figure: str, pairing: str) -> Speedup:
    """`entrant`'s paired speedup over its target's baseline among `entrants`, on the rounds both ran."""
    return paired_speedup(_baseline(entrant, entrants).units(figure), entrant.units(figure),
                          pair_by_unit=pairing == "prompt")


def _look(entrants: list[Entrant], figure: str, pairing: str, played: int, planned: int) -> Decision:
    """The sequential rule's look after round `played` of `planned`; entrants are keyed by id()."""
    candidates = _candidates(entrants)
    vs_baseline = {id(e): speedup_of(e, entrants, figure, pairing) for e in candidates}
    if not vs_baseline:
        return Decision(0.0)
    leader = max(candidates, key=lambda e: vs_baseline[id(e)].ratio)
    vs_leader = {id(e): paired_speedup(leader.units(figure), e.units(figure), pair_by_unit=pairing == "prompt")
                 for e in candidates if e is not leader}
    family = sum(1 for e in entrants if e.role in ("trial", SPEC_DEFAULT_ROLE) and e.failure is None)  # dropped too
    return judge(vs_baseline, vs_leader, look=played, planned=planned, family=family)


def _prompt_by_prompt_round(engine: Engine, entrants: list[Entrant], mix: PromptMix, max_tokens: int,
                            round_: int) -> dict[int, str]:
    """One round with every entrant's server started and warmed up together: per prompt, each entrant in
    an order rotated by prompt and round. Returns why an entrant could not be measured, by id()."""
    alive = [e for e in entrants if e.in_race]
    results: dict[int, list[GenerationResult]] = {id(e): [] for e in alive}
    failed: dict[int, str] = {}
    with engine.live([e.config for e in alive], mix, max_tokens=max_tokens) as servers:
        for prompt_index in range(len(mix)):
            shift = (round_ + prompt_index) % len(alive)
            order = list(range(shift, len(alive))) + list(range(shift))
            for index in order:
                entrant = alive[index]
                if id(entrant) in failed:
                    continue
                try:
                    with device_lock():
                        results[id(entrant)].append(servers.generate(index, prompt_index))
                except TrialFailure as exc:
                    failed[id(entrant)] = str(exc)
        errors = {id(e): servers.error_lines(index) for index, e in enumerate(alive)}
    for entrant in alive:
        if id(entrant) not in failed:
            entrant.rounds.append(Measurement(results[id(entrant)], log_errors=errors[id(entrant)]))
    return failed


def _whole_mix_round(engine: Engine, entrants: list[Entrant], mix: PromptMix, max_tokens: int,
                     round_: int) -> dict[int, str]:
    """One round with one configuration loaded at a time: each entrant runs the whole mix, the order
    rotated per round. Returns why an entrant could not be measured, by id()."""
    alive = [e for e in entrants if e.in_race]
    shift = round_ % len(alive)
    failed: dict[int, str] = {}
    for entrant in alive[shift:] + alive[:shift]:
        try:
            with device_lock():
                entrant.rounds.append(engine.measure(entrant.config, mix, max_tokens=max_tokens))
        except TrialFailure as exc:
            failed[id(entrant)] = str(exc)
    return failed


def _confirmation(engine: Engine, entrants: list[Entrant], mix: PromptMix, command: ServerCommand, figure: str,
                  pairing: str, played: int, planned: int, ended: str, winners: set) -> Confirmation:
    def row(entrant: Entrant) -> ConfirmedConfig:
        samples = [round(getattr(m, figure), 3) for m in entrant.rounds]
        measured = bool(entrant.rounds) and entrant.failure is None
        speedup = None if entrant.is_baseline or not measured else speedup_of(entrant, entrants, figure, pairing)
        units = entrant.units(figure)
        mean = float(np.mean(samples)) if samples else 0.0
        return ConfirmedConfig(
            label=entrant.label, role=entrant.role, trial=entrant.trial, target=str(entrant.config.target),
            argv=command.argv(entrant.config), samples=samples, mean_tok_s=round(mean, 3),
            ci95=(ci95(samples) or (mean, mean)) if samples else (0.0, 0.0),
            p_value=None if speedup is None else round(speedup.p_faster(1 + MIN_EFFECT), 6),
            speedup=None if speedup is None or speedup.ratio <= 0 else round(speedup.ratio, 4),
            failure=entrant.failure, dropped=entrant.dropped if measured else None,
            figures={name: [round(getattr(m, name), 3) for m in entrant.rounds] for name in SERVING_FIGURES},
            concurrency=command.parallel,
            speedup_ci95=None if speedup is None else _rounded(speedup.interval()),
            significant=id(entrant) in winners, rounds=len(entrant.rounds), prompts=len(units.decode_ms[0]) if units.decode_ms else 0,
            decode_ms=[list(r) for r in units.decode_ms], tokens=[list(r) for r in units.tokens], family=entrant.family,
        )

    return Confirmation(
        engine=engine.name, build=engine.build_info, repeats=played,
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        baselines=[row(e) for e in entrants if e.is_baseline],
        configs=[row(e) for e in entrants if e.role in ("trial", "preset")],
        spec_defaults=[row(e) for e in entrants if e.role == SPEC_DEFAULT_ROLE],
        prompt_ids=[p.id for p in mix], categories=[p.category for p in mix], pairing=pairing, ended=ended,
        planned_rounds=planned,
    )


def _rounded(interval: tuple[float, float]) -> tuple[float, float]:
    return tuple(round(v, 4) if math.isfinite(v) else v for v in interval)
