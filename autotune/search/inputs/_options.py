"""What a search is asked for: the user's options (`SearchOptions`, the race's `RaceOptions`), the study's
settings (`SearchSettings`), the inputs once checked (`SearchInputs`), and whom a search tells its progress
(`SearchReporter`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import optuna

from autotune.engines import DEFAULT_ENGINE
from autotune.measure.measurement import GenerationResult
from autotune.measure.prompts import PromptMix
from autotune.models.candidates import Candidates
from autotune.models.files import ModelFiles
from autotune.race.race import DEFAULT_BUDGET, RaceBudget
from autotune.spec.config import SpecConfig
from autotune.spec.sampling import GREEDY, Sampling
from autotune.spec.space import SearchSpace
from autotune.study.objectives import DEFAULT_OBJECTIVE


class SearchReporter(Protocol):
    """What the tuner tells whoever shows progress (the CLI prints it; tests may ignore it)."""

    def note(self, text: str) -> None: ...

    def trial_started(self, number: int, index: int, total: int, config: SpecConfig) -> None: ...

    def prompt_done(self, index: int, total: int, result: GenerationResult) -> None: ...

    def trial_finished(self, trial: optuna.trial.FrozenTrial) -> None: ...

    def race_status(self, text: str) -> None:
        """Where a race stands after a look (autotune.race.race.status_line): a line to redraw in place."""


@dataclass(frozen=True)
class SearchSettings:
    """What one `autotune search` asks for."""

    model: str
    trials: int
    max_tokens: int
    seed: int | None = None
    threads: int | None = None
    version: int | None = None  # a nightly run's study version
    objective: str = DEFAULT_OBJECTIVE
    repeats: int = 1  # measurements of the mix per trial
    baseline_every: int = 0  # re-measure the baselines after this many search trials (0: never)
    pruning: bool = True
    trial_timeout_s: float | None = None
    sampling: Sampling = GREEDY
    concurrency: int = 1  # streams at once on one llama-server (-np N)
    min_stream_tok_s: float | None = None  # per-stream p10 decode tok/s below this is infeasible


@dataclass(frozen=True)
class SearchInputs:
    """Everything a study needs from the user's input, checked before anything is measured or stored."""

    space: SearchSpace
    mix: PromptMix
    files: ModelFiles
    candidates: Candidates
    notes: tuple[str, ...] = ()  # what was left out, and which bundled mix: said once the storage opened


@dataclass(frozen=True)
class SearchOptions:
    """What the user asked `search` or `nightly` to measure (`settings`, one study per `levels` entry),
    where its inputs come from and where the study is kept."""

    settings: SearchSettings
    engine_name: str = DEFAULT_ENGINE
    prompts_file: Path | None = None
    per_category: int | None = 1
    storage_url: str | None = None
    models_dir: Path | None = None  # None: the user data dir's (autotune.settings)
    space_file: Path | None = None
    heartbeat_s: int = 60  # of the key's lease (storage.leases) and of a measured study's trials
    wait: bool = True  # --wait/--no-wait: for another search of this key to end, or LeaseHeld at once
    levels: tuple[int, ...] = (1,)  # --concurrency: a study per level
    target_file: Path | None = None  # --target: an ad-hoc model, its space inferred (autotune.models.adhoc)
    draft_files: tuple[Path, ...] = ()  # --draft, with --target
    hf: str | None = None  # --hf ORG/REPO[:QUANT]: a hub repo's space, found by names (autotune.models.hub_space)
    draft_hf: str | None = None  # --draft-hf, with --hf: draft-simple drafts from another repo
    offline: bool = False  # --offline: download nothing from the hub (as HF_HUB_OFFLINE=1)
    measured_only: tuple[str, ...] = ()  # flags the user gave that only the measured strategy reads
    again: bool = False  # --again: measure anew, even where a search of the same inputs just finished

    @property
    def model(self) -> str:
        return self.settings.model

    def at_level(self, concurrency: int) -> "SearchOptions":
        """These options for the study of `concurrency` streams."""
        return replace(self, settings=replace(self.settings, concurrency=concurrency))


@dataclass(frozen=True)
class RaceOptions:
    """How a search ends: its `top` best race the references on the arbiter (llama-server when one
    resolves) within `budget` (--race-top, --race-budget); `enabled` is --confirm/--no-confirm, which only
    the measured strategy has (the predicted one's answer is its race). A predicted search's plan may give its
    race less (autotune.search.plan.SearchPlan)."""

    enabled: bool = True
    top: int = 4
    budget: RaceBudget = RaceBudget.parse(DEFAULT_BUDGET)
