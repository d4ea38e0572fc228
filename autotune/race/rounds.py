"""The rounds of a race (autotune.race.race): which entrants run each prompt, in what order, on which
servers, and which checks drop an entrant; the race decides what the measurements mean."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from autotune.engines.base import Engine
from autotune.errors import TrialFailure
from autotune.measure.device_lock import device_lock
from autotune.measure.measurement import Measurement
from autotune.measure.paired import Speedup
from autotune.measure.prompts import PromptMix
from autotune.measure.stratified import PROMPT_MIN_UNITS
from autotune.race.checks import MeasurementCheck
from autotune.race.entrants import Entrant, candidates, speedup_of
from autotune.spec.command import ServerCommand
from autotune.study.records import BASELINE_ROLE, CONTROL_ROLE

#: the blocks of a pass over the mix where a race rotates its entrants over blocks (`Rounds`): the paired
#: test's first bound (its third unit) comes within a pass
BLOCKS_A_PASS = 4
#: where the targets' servers load in turn, a round alternates the targets every TARGET_BLOCK prompts (`Rounds`):
#: the per-prompt sequence's first bound comes after the first block of every target
TARGET_BLOCK = PROMPT_MIN_UNITS


def target_blocks(prompts: int, targets: int) -> int:
    """The blocks a round of `prompts` prompts plays where `targets` targets' servers load in turn (one block
    where they load together, or there is one)."""
    return -(-prompts // TARGET_BLOCK) if targets > 1 else 1


@dataclass(frozen=True)
class RaceStatus:
    """Where a race stands at a look: for the live progress line."""

    round_: int  # 0-based, the round under way
    prompts_done: int  # in that round
    prompts: int  # a round's
    left_s: float  # the budget's seconds left at the pace so far (nan: not known yet)
    standings: tuple[tuple[str, Speedup], ...]  # each candidate and control still in, with its speedup so far


class Rounds:
    """The rounds of a race: the pairing the engine allows, the prompt order of each round, and the checks
    (a failure or a wrong output drops its entrant; the baseline may not go). Prompt by prompt, every
    entrant's server starts afresh each round: llama-server's n-gram drafters keep what they saw across
    requests, so a server kept for a second round would draft from the mix it has already generated,
    which no user's server does (and the prediction, one pass of the mix, does not model).

    Where every entrant's server does not fit in memory at once but each target's do (each llama-server
    holds its own weights: two 8B targets' references and finalists overflow an 80 GB card), a round runs
    one target's entrants at a time, in blocks of TARGET_BLOCK of the round's prompts: each target's servers
    run the block, then the next target's (the first target rotated per block), then the next block on
    servers started afresh. Every entrant is compared with its own target's baseline, which ran each prompt
    seconds apart from it, so the pairing is still by prompt; and wherever a time budget stops the race
    (`even`: only at a block's end), every target's entrants hold paired evidence on the same prompts.

    Where even one target's do not (a 24 GB card and an 8B target's race), a round is a block of the mix
    (pairing "block"): BLOCKS_A_PASS blocks a pass, each block's prompts spread over the categories, each
    entrant in turn running the block on a server of its own started for it, the order rotated per block.
    The block is the unit of pairing (its instances and the machine's drift are inside it), so the first
    bound comes after MIN_UNITS blocks, not MIN_UNITS whole mixes, and a budget of rounds counts passes
    over the mix. Elsewhere (the in-process engine, a figure not timed prompt by prompt) a round is the
    whole mix, one configuration at a time."""

    def __init__(
        self,
        engine: Engine,
        entrants: list[Entrant],
        mix: PromptMix,
        max_tokens: int,
        command: ServerCommand,
        figure: str,
        on_dropped: Callable[[Entrant], None],
        *,
        by_prompt: bool = True,
        seed: int = 0,
    ):
        self.engine, self.mix, self.max_tokens, self.on_dropped = engine, mix, max_tokens, on_dropped
        self.entrants = sorted(entrants, key=lambda e: not e.is_baseline)  # baselines first: the check keeps theirs
        self.check = MeasurementCheck.for_command(engine, mix, command)
        by_prompt = by_prompt and figure == "mix_tok_s" and command.parallel == 1
        self._groups = self._loaded_together(engine) if by_prompt else None
        blocks = by_prompt and self._groups is None and engine.fresh_each_measure and len(mix) > 1
        self.pairing = "prompt" if self._groups is not None else "block" if blocks else "round"
        self.block = -(-len(mix) // BLOCKS_A_PASS) if blocks else len(mix)  # a round's prompts
        self.orders: list[list[int]] = []  # each round's prompt order (mix indices)
        self.complete = 0  # rounds played to their end
        self.between_rounds = True
        self.even = True  # every target's entrants have run the same prompts of the round (a budget may stop here)
        self._random = random.Random(seed)
        self._pass: list[int] = []  # the block pairing's prompts of this pass not yet run

    def _loaded_together(self, engine: Engine) -> list[set[str]] | None:
        """The targets whose entrants' servers are loaded together: all of them, else one target at a time
        where each target's fit; None where even those do not (one configuration at a time)."""
        targets = list(dict.fromkeys(str(e.config.target) for e in self.entrants))
        if engine.holds_at_once([e.config for e in self.entrants], self.mix, max_tokens=self.max_tokens):
            return [set(targets)]
        groups = [{t} for t in targets]
        fits = len(groups) > 1 and all(
            engine.holds_at_once(
                [e.config for e in self.entrants if str(e.config.target) in group], self.mix, max_tokens=self.max_tokens
            )
            for group in groups
        )
        return groups if fits else None

    @property
    def alternating(self) -> bool:
        """Whether the targets' servers load in turn, alternating in blocks of TARGET_BLOCK prompts."""
        return self._groups is not None and len(self._groups) > 1

    @property
    def current(self) -> int:
        return len(self.orders) - 1

    @property
    def passes(self) -> int:
        """Complete passes over the mix: the complete rounds, or in the block pairing the blocks' passes."""
        return self.complete // self._rounds_a_pass()

    def _rounds_a_pass(self) -> int:
        return -(-len(self.mix) // self.block)

    def looks(self, per_prompt: bool = True) -> Iterator[None]:
        """Play rounds for as long as the caller iterates, yielding at each look: after every prompt (prompt
        pairing and `per_prompt`) or after every round; closing it stops the servers of the round."""
        while True:
            yield from self._round([e for e in self.entrants if e.in_race], per_prompt, self._next_block())

    def _next_block(self) -> list[int] | None:
        """The block pairing's next round: the next BLOCK prompts of this pass (a new pass spread over the
        categories once the last is run); None elsewhere (the whole mix)."""
        if self.pairing != "block":
            return None
        if not self._pass:
            self._pass = self.mix.spread(self._random)
        block, self._pass = self._pass[: self.block], self._pass[self.block :]
        return block

    def confirm(self, winner: Entrant, prompts: Sequence[int] | None = None) -> int:
        """One more round on fresh servers of `winner`, its baseline and its control, after the decision, over
        the mix or the prompts at `prompts` of it; returns that round's index."""
        group = [
            e
            for e in self.entrants
            if e.config.target == winner.config.target
            and (e is winner or e.role in (BASELINE_ROLE, CONTROL_ROLE))
            and e.in_race
        ]
        for _ in self._round(group, per_prompt=False, prompts=prompts):
            pass
        return self.current

    def void(self, round_: int) -> None:
        """Set round `round_`'s measurements aside (its control moved: autotune.race.race): each entrant keeps
        an empty round in its place, so every round index still names the same round and order."""
        for entrant in self.entrants:
            if len(entrant.rounds) > round_:
                entrant.rounds[round_] = Measurement([])

    def _round(self, alive: list[Entrant], per_prompt: bool, prompts: Sequence[int] | None = None) -> Iterator[None]:
        order = list(range(len(self.mix))) if prompts is None else list(prompts)
        if self.pairing != "round":
            self._random.shuffle(order)
        self.orders.append(order)
        self.between_rounds = False
        for entrant in alive:
            entrant.rounds.append(Measurement([]))
        round_ = self.current
        if self.pairing == "prompt":
            groups = [
                g for g in ([e for e in alive if str(e.config.target) in targets] for targets in self._groups) if g
            ]
            size = -(-len(order) // target_blocks(len(order), len(groups)))
            blocks = [order[start : start + size] for start in range(0, len(order), size)]
            errors: dict[int, tuple[str, ...]] = {}
            for number, block in enumerate(blocks):
                turns = groups[number % len(groups) :] + groups[: number % len(groups)]
                for turn, group in enumerate(turns, start=1):
                    with self.engine.live([e.config for e in group], self.mix, max_tokens=self.max_tokens) as servers:
                        for offset, prompt_index in enumerate(block):
                            self._prompt(servers, group, round_, number * size + offset, prompt_index)
                            block_done = turn == len(turns) and offset == len(block) - 1
                            if offset == len(block) - 1:
                                for i, e in enumerate(group):
                                    errors[id(e)] = errors.get(id(e), ()) + tuple(servers.error_lines(i))
                            self.even = block_done or len(groups) == 1
                            last = block_done and number == len(blocks) - 1
                            if last:
                                self._end_round(alive, errors)
                            if per_prompt or last:
                                yield
        else:
            self._in_turn(alive, round_, PromptMix(self.mix.source, tuple(self.mix.prompts[i] for i in order)))
            self._end_round(alive, {})
            yield

    def _prompt(self, servers, alive: list[Entrant], round_: int, position: int, prompt_index: int) -> None:
        """Prompt `prompt_index` on every entrant still in, back to back, the order rotated per prompt."""
        shift = (round_ + position) % len(alive)
        for index in list(range(shift, len(alive))) + list(range(shift)):
            entrant = alive[index]
            if not entrant.in_race:
                continue
            try:
                with device_lock():
                    result = servers.generate(index, prompt_index)
            except TrialFailure as exc:
                self.drop(entrant, str(exc), failed=True)
                continue
            entrant.rounds[-1].results.append(result)
            reason = self.check.failure(entrant.config, Measurement([result]), require_drafts=False)
            if reason is not None:
                self.drop(entrant, reason, failed=True)

    def _in_turn(self, alive: list[Entrant], round_: int, mix: PromptMix) -> None:
        """Each entrant runs `mix` (the whole mix, or the round's part of it) with one configuration loaded at a
        time, the order rotated."""
        shift = round_ % len(alive)
        for entrant in alive[shift:] + alive[:shift]:
            try:
                with device_lock():
                    entrant.rounds[-1] = self.engine.measure(entrant.config, mix, max_tokens=self.max_tokens)
            except TrialFailure as exc:
                self.drop(entrant, str(exc), failed=True)
                continue
            reason = self.check.failure(entrant.config, entrant.rounds[-1], require_drafts=False)
            if reason is not None:
                self.drop(entrant, reason, failed=True)

    def _end_round(self, alive: list[Entrant], errors: dict[int, tuple[str, ...]]) -> None:
        """A round's end: each entrant that ran all of it must have drafted (in the block pairing, over the
        pass a block ends: an n-gram drafter may find nothing in a few prompts); the baseline must be in."""
        self.complete += 1
        self.between_rounds = True
        span = self._rounds_a_pass() if self.pairing == "block" else 1
        for entrant in alive:
            if id(entrant) in errors:
                entrant.rounds[-1].log_errors = errors[id(entrant)]
            if self.complete % span:
                continue
            measurement = Measurement(
                [r for m in entrant.rounds[-span:] for r in m.results], log_errors=entrant.rounds[-1].log_errors
            )
            if entrant.in_race and measurement.results:
                reason = self.check.drafting_failure(entrant.config, measurement)
                if reason is not None:
                    self.drop(entrant, reason, failed=True)

    def drop(self, entrant: Entrant, reason: str, failed: bool = False) -> None:
        """`entrant` leaves at this look: `failed` where it could not be measured or its measurement does
        not count (it drafted nothing, its output is not the baseline's, a timing artefact), else for the
        verdict."""
        if not entrant.in_race:
            return
        if not failed and (inactive := self.inactive(entrant)) is not None:
            reason, failed = inactive, True
        entrant.dropped, entrant.dropped_after = reason, self.current
        if failed or not any(m.results for m in entrant.rounds):
            entrant.failure = reason
        if entrant.is_baseline:
            raise TrialFailure(f"the baseline could not be measured on the {self.engine.name} engine: {reason}")
        self.on_dropped(entrant)

    def inactive(self, entrant: Entrant) -> str | None:
        """Why `entrant` counts for nothing where it drafted nothing in every prompt it ran (a race that
        ends, or drops it, before a round's end never asks the round's own check)."""
        results = [r for m in entrant.rounds for r in m.results]
        if not results:
            return None
        return self.check.drafting_failure(
            entrant.config, Measurement(results, log_errors=entrant.rounds[-1].log_errors)
        )

    def status(self, left_s: float) -> RaceStatus:
        shown = [e for e in self.entrants if e.in_race and (e.role == CONTROL_ROLE or e in candidates(self.entrants))]
        groups = self._groups or [set()]  # the prompts of a round: each group's baseline runs every one
        firsts = [
            next((e for e in self.entrants if e.is_baseline and str(e.config.target) in g), self.entrants[0])
            for g in groups
        ]
        done = sum(len(e.rounds[-1].results) for e in firsts if e.rounds)
        prompts = len(self.orders[-1]) if self.orders else self.block
        return RaceStatus(
            self.current,
            done,
            prompts * len(groups),
            left_s,
            tuple((e.label, speedup_of(e, self.entrants, "mix_tok_s", self.pairing)) for e in shown),
        )
