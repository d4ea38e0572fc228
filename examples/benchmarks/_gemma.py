"""What the Gemma 3 270M benchmarks share: the mix a study of it measures, one prompt per category, checked inputs."""

from __future__ import annotations

import tempfile
from pathlib import Path

from autotune.measure.prompts import PromptMix
from autotune.search.inputs import SearchInputs, SearchOptions, SearchSettings, check_inputs

MODELS_DIR = Path(tempfile.gettempdir()) / "autotune-bench-models"


def gemma_inputs(*, trials: int, max_tokens: int, seed: int) -> tuple[SearchOptions, SearchInputs, PromptMix]:
    """Search options of a bounded in-process Gemma study, its checked inputs and its prompt mix."""
    settings = SearchSettings("gemma3-270m", trials, max_tokens, seed=seed, baseline_every=0)
    options = SearchOptions(settings, engine_name="python", models_dir=MODELS_DIR)
    inputs = check_inputs(options)
    return options, inputs, inputs.mix  # the mix a study of Gemma measures: continuations, for a base model
