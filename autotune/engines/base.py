"""The interface every measurement engine implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, Sequence

from autotune.measure.lossless import TieEvidence
from autotune.measure.measurement import GenerationResult, Measurement
from autotune.measure.prompts import Prompt, PromptMix
from autotune.spec.config import SpecConfig
from autotune.spec.params import SpecParam

#: Every engine's warm-up request before a mix: this many tokens of the first prompt (the replay counts it too)
WARMUP_TOKENS = 8

#: Called after each prompt with (index, result) so callers can show progress or report to a pruner.
ProgressCallback = Callable[[int, GenerationResult], None]


class Engine(ABC):
    """Measures real generation of a SpecConfig over a prompt mix."""

    name: str
    #: What the engine found and did on start that the user should hear (a dead run's llama-server stopped).
    startup_notes: tuple[str, ...] = ()

    @property
    @abstractmethod
    def runnable_spec_types(self) -> frozenset[str]:
        """Spec types this engine can measure."""

    @property
    @abstractmethod
    def build_info(self) -> str:
        """Which llama.cpp build measures (recorded with every trial)."""

    def supports_param(self, param: SpecParam) -> bool:
        """Whether this engine can set `param` (a llama-server without a fork's flags cannot)."""
        return True

    def supports_runtime(self, param: SpecParam) -> bool:
        """Whether this engine applies a `[runtime]` flag (autotune.spec.runtime_flags.RuntimeParam) the way
        llama-server does: the in-process engine the ones it sets on its contexts."""
        return bool(getattr(param, "python", False))

    @abstractmethod
    def prepare(self, config: SpecConfig, mix: PromptMix, *, max_tokens: int) -> None:
        """Load what `config` needs and check every prompt fits, before any trial is stored.

        Raises ModelFileError or UsageError for bad input.
        """

    @abstractmethod
    def measure(
        self,
        config: SpecConfig,
        mix: PromptMix,
        *,
        max_tokens: int,
        on_prompt: ProgressCallback | None = None,
        deadline_s: float | None = None,
    ) -> Measurement:
        """Warm up, then generate every prompt of `mix` greedily with `config` and time it.

        `deadline_s` (a time.monotonic() value): an engine that can stop in the middle of a prompt
        raises TrialFailure once it passes; the others ignore it, and the caller's `on_prompt`
        checks it between prompts.
        Raises TrialFailure when this configuration cannot be measured (the study goes on) and
        EngineError when the engine itself is broken.
        """

    @abstractmethod
    def tie_evidence(
        self, target: Path, prompt: Prompt, generated: Sequence[int], token_a: int, token_b: int
    ) -> TieEvidence:
        """How strongly the target prefers token a over b after `prompt` + `generated`, decoded one token
        at a time (as the baseline ran) and in one batch (as a verifier runs)."""

    #: whether each `measure` runs on a fresh instance (a server started for it): where `live` cannot hold a
    #: race's entrants, the race rotates them over small blocks of prompts instead (autotune.race.rounds)
    fresh_each_measure = False

    #: The line the last `holds_at_once` leaves where it could not read the free memory and so said no (nvidia-smi
    #: lists GPUs but prints [N/A] as their free memory: one configuration at a time), for the race to say once;
    #: None where the memory was known.
    memory_note: str | None = None

    def holds_at_once(self, configs: Sequence[SpecConfig], mix: PromptMix, *, max_tokens: int) -> bool:
        """Whether `live` can keep all of `configs` loaded at once for `mix` (the server engine, memory allowing)."""
        return False

    def live(self, configs: Sequence[SpecConfig], mix: PromptMix, *, max_tokens: int):
        """A context manager of every configuration loaded and warmed up at once, whose
        `generate(index, prompt_index)` generates one prompt with configuration `index`; only where
        `holds_at_once` says so."""
        raise NotImplementedError(f"the {self.name} engine measures one configuration at a time")

    def close(self) -> None:
        """Free what the engine holds (models, processes)."""

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
