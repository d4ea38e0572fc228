"""DFlash, DSpark and PCTree replayed from recorded blocks give the counts the in-process engine measures.

The tiny qwen3 target and its DSpark/DFlash drafts are written here (tiny_gguf, dspark_fixtures); the
trajectory is the in-process baseline's output, and every configuration is also run by the in-process
engine (autotune.engines.dflash.drafter), whose drafted / accepted / verify-step counts the replay
must equal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engines.python import PythonEngine
from autotune.predict.blocks import DraftBlocks, replay_tree
from autotune.predict.replay import replay
from autotune.predict.trajectory import Trajectories
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf
from autotune.testing.dspark_fixtures import (
    MIX, TRAINING_TEXTS, bigram_table, greedy_continuations, require_dspark_symbols, write_bigram_dspark_draft,
    write_qwen3_pair,
)

MAX_TOKENS = 40
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def dspark_symbols():
    require_dspark_symbols()


@pytest.fixture(scope="module")
def models(tiny_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("block-drafts")
    target = tiny_dir / "tiny-target.gguf"
    successors = bigram_table(greedy_continuations(target, TRAINING_TEXTS, 64))
    return {
        "target": target,
        "dspark": tiny_dir / "tiny-dspark.gguf",
        "bigram": write_bigram_dspark_draft(root / "bigram.gguf", target, successors),
        "confidence": tiny_gguf.write_dspark_draft(root / "confidence.gguf", target_path=target, confidence_head=True,
                                                   seed=4),
        "dflash": tiny_gguf.write_dspark_draft(root / "dflash.gguf", target_path=target, markov_rank=0, seed=5),
    }


@pytest.fixture(scope="module")
def engine():
    with PythonEngine(context_size=512, threads=2) as engine:
        yield engine


@pytest.fixture(scope="module")
def trajectories(engine, models) -> Trajectories:
    target = models["target"]
    baseline = engine.measure(SpecConfig(target), MIX, max_tokens=MAX_TOKENS)
    prompt_tokens = [engine.prompt_tokens(target, p, MAX_TOKENS) for p in MIX]
    return Trajectories.from_measurement(str(target), "python", baseline, prompt_tokens, MAX_TOKENS,
                                         engine.model(target).is_eog)


CONFIGS = [
    ("draft-dspark", "dspark", {"draft_n_max": 3}),
    ("draft-dspark", "dspark", {"draft_n_max": 5}),
    ("draft-dspark", "bigram", {"draft_n_max": 4}),
    ("draft-dspark", "confidence", {"draft_n_max": 4, "draft_p_min": 0.5}),
    ("draft-dflash", "dflash", {"draft_n_max": 4, "draft_p_min": 0.3}),
    ("draft-dflash", "dflash", {"draft_n_max": 6, "draft_n_min": 2}),
    ("draft-dspark", "bigram", {"draft_n_max": 4, "dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 16}),
    ("draft-dspark", "dspark", {"draft_n_max": 5, "dspark_pctree": True, "dspark_pctree_k": 2, "dspark_pctree_n": 8}),
    ("draft-dspark", "bigram", {"draft_n_max": 4, "dspark_pctree": True, "dspark_pctree_k": 4, "dspark_pctree_n": 22}),
]


@pytest.mark.parametrize("spec_type, draft, params", CONFIGS,
                         ids=[f"{t}-{d}-{'-'.join(f'{k}{v}' for k, v in p.items())}" for t, d, p in CONFIGS])
def test_replayed_counts_equal_the_in_process_engines(engine, models, trajectories, spec_type, draft, params):
    config = SpecConfig(models["target"], spec_type, models[draft], params)
    measured = engine.measure(config, MIX, max_tokens=MAX_TOKENS)
    pair = engine._dflash_pair(config)
    blocks = DraftBlocks.record(pair, trajectories, spec_type=spec_type, n_max=int(config.value("draft_n_max")),
                                confidence=spec_type == "draft-dspark" and float(config.value("draft_p_min")) > 0,
                                candidates=bool(params.get("dspark_pctree")))
    if params.get("dspark_pctree"):
        replayed = replay_tree(blocks, config, pair.markov(), trajectories)
    else:
        replayed = replay(blocks.drafter(config), trajectories)
    got = (replayed.drafted, replayed.accepted, replayed.verify_steps)
    assert got == (measured.n_drafted, measured.n_accepted, sum(r.n_verify_steps for r in measured.results))
    assert measured.n_drafted > 0


@pytest.fixture(scope="module")
def qwen3_vocab_pair(tmp_path_factory) -> dict[str, Path]:
    """The fixture pair at Qwen3's 151,936-token vocabulary: PCTree reads 256 candidates of each row."""
    return write_qwen3_pair(tmp_path_factory.mktemp("qwen3-vocab"), ctx=512)


@pytest.mark.parametrize("spec_type, draft, params", [
    ("draft-dspark", "dspark", {"draft_n_max": 6}),
    ("draft-dflash", "dflash", {"draft_n_max": 5, "draft_p_min": 0.05}),
    ("draft-dspark", "dspark", {"draft_n_max": 6, "dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 16}),
], ids=["dspark-n6", "dflash-n5-p0.05", "pctree-k3-n16"])
def test_at_qwen3s_vocabulary_too(engine, qwen3_vocab_pair, spec_type, draft, params):
    target = qwen3_vocab_pair["target"]
    baseline = engine.measure(SpecConfig(target), MIX, max_tokens=24)
    trajectories = Trajectories.from_measurement(str(target), "python", baseline,
                                                 [engine.prompt_tokens(target, p, 24) for p in MIX], 24,
                                                 engine.model(target).is_eog)
    config = SpecConfig(target, spec_type, qwen3_vocab_pair[draft], params)
    measured = engine.measure(config, MIX, max_tokens=24)
    pair = engine._dflash_pair(config)
    blocks = DraftBlocks.record(pair, trajectories, spec_type=spec_type, n_max=params["draft_n_max"],
                                candidates=bool(params.get("dspark_pctree")))
    replayed = (replay_tree(blocks, config, pair.markov(), trajectories) if params.get("dspark_pctree")
                else replay(blocks.drafter(config), trajectories))
    assert (replayed.drafted, replayed.accepted) == (measured.n_drafted, measured.n_accepted)
    assert replayed.verify_steps == sum(r.n_verify_steps for r in measured.results) > 0
