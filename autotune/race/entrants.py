"""A race's entrants and what they measured: each configuration's rounds, the units a figure compares, and
its paired speedup over its target's baseline (autotune.measure.paired)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autotune.measure.measurement import Measurement
from autotune.measure.paired import Speedup, Units, paired_speedup
from autotune.measure.prompts import PromptMix
from autotune.spec.config import SpecConfig
from autotune.spec.default import SPEC_DEFAULT_FLAG
from autotune.study.records import BASELINE_ROLE, CONTROL_ROLE, SPEC_DEFAULT_ROLE

#: the figures a race can compare, and what one unit of each is (see `units_of`)
FIGURES = ("mix_tok_s", "e2e_tok_s", "aggregate_tok_s")


@dataclass
class Entrant:
    """One configuration in the race and what it measured so far."""

    role: str  # "baseline", "control", "spec-default", "trial" or "preset"
    trial: int | None  # the study trial it came from
    config: SpecConfig
    family: str | None = None
    rounds: list[Measurement] = field(default_factory=list)  # per round, its results in the order they ran
    dropped: str | None = None  # why it left the race
    dropped_after: int | None = None  # the round it left in
    failure: str | None = None  # it could not be measured, or its measurement does not count

    @property
    def is_baseline(self) -> bool:
        return self.role == BASELINE_ROLE

    @property
    def label(self) -> str:
        if self.role == SPEC_DEFAULT_ROLE:
            return f"{SPEC_DEFAULT_FLAG} ({self.config.describe()})"
        if self.role == CONTROL_ROLE:
            return "the plain command again (the control)"
        return f"the preset in use ({self.config.describe()})" if self.role == "preset" else self.config.describe()

    @property
    def in_race(self) -> bool:
        return self.dropped is None

    def prompt_decode_ms(self, mix: PromptMix, *, partial: bool = False) -> list[float] | None:
        """Each prompt's decode ms, the mean over the rounds that measured it; a prompt never measured makes
        it None, or with `partial` is nan."""
        times: dict[str, list[float]] = {}
        for measurement in self.rounds:
            for result in measurement.results:
                times.setdefault(result.prompt_id, []).append(result.decode_ms)
        if not partial and any(p.id not in times for p in mix):
            return None
        return [float(np.mean(times[p.id])) if p.id in times else math.nan for p in mix]


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


def candidates(entrants: list[Entrant]) -> list[Entrant]:
    """The entrants that could still win: in the race, the finalists and `--spec-default` (a baseline is
    what they race against, the control checks the clock; the preset in use is measured beside them,
    to compare a winner with)."""
    return [e for e in entrants if e.in_race and e.role in ("trial", SPEC_DEFAULT_ROLE) and e.rounds]


def baseline_of(entrant: Entrant, entrants: list[Entrant]) -> Entrant:
    return next(e for e in entrants if e.is_baseline and e.config.target == entrant.config.target)


def speedup_of(
    entrant: Entrant, entrants: list[Entrant], figure: str, pairing: str, rounds: slice = slice(None)
) -> Speedup:
    """`entrant`'s paired speedup over its target's baseline among `entrants`, on the units both ran (of
    `rounds` only, where given)."""
    return paired_speedup(
        entrant_units(baseline_of(entrant, entrants), figure, rounds),
        entrant_units(entrant, figure, rounds),
        pair_by_unit=pairing == "prompt",
    )


def entrant_units(entrant: Entrant, figure: str, rounds: slice = slice(None)) -> Units:
    measured = [units_of(m, figure) for m in entrant.rounds[rounds]]
    return Units.of([m for m, _ in measured], [t for _, t in measured]) if measured else Units((), ())
