"""The in-process engine on real llama.cpp: tiny GGUF models written here, and the real Gemma 3 270M."""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from autotune.engines.python import PythonEngine
from autotune.errors import ModelFileError, UsageError
from autotune.measure.prompts import Prompt, PromptMix, load_prompt_mix
from autotune.spec.config import SpecConfig

TINY_MIX = PromptMix(
    "test",
    (
        Prompt("a", "qa", "The quick brown fox jumps over the lazy dog and the quick brown fox runs."),
        Prompt("b", "rag", "Hello, world! This is a test prompt. Hello, world! This is a test prompt."),
    ),
)


class ReferenceGreedy:
    """Greedy generation by llama-cpp-python's own `Llama`, none of the engine's code: the prompt in one
    `eval`, then one token at a time, each the argmax of the last row's logits, until an
    end-of-generation token or `max_tokens`."""

    def __init__(self, path, n_ctx: int):
        self.llm = llama_cpp.Llama(str(path), n_ctx=n_ctx, flash_attn=True, n_threads=2, verbose=False)
        self._generated: dict[tuple, tuple[list[int], list[np.ndarray]]] = {}

    def _last_row(self) -> np.ndarray:
        """The logits of the last `eval`'s last token (the only row it asks for)."""
        return np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.llm.n_vocab(),)).copy()

    def generate(self, prompt: list[int], max_tokens: int) -> tuple[list[int], list[np.ndarray]]:
        """The tokens, and the logits each was picked from (computed once per prompt)."""
        key = (tuple(prompt), max_tokens)
        if key not in self._generated:
            self.llm.reset()
            self.llm.eval(prompt)
            tokens, rows = [], []
            while len(tokens) < max_tokens:
                rows.append(self._last_row())
                tokens.append(int(rows[-1].argmax()))
                if llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, tokens[-1]):
                    break
                self.llm.eval([tokens[-1]])
            self._generated[key] = (tokens, rows)
        return self._generated[key]

    def batched_row(self, tokens: list[int]) -> np.ndarray:
        """The logits after `tokens`, decoded as one batch (as a verifier decodes)."""
        self.llm.reset()
        self.llm.eval(tokens)
        return self._last_row()

    def close(self) -> None:
        self.llm.close()


LEADING = 32  # the leading logits whose shift between the two decode paths bounds a tie


def check_greedy_output(reference: ReferenceGreedy, prompt: list[int], tokens: list[int], max_tokens: int) -> str:
    """ "same" when `tokens` are the reference's greedy output; "tie" when they part where the reference
    itself shows a genuine tie; else the assertion fails.

    A tie, shown by the reference alone: where the outputs part, the engine's token is among the
    reference's leading ones, and its margin behind the reference's token is smaller than the spread by
    which decoding prompt + output so far as one batch (as a verifier does) instead of one token at a time
    shifts the leading logits against each other at that very position; batching alone can then flip the
    argmax. (Not only to the runner-up: on an AVX2 Xeon without AVX-512 the rag prompt parts at token 9 to
    the reference's third, 0.438 behind, where batching shifts the leading logits by up to 0.689.)"""
    expected, rows = reference.generate(prompt, max_tokens)
    at = next((i for i, (a, b) in enumerate(zip(expected, tokens)) if a != b), None)
    if at is None:
        assert tokens == expected, (len(tokens), len(expected))  # same tokens, same length
        return "same"
    one_by_one = rows[at]
    batched = reference.batched_row(prompt + expected[:at])
    leading = np.argsort(one_by_one)[-LEADING:]
    shift = one_by_one[leading] - batched[leading]
    margin = float(one_by_one[expected[at]] - one_by_one[tokens[at]])
    evidence = (
        f"parted at {at}: reference {expected[at]}, engine {tokens[at]}, margin {margin:.4f}, "
        f"batching shifts the leading logits by up to {shift.max() - shift.min():.4f}"
    )
    assert tokens[at] in leading.tolist(), evidence + " (the engine's token is not among the reference's leading ones)"
    assert margin < shift.max() - shift.min(), evidence
    return "tie"


@pytest.fixture(scope="module")
def tiny_engine():
    with PythonEngine(context_size=512, threads=2) as engine:
        yield engine


@pytest.fixture(scope="module")
def reference_tiny(tiny_dir):
    reference = ReferenceGreedy(tiny_dir / "tiny-target.gguf", n_ctx=512)
    yield reference
    reference.close()


def test_baseline_generates_max_tokens_with_timings(tiny_engine, tiny_dir):
    seen = []
    m = tiny_engine.measure(
        SpecConfig(tiny_dir / "tiny-target.gguf"), TINY_MIX, max_tokens=24, on_prompt=lambda i, r: seen.append(i)
    )
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
def test_speculative_output_equals_the_baseline(tiny_engine, tiny_dir, reference_tiny, spec_type, draft, params):
    """Speculation must not change the greedy output: the baseline and the speculative output each equal
    llama-cpp-python's own greedy generation (F32 weights: a tie the reference can show is not expected)."""
    target = tiny_dir / "tiny-target.gguf"
    baseline = tiny_engine.measure(SpecConfig(target), TINY_MIX, max_tokens=40)
    config = SpecConfig(target, spec_type, tiny_dir / draft if draft else None, params)
    m = tiny_engine.measure(config, TINY_MIX, max_tokens=40)
    assert m.n_drafted > 0
    for prompt, base, spec in zip(TINY_MIX, baseline.results, m.results):
        tokens = tiny_engine.prompt_tokens(target, prompt, 40)
        assert check_greedy_output(reference_tiny, tokens, base.tokens, 40) == "same", prompt.id
        assert check_greedy_output(reference_tiny, tokens, spec.tokens, 40) == "same", prompt.id
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
    """Gemma Q4_K_M on CPU: the baseline is llama-cpp-python's greedy output, and a speculative output is
    too, or parts from it only at a tie the reference shows (quantized kernels batch differently)."""
    mix = load_prompt_mix().take(per_category=1, categories=["rag", "summarization", "coding"])
    reference = ReferenceGreedy(gemma_path, n_ctx=2048)
    try:
        with PythonEngine(context_size=2048) as engine:
            baseline = engine.measure(SpecConfig(gemma_path), mix, max_tokens=24)
            assert baseline.mix_tok_s > 0
            prompts = [engine.prompt_tokens(gemma_path, prompt, 24) for prompt in mix]
            for tokens, result in zip(prompts, baseline.results):  # its prompt batches as the engine's do not
                assert check_greedy_output(reference, tokens, result.tokens, 24) in ("same", "tie"), result.prompt_id
            for config in (
                SpecConfig(gemma_path, "ngram-simple", params={"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}),
                SpecConfig(gemma_path, "draft-simple", gemma_path, {"draft_n_max": 3}),
            ):
                m = engine.measure(config, mix, max_tokens=24)
                assert m.n_drafted > 0, config.describe()
                for tokens, result in zip(prompts, m.results):
                    check_greedy_output(reference, tokens, result.tokens, 24)  # "same", or "tie" as the reference shows
    finally:
        reference.close()
