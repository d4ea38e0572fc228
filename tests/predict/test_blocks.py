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
from autotune.errors import TrialFailure
from autotune.gguf.info import read_gguf_info
from autotune.predict.block_cost import block_rows, sample_trees
from autotune.predict.block_drafts import BlockDraft, BlockPlan, other_quant
from autotune.predict.blocks import DraftBlocks, layer_inputs, replay_linear, replay_tree
from autotune.predict.target import measure_target
from autotune.predict.trajectory import Trajectories
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf
from autotune.testing.dspark_fixtures import (
    MIX,
    TRAINING_TEXTS,
    bigram_table,
    greedy_continuations,
    require_dspark_symbols,
    write_bigram_dspark_draft,
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
        "confidence": tiny_gguf.write_dspark_draft(
            root / "confidence.gguf", target_path=target, confidence_head=True, seed=4
        ),
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
    return Trajectories.from_measurement(
        str(target), "python", baseline, prompt_tokens, MAX_TOKENS, engine.model(target).is_eog
    )


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


@pytest.mark.parametrize(
    "spec_type, draft, params",
    CONFIGS,
    ids=[f"{t}-{d}-{'-'.join(f'{k}{v}' for k, v in p.items())}" for t, d, p in CONFIGS],
)
def test_replayed_counts_equal_the_in_process_engines(engine, models, trajectories, spec_type, draft, params):
    config = SpecConfig(models["target"], spec_type, models[draft], params)
    measured = engine.measure(config, MIX, max_tokens=MAX_TOKENS)
    pair = engine.dflash_pair(config)
    n_max = int(config.value("draft_n_max"))
    [blocks] = DraftBlocks.record(
        pair,
        trajectories,
        spec_type=spec_type,
        n_maxes=[n_max],
        p_min=float(config.value("draft_p_min")) > 0,
        confidence=spec_type == "draft-dspark",
        candidates=[n_max] if params.get("dspark_pctree") else [],
    ).values()
    if params.get("dspark_pctree"):
        replayed = replay_tree(blocks, config, pair.markov(), trajectories)
    else:
        replayed = replay_linear(blocks, config, trajectories)
    got = (replayed.drafted, replayed.accepted, replayed.verify_steps)
    assert got == (measured.n_drafted, measured.n_accepted, sum(r.n_verify_steps for r in measured.results))
    assert measured.n_drafted > 0


@pytest.fixture(scope="module")
def qwen3_vocab_pair(tmp_path_factory) -> dict[str, Path]:
    """The fixture pair at Qwen3's 151,936-token vocabulary: PCTree reads 256 candidates of each row."""
    return write_qwen3_pair(tmp_path_factory.mktemp("qwen3-vocab"), ctx=512)


@pytest.mark.parametrize(
    "spec_type, draft, params",
    [
        ("draft-dspark", "dspark", {"draft_n_max": 6}),
        ("draft-dflash", "dflash", {"draft_n_max": 5, "draft_p_min": 0.05}),
        (
            "draft-dspark",
            "dspark",
            {"draft_n_max": 6, "dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 16},
        ),
    ],
    ids=["dspark-n6", "dflash-n5-p0.05", "pctree-k3-n16"],
)
def test_at_qwen3s_vocabulary_too(engine, qwen3_vocab_pair, spec_type, draft, params):
    target = qwen3_vocab_pair["target"]
    baseline = engine.measure(SpecConfig(target), MIX, max_tokens=24)
    trajectories = Trajectories.from_measurement(
        str(target),
        "python",
        baseline,
        [engine.prompt_tokens(target, p, 24) for p in MIX],
        24,
        engine.model(target).is_eog,
    )
    config = SpecConfig(target, spec_type, qwen3_vocab_pair[draft], params)
    measured = engine.measure(config, MIX, max_tokens=24)
    pair = engine.dflash_pair(config)
    n_max = params["draft_n_max"]
    [blocks] = DraftBlocks.record(
        pair,
        trajectories,
        spec_type=spec_type,
        n_maxes=[n_max],
        p_min="draft_p_min" in params,
        candidates=[n_max] if params.get("dspark_pctree") else [],
    ).values()
    replayed = (
        replay_tree(blocks, config, pair.markov(), trajectories)
        if params.get("dspark_pctree")
        else replay_linear(blocks, config, trajectories)
    )
    assert (replayed.drafted, replayed.accepted) == (measured.n_drafted, measured.n_accepted)
    assert replayed.verify_steps == sum(r.n_verify_steps for r in measured.results) > 0


def _counts(measurement) -> tuple[int, int, int]:
    return measurement.n_drafted, measurement.n_accepted, sum(r.n_verify_steps for r in measurement.results)


def test_a_target_model_predicts_dspark_and_pctree_with_the_engines_counts(engine, models, trajectories):
    """measure_target records every block size a plan allows in one walk and replays each configuration
    with the engine's counts; the step costs of blocks, injections and trees are measured."""
    target, draft = models["target"], models["bigram"]
    baseline = engine.measure(SpecConfig(target), MIX, max_tokens=MAX_TOKENS)
    plan = BlockPlan("draft-dspark", n_maxes=(2, 3, 4, 6), pctree=True, p_min=False, tree_k=3, tree_n=12)
    notes: list[str] = []
    model = measure_target(
        engine,
        target,
        baseline,
        MIX,
        arbiter="python",
        max_tokens=MAX_TOKENS,
        drafts=[],
        chain_length=3,
        block_drafts=[(plan, draft)],
        note=notes.append,
    )
    assert any("blocks along the trajectories (n_max 2, 3, 4:" in n for n in notes), notes  # its block gives 4
    for params in (
        {"draft_n_max": 2},
        {"draft_n_max": 6},
        {"draft_n_max": 3, "dspark_pctree": True, "dspark_pctree_k": 2, "dspark_pctree_n": 6},
        {"draft_n_max": 4, "dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 12},
    ):
        config = SpecConfig(target, "draft-dspark", draft, params)
        predicted = model.prediction(config)
        assert (predicted.replay.drafted, predicted.replay.accepted, predicted.replay.verify_steps) == _counts(
            engine.measure(config, MIX, max_tokens=MAX_TOKENS)
        ), params
        assert predicted.tok_s > 0
    cost = model.cost
    assert cost.blocks[draft.name].sizes[-1] == cost.injects[draft.name].sizes[-1] == 5  # the draft's 4, + 1
    trees = cost.trees[draft.name]
    assert trees.sizes[-1] == 13 and all(ms > 0 for row in trees.ms for ms in row)  # up to n = 12 nodes + the root
    assert cost.tree_builds[draft.name].sizes == trees.sizes  # the in-process arbiter builds its trees in Python


def test_pctree_candidates_beyond_the_budget_are_not_predicted_and_said(engine, models, trajectories):
    target, draft = models["target"], models["bigram"]
    config = SpecConfig(target, "draft-dspark", draft)
    pair = engine.dflash_pair(config)
    positions = sum(len(t.tokens) for t in trajectories.prompts)
    plan = BlockPlan("draft-dspark", n_maxes=(2, 4), pctree=True, p_min=False, tree_k=2, tree_n=8)
    recorded, note = BlockDraft.record(
        pair, plan, trajectories, budget=positions * 5 * 256 * 8
    )  # 2 rows fit, 2 + 4 not
    assert note is not None and "draft_n_max 4..4 is not predicted" in note
    tree = {"dspark_pctree": True, "dspark_pctree_k": 2, "dspark_pctree_n": 8}
    assert (
        recorded.replay(SpecConfig(target, "draft-dspark", draft, {"draft_n_max": 2, **tree}), trajectories).drafted > 0
    )
    with pytest.raises(TrialFailure, match="candidates of this block size were not kept"):
        recorded.replay(SpecConfig(target, "draft-dspark", draft, {"draft_n_max": 4, **tree}), trajectories)
    assert recorded.replay(SpecConfig(target, "draft-dspark", draft, {"draft_n_max": 4}), trajectories).drafted > 0


def test_sampled_trees_are_real_trees_of_every_grid_size(engine, models):
    target, draft = models["target"], models["bigram"]
    pair = engine.dflash_pair(SpecConfig(target, "draft-dspark", draft))
    fill = list(range(3, 100))
    rows = block_rows(pair, layer_inputs(pair, fill[:40]), fill, spec_type="draft-dspark", depth=32)
    assert rows.shape == (4, pair.target.model.n_vocab)  # the bigram draft's block: 4 rows, anchor first
    trees = sample_trees(rows, fill[32], pair.markov(), k=3, n=16, max_leaves=pair.target.n_seq_max)
    sizes = [len(t) for t in trees]
    assert sizes == sorted(set(sizes)) and sizes[-1] == 17
    assert max(len(t.sequences()[0]) for t in trees) > 1  # more than one leaf: a tree, not a chain


def test_another_quant_of_a_draft_takes_its_blocks_where_they_agree_and_is_recorded_where_they_do_not(
    engine, models, trajectories, tmp_path
):
    """The same DSpark draft in F16 is another quant of the F32 one: it takes the F32 blocks after a check at a
    sample, and its replayed counts are still what the engine measures with the F16 file; a draft of other
    weights whose header is alike but for its quant fails the check and is recorded on its own. Each keeps
    its own step costs."""
    target = models["target"]
    f32 = models["dspark"]
    f16 = tiny_gguf.write_dspark_draft(tmp_path / "dspark-f16.gguf", target_path=target, f16=True)
    stranger = tiny_gguf.write_dspark_draft(tmp_path / "stranger-f16.gguf", target_path=target, f16=True, seed=9)
    assert read_gguf_info(f16).quant != read_gguf_info(f32).quant
    assert other_quant(read_gguf_info(f32), read_gguf_info(f16)) and other_quant(
        read_gguf_info(f32), read_gguf_info(stranger)
    )
    baseline = engine.measure(SpecConfig(target), MIX, max_tokens=MAX_TOKENS)
    plan = BlockPlan("draft-dspark", n_maxes=(2, 3), pctree=False, p_min=False)
    notes: list[str] = []
    model = measure_target(
        engine,
        target,
        baseline,
        MIX,
        arbiter="python",
        max_tokens=MAX_TOKENS,
        drafts=[],
        chain_length=3,
        block_drafts=[(plan, f32), (plan, f16), (plan, stranger)],
        note=notes.append,
    )
    shared = model.block_drafts[("draft-dspark", f16.name)]
    assert shared.shared_from is not None and shared.shared_from[0] == f32.name and shared.shared_from[1] >= 0.99
    assert any(n.startswith(f"{f16.name}'s draft-dspark blocks are {f32.name}'s (another quant of it)") for n in notes)
    own = model.block_drafts[("draft-dspark", stranger.name)]
    assert own.shared_from is None and any(
        n.startswith(f"recorded {stranger.name}'s draft-dspark blocks") for n in notes
    )
    assert shared.draft_decodes < model.block_drafts[("draft-dspark", f32.name)].draft_decodes  # a sample only
    for draft in (f16, stranger):
        for n_max in plan.n_maxes:
            config = SpecConfig(target, "draft-dspark", draft, {"draft_n_max": n_max})
            predicted = model.prediction(config).replay
            assert (predicted.drafted, predicted.accepted, predicted.verify_steps) == _counts(
                engine.measure(config, MIX, max_tokens=MAX_TOKENS)
            ), (draft.name, n_max)
    assert {f32.name, f16.name, stranger.name} <= set(model.cost.blocks)  # each quant's cost is its own
