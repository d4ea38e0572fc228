"""What the Gemma 3 270M benchmarks share: the mix a study of it measures, one prompt per category, checked inputs."""

from __future__ import annotations

import tempfile
from pathlib import Path

from autotune.measure.prompts import PromptMix
from autotune.study.search import SearchInputs, SearchOptions, check_inputs

MODELS_DIR = Path(tempfile.gettempdir()) / "autotune-bench-models"


def gemma_inputs(*, trials: int, max_tokens: int, seed: int) -> tuple[SearchOptions, SearchInputs, PromptMix]:
    """Search options of a bounded in-process Gemma study, its checked inputs and its prompt mix."""
    options = SearchOptions(trials=trials, engine_name="python", prompts_file=None, per_category=1,
                            max_tokens=max_tokens, storage_url=None, models_dir=MODELS_DIR, space_file=None,
                            seed=seed, threads=None, baseline_every=0)
    inputs = check_inputs("gemma3-270m", options)
    return options, inputs, inputs.mix  # the mix a study of Gemma measures: continuations, for a base model
