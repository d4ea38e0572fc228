"""What a confirmation or a race requires of a measurement besides its speed.

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
    """Checks each measurement of a confirmation against the baseline of its target measured in it."""

    def __init__(self, engine: Engine, mix: PromptMix, *, compare_output: bool):
        self.engine = engine
        self.mix = mix
        self.compare_output = compare_output  # greedy sampling, one stream: the output is determined
        self._baseline_output: dict[Path, list[list[int]]] = {}

    @classmethod
    def for_command(cls, engine: Engine, mix: PromptMix, command: ServerCommand) -> "MeasurementCheck":
        """The check for measurements made as `command` runs: outputs compared at greedy sampling, one stream."""
        return cls(engine, mix, compare_output=command.sampling.is_greedy and command.parallel == 1)

    def failure(self, config: SpecConfig, measurement: Measurement) -> str | None:
        """Why `measurement` of `config` is not a result (None when it is); a baseline's output is kept."""
        if config.is_baseline:
            self._baseline_output.setdefault(config.target, [r.tokens for r in measurement.results])
            return None
        if measurement.n_drafted == 0:
            errors = measurement.log_errors
            return "drafted nothing: speculation was inactive" + (f" ({errors[0]})" if errors else "")
        expected = self._baseline_output.get(config.target)
        if not self.compare_output or expected is None:
            return None
        verdicts = compare_outputs(
            [p.id for p in self.mix], expected, [r.tokens for r in measurement.results],
            lambda i, generated, a, b: self.engine.tie_evidence(config.target, self.mix.prompts[i], generated, a, b),
        )
        differing = next((v for v in verdicts if not v.lossless), None)
        if differing is None:
            return None
        return f"output differs from the baseline's (prompt {differing.prompt_id}, token {differing.diverged_at})"
