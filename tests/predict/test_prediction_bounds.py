"""Predicted speedups held to what llama-server measures, on the real Gemma 3 270M: the search's own
prediction (calibrated on its references) of seven configurations over two families, each measured with
the baseline, paired prompt by prompt. The bound is loose enough for a busy CI box and tight enough that
a dropped cost term fails it: without the draft's cost a same-size self-draft is predicted near 2x and
measures well under 1x; without the per-row term a 16-token n-gram draft is predicted far too fast."""

from __future__ import annotations

import pytest

from autotune.measure.prompts import PromptMix, default_mix_path, load_prompt_mix
from autotune.spec.config import SpecConfig
from autotune.spec.types import DRAFT_MODEL_FAMILY, NGRAM_FAMILY
from autotune.testing.prediction import check_predictions

BOUND = 0.35

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]


def test_predictions_of_two_families_are_within_the_bound_of_llama_server(gemma_path, autotune_home):
    bundled = load_prompt_mix(default_mix_path([gemma_path])[0]).take(per_category=1)
    mix = PromptMix(bundled.source, bundled.prompts[:6])
    configs = [
        SpecConfig(gemma_path, "ngram-simple", params={"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}),
        SpecConfig(gemma_path, "ngram-simple", params={"ngram_simple_size_n": 6, "ngram_simple_size_m": 16}),
        SpecConfig(
            gemma_path, "ngram-mod", params={"ngram_mod_n_match": 8, "ngram_mod_n_min": 2, "ngram_mod_n_max": 16}
        ),
        SpecConfig(gemma_path, "ngram-map-k", params={"ngram_map_k_size_n": 3, "ngram_map_k_size_m": 12}),
        SpecConfig(gemma_path, "draft-simple", gemma_path, {"draft_n_max": 1}),
        SpecConfig(gemma_path, "draft-simple", gemma_path, {"draft_n_max": 3}),
        SpecConfig(gemma_path, "draft-simple", gemma_path, {"draft_n_max": 6, "draft_p_min": 0.5}),
    ]
    checked = check_predictions(gemma_path, [gemma_path], configs, mix, max_tokens=48, rounds=1)
    measured = [c for c in checked if c.measured.ratio > 0]
    assert {c.family for c in measured} == {NGRAM_FAMILY, DRAFT_MODEL_FAMILY} and len(measured) >= 6, [
        (c.config.describe(), c.dropped) for c in checked
    ]
    report = "\n".join(
        f"{c.config.describe()}: predicted {c.predicted:.2f}x, measured {c.measured.ratio:.2f}x "
        f"({c.error:+.0%}{', a reference' if c.reference else ''})"
        for c in checked
    )
    assert all(abs(c.error) <= BOUND for c in measured), report
    assert [c for c in measured if not c.reference], report  # some of them were not fitted to
