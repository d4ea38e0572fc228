"""What a race requires of a measurement besides its speed.

A configuration that drafts must have drafted: llama-server only logs a draft it cannot use (an
incompatible vocabulary, a missing tensor) and then runs at baseline speed, where noise can make it
the "winner". At temperature 0 with one stream its output must be the baseline's, measured in the
same confirmation, up to numeric ties (autotune.measure.lossless): a speedup bought with different
text is not a speedup.
"""

from __future__ import annotations

from pathlib import Path

from autotune.engines.base import Engine
from autotune.measure.lossless import compare_outputs
from autotune.measure.measurement import Measurement
from autotune.measure.prompts import PromptMix
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig


class MeasurementCheck:
    """Checks each measurement of a race against the baseline of its target measured in it."""

    def __init__(self, engine: Engine, mix: PromptMix, *, compare_output: bool):
        self.engine = engine
        self.mix = mix
        self.compare_output = compare_output  # greedy sampling, one stream: the output is determined
        self._baseline_output: dict[Path, dict[str, list[int]]] = {}  # target -> prompt id -> tokens

    @classmethod
    def for_command(cls, engine: Engine, mix: PromptMix, command: ServerCommand) -> "MeasurementCheck":
        """The check for measurements made as `command` runs: outputs compared at greedy sampling, one stream."""
        return cls(engine, mix, compare_output=command.sampling.is_greedy and command.parallel == 1)

    @staticmethod
    def drafting_failure(config: SpecConfig, measurement: Measurement) -> str | None:
        """Why a speculative `config` measured nothing speculative (None: it drafted, or it is the plain command)."""
        if config.is_baseline or measurement.n_drafted > 0:
            return None
        errors = measurement.log_errors
        return "drafted nothing: speculation was inactive" + (f" ({errors[0]})" if errors else "")

    def failure(self, config: SpecConfig, measurement: Measurement, *, require_drafts: bool = True) -> str | None:
        """Why `measurement` of `config` is not a result (None when it is); a baseline's outputs are kept, by
        prompt. `require_drafts` False: a few prompts that drafted nothing are no failure yet (an n-gram
        draft may find no match in one prompt); the race asks again over a whole round."""
        if config.is_baseline:
            for result in measurement.results:
                self._baseline_output.setdefault(config.target, {}).setdefault(result.prompt_id, result.tokens)
            return None
        if require_drafts and (drafting := self.drafting_failure(config, measurement)) is not None:
            return drafting
        expected = self._baseline_output.get(config.target, {})
        compared = [r for r in measurement.results if r.prompt_id in expected]
        if not self.compare_output or not compared:
            return None
        index = {p.id: i for i, p in enumerate(self.mix)}
        verdicts = compare_outputs(
            [r.prompt_id for r in compared],
            [expected[r.prompt_id] for r in compared],
            [r.tokens for r in compared],
            lambda i, generated, a, b: self.engine.tie_evidence(
                config.target, self.mix.prompts[index[compared[i].prompt_id]], generated, a, b
            ),
        )
        differing = next((v for v in verdicts if not v.lossless), None)
        if differing is None:
            return None
        return f"output differs from the baseline's (prompt {differing.prompt_id}, token {differing.diverged_at})"
