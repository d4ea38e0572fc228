"""The race: the few best predicted configurations, with the baseline and `--spec-default`, measured on
llama-server in interleaved rounds until one is left or the round budget ends.

Each round measures every entrant still in over the whole mix, in an order rotated per round. From
the second round on, every entrant is compared with the leader (the fastest by mean mix tok/s) prompt
by prompt: a one-sided paired t-test on the log ratio of each prompt's mean decode tok/s, Holm-corrected
over the comparisons of that round. An entrant significantly slower than the leader is dropped; the
references are never dropped (every speedup is over the baseline measured in the same rounds). An
entrant that drafts nothing, or whose output is not the baseline's, is dropped at once
(autotune.study.checks).

The result is a `Confirmation` (autotune.study.confirm) like the measured strategy's, so `best`, the
presets and the report read it the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import numpy as np
from scipy import stats

from autotune.engines.base import Engine
from autotune.errors import TrialFailure
from autotune.measure.device_lock import device_lock
from autotune.measure.measurement import Measurement
from autotune.measure.prompts import PromptMix
from autotune.measure.stats import ci95, welch_p
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.default import SPEC_DEFAULT_FLAG
from autotune.study.checks import MeasurementCheck
from autotune.study.confirm import Confirmation, ConfirmedConfig
from autotune.study.records import BASELINE_ROLE, SPEC_DEFAULT_ROLE

SIGNIFICANCE = 0.05


@dataclass
class Entrant:
    """One configuration in the race and what it measured so far."""

    role: str  # "baseline", "spec-default" or "trial"
    trial: int | None  # the study trial it came from
    config: SpecConfig
    mix_tok_s: list[float] = field(default_factory=list)  # per round
    per_prompt: list[list[float]] = field(default_factory=list)  # per round, each prompt's decode tok/s
    decode_ms: list[list[float]] = field(default_factory=list)  # per round, each prompt's decode ms
    dropped: str | None = None  # why it left the race
    dropped_after: int | None = None  # the round it left after

    @property
    def is_reference(self) -> bool:
        return self.role in (BASELINE_ROLE, SPEC_DEFAULT_ROLE)

    @property
    def label(self) -> str:
        return f"{SPEC_DEFAULT_FLAG} ({self.config.describe()})" if self.role == SPEC_DEFAULT_ROLE else self.config.describe()

    @property
    def in_race(self) -> bool:
        return self.dropped is None

    def prompt_means(self) -> np.ndarray:
        return np.mean(np.array(self.per_prompt), axis=0)

    def prompt_decode_ms(self) -> list[float]:
        """Each prompt's decode ms, the mean over the rounds measured."""
        return np.mean(np.array(self.decode_ms), axis=0).tolist()


def race(engine: Engine, entrants: list[Entrant], mix: PromptMix, *, max_tokens: int, rounds: int,
         command: ServerCommand, on_measured: Callable[[int, str, float | None], None] = lambda r, label, v: None,
         on_dropped: Callable[[Entrant], None] = lambda entrant: None) -> Confirmation:
    """Run the race (see the module docstring); entrants' configurations must share the baselines' targets."""
    played = 0
    check = MeasurementCheck.for_command(engine, mix, command)
    for round_ in range(rounds):
        alive = [e for e in entrants if e.in_race]
        shift = round_ % len(alive)
        for entrant in alive[shift:] + alive[:shift]:
            try:
                with device_lock():
                    measurement = engine.measure(entrant.config, mix, max_tokens=max_tokens)
            except TrialFailure as exc:
                _drop(entrant, str(exc), round_, on_dropped)
                on_measured(round_, entrant.label, None)
                continue
            reason = check.failure(entrant.config, measurement)
            if reason is not None:
                _drop(entrant, reason, round_, on_dropped)
                on_measured(round_, entrant.label, None)
                continue
            _record(entrant, measurement)
            on_measured(round_, entrant.label, entrant.mix_tok_s[-1])
        played = round_ + 1
        if any(e.role == BASELINE_ROLE and not e.in_race for e in entrants):
            raise TrialFailure(f"the baseline could not be measured on the {engine.name} engine")
        if played >= 2:
            for entrant in slower_than_leader(entrants):
                _drop(entrant, "significantly slower than the leader, prompt by prompt", round_, on_dropped)
        if sum(1 for e in entrants if e.in_race and not e.is_reference) <= 1 and played >= 2:
            break
    return _confirmation(engine, entrants, played, command)


def slower_than_leader(entrants: list[Entrant], alpha: float = SIGNIFICANCE) -> list[Entrant]:
    """The entrants (never a reference) whose prompts run significantly slower than the leader's, by a
    one-sided paired t-test on log ratios with Holm's correction over the comparisons."""
    measured = [e for e in entrants if e.in_race and len(e.per_prompt) >= 2]
    if len(measured) < 2:
        return []
    leader = max(measured, key=lambda e: float(np.mean(e.mix_tok_s)))
    tests = []
    for entrant in measured:
        if entrant is leader or entrant.is_reference:
            continue
        ratios = np.log(np.maximum(entrant.prompt_means(), 1e-9) / np.maximum(leader.prompt_means(), 1e-9))
        if np.allclose(ratios, ratios[0]):
            p = 0.0 if ratios[0] < 0 else 1.0
        else:
            p = float(stats.ttest_1samp(ratios, 0.0, alternative="less").pvalue)
        tests.append((p, entrant))
    slower = []
    for rank, (p, entrant) in enumerate(sorted(tests, key=lambda t: t[0])):
        if math.isnan(p) or p > alpha / (len(tests) - rank):
            break  # Holm: the first hypothesis kept keeps every later one
        slower.append(entrant)
    return slower


def _record(entrant: Entrant, measurement: Measurement) -> None:
    entrant.mix_tok_s.append(measurement.mix_tok_s)
    entrant.per_prompt.append([r.decode_tok_s for r in measurement.results])
    entrant.decode_ms.append([r.decode_ms for r in measurement.results])


def _drop(entrant: Entrant, reason: str, round_: int, on_dropped: Callable[[Entrant], None]) -> None:
    entrant.dropped, entrant.dropped_after = reason, round_ + 1
    on_dropped(entrant)


def _confirmation(engine: Engine, entrants: list[Entrant], rounds: int, command: ServerCommand) -> Confirmation:
    baselines = {e.config.target: e for e in entrants if e.role == BASELINE_ROLE}

    def row(entrant: Entrant) -> ConfirmedConfig:
        values = entrant.mix_tok_s
        failure = entrant.dropped if entrant.dropped and not values else None
        base = baselines[entrant.config.target].mix_tok_s
        mean = float(np.mean(values)) if values else 0.0
        is_baseline = entrant.role == BASELINE_ROLE
        return ConfirmedConfig(
            label=entrant.label, role=entrant.role, trial=entrant.trial, target=str(entrant.config.target),
            argv=command.argv(entrant.config), samples=values, mean_tok_s=round(mean, 3),
            ci95=(ci95(values) or (mean, mean)) if values else (0.0, 0.0),
            p_value=None if is_baseline or not values else welch_p(values, base),
            speedup=None if is_baseline or not values or not base else round(mean / float(np.mean(base)), 4),
            failure=failure, dropped=entrant.dropped if values else None,
        )

    return Confirmation(
        engine=engine.name, build=engine.build_info, repeats=rounds,
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        baselines=[row(e) for e in entrants if e.role == BASELINE_ROLE],
        configs=[row(e) for e in entrants if e.role == "trial"],
        spec_defaults=[row(e) for e in entrants if e.role == SPEC_DEFAULT_ROLE],
    )
