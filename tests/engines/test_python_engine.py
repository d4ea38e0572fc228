"""The in-process engine on real llama.cpp: tiny GGUF models written here, and the real Gemma 3 270M."""

from __future__ import annotations

import pytest

from autotune.engines.python import PythonEngine
from autotune.errors import ModelFileError, UsageError
from autotune.measure.lossless import compare_outputs
from autotune.measure.prompts import Prompt, PromptMix, load_prompt_mix
from autotune.spec.config import SpecConfig

TINY_MIX = PromptMix(
    "test",
    (
        Prompt("a", "qa", "The quick brown fox jumps over the lazy dog and the quick brown fox runs."),
        Prompt("b", "rag", "Hello, world! This is a test prompt. Hello, world! This is a test prompt."),
    ),
)


def lossless(engine, config, mix, baseline, candidate):
    verdicts = compare_outputs(
        [p.id for p in mix], [r.tokens for r in baseline.results], [r.tokens for r in candidate.results],
        lambda i, generated, a, b: engine.tie_evidence(config.target, mix.prompts[i], generated, a, b),
    )
    return verdicts


@pytest.fixture(scope="module")
def tiny_engine():
    with PythonEngine(context_size=512, threads=2) as engine:
        yield engine


def test_baseline_generates_max_tokens_with_timings(tiny_engine, tiny_dir):
    seen = []
    m = tiny_engine.measure(SpecConfig(tiny_dir / "tiny-target.gguf"), TINY_MIX, max_tokens=24,
                            on_prompt=lambda i, r: seen.append(i))
    assert seen == [0, 1]
    for r in m.results:
        assert r.n_generated == 24 and len(r.tokens) == 24
        assert r.decode_ms > 0 and r.prompt_ms > 0 and r.n_prompt > 5
        assert r.n_drafted == 0
    assert m.mix_tok_s > 0 and m.acceptance is None


@pytest.mark.parametrize(
    "spec_type, draft, params",
    [
        ("ngram-simple", None, {"ngram_simple_size_n": 1, "ngram_simple_size_m": 4}),
        ("draft-simple", "tiny-draft.gguf", {"draft_n_max": 4}),
        ("draft-simple", "tiny-target.gguf", {"draft_n_max": 3, "draft_n_min": 1}),
    ],
)
def test_speculative_output_equals_the_baseline(tiny_engine, tiny_dir, spec_type, draft, params):
    target = tiny_dir / "tiny-target.gguf"
    baseline = tiny_engine.measure(SpecConfig(target), TINY_MIX, max_tokens=40)
    config = SpecConfig(target, spec_type, tiny_dir / draft if draft else None, params)
    m = tiny_engine.measure(config, TINY_MIX, max_tokens=40)
    assert m.n_drafted > 0
    assert all(v.lossless for v in lossless(tiny_engine, config, TINY_MIX, baseline, m))
    assert [r.n_generated for r in m.results] == [40, 40]


def test_self_draft_accepts_nearly_everything(tiny_engine, tiny_dir):
    target = tiny_dir / "tiny-target.gguf"
    m = tiny_engine.measure(SpecConfig(target, "draft-simple", target, {"draft_n_max": 4}), TINY_MIX, max_tokens=40)
    assert m.acceptance > 0.9
    assert m.mean_accepted_length > 3


def test_p_min_of_one_stops_every_draft(tiny_engine, tiny_dir):
    target = tiny_dir / "tiny-target.gguf"
    config = SpecConfig(target, "draft-simple", tiny_dir / "tiny-draft.gguf", {"draft_p_min": 1.0})
    assert tiny_engine.measure(config, TINY_MIX, max_tokens=12).n_drafted == 0


def test_prompt_that_does_not_fit_the_context_is_a_usage_error(tiny_dir):
    with PythonEngine(context_size=32, threads=1) as engine:
        with pytest.raises(UsageError, match="context_size"):
            engine.prepare(SpecConfig(tiny_dir / "tiny-target.gguf"), TINY_MIX, max_tokens=30)


def test_corrupt_gguf_is_a_model_file_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with PythonEngine(context_size=64) as engine:
        with pytest.raises(ModelFileError, match="cannot load"):
            engine.prepare(SpecConfig(bad), TINY_MIX, max_tokens=4)


@pytest.mark.slow
def test_gemma_ngram_and_self_draft_are_lossless_and_draft(gemma_path):
    mix = load_prompt_mix().take(per_category=1, categories=["rag", "summarization", "coding"])
    with PythonEngine(context_size=2048) as engine:
        baseline = engine.measure(SpecConfig(gemma_path), mix, max_tokens=24)
        assert baseline.mix_tok_s > 0
        for config in (
            SpecConfig(gemma_path, "ngram-simple", params={"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}),
            SpecConfig(gemma_path, "draft-simple", gemma_path, {"draft_n_max": 3}),
        ):
            m = engine.measure(config, mix, max_tokens=24)
            assert m.n_drafted > 0, config.describe()
            verdicts = lossless(engine, config, mix, baseline, m)
            assert all(v.lossless for v in verdicts), verdicts
