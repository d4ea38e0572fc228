"""DFlash, DSpark and PCTree replayed from recorded blocks against the in-process engine (issue 25).

On the fixture pair at Qwen3's 151,936-token vocabulary (dspark_fixtures.write_qwen3_pair: random weights,
so drafts are rarely accepted; trees are still built node for node) and on the small-vocabulary bigram
DSpark draft that predicts its target (acceptance that matters), for each configuration it prints:
the counts the in-process engine measured (drafted / accepted / verify steps), the counts replayed from
the blocks recorded along the baseline's trajectory, the host time of recording those blocks (once per
draft file and block size, shared by every configuration of that size) and of replaying one configuration,
and the engine's own measurement time beside them.

Then, on the bigram draft along longer trajectories (`--sample-tokens`, 256): whether a block of n rows
is the first n rows of the largest block (the share of positions whose greedy chains agree, per n: where
they all did, the largest block alone could stand for every size), and the blocks recorded at a sample
of the positions (autotune.predict.block_sample) against the full recording: per sample size, each
configuration's tokens per step with its stated sampling error, and its predicted speedup against the
full recording's (the cost model measured once, by measure_target).

Last, per quant (issue 49): each DSpark/DFlash draft written again with its matrices in F16 (another quant
of the same draft), every block size recorded in full for both quants along the same trajectories: per
size, the share of positions whose greedy chains are the same in both (where it is 99 % or more, a search
takes the first quant's blocks for the second after checking a sample: autotune.predict.block_drafts).

This is a benchmark that prints figures, not a test. Times depend on load: run it on a quiet machine.

Run: python examples/benchmarks/block_replay.py [--max-tokens 32] [--vocab 151936] [--sample-tokens 256]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from autotune.engines.python import PythonEngine
from autotune.measure.prompts import Prompt, PromptMix
from autotune.predict.block_drafts import BlockDraft, BlockPlan
from autotune.predict.blocks import DraftBlocks, replay_linear, replay_tree
from autotune.predict.target import measure_target
from autotune.predict.trajectory import Trajectories
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf
from autotune.testing.dspark_fixtures import (
    MIX,
    QWEN3_VOCAB,
    TRAINING_TEXTS,
    bigram_table,
    greedy_continuations,
    write_bigram_dspark_draft,
    write_qwen3_pair,
)


def configurations(files: dict[str, Path]) -> list[tuple[str, SpecConfig]]:
    target = files["target"]

    def spec(spec_type: str, draft: str, **params) -> SpecConfig:
        return SpecConfig(target, spec_type, files[draft], params)

    return [
        ("dspark n3", spec("draft-dspark", "dspark", draft_n_max=3)),
        ("dspark n6", spec("draft-dspark", "dspark", draft_n_max=6)),
        ("dflash n5 p_min 0.05", spec("draft-dflash", "dflash", draft_n_max=5, draft_p_min=0.05)),
        (
            "pctree k3 n16",
            spec("draft-dspark", "dspark", draft_n_max=6, dspark_pctree=True, dspark_pctree_k=3, dspark_pctree_n=16),
        ),
        (
            "pctree k4 n22",
            spec("draft-dspark", "dspark", draft_n_max=6, dspark_pctree=True, dspark_pctree_k=4, dspark_pctree_n=22),
        ),
        (
            "pctree k2 n8",
            spec("draft-dspark", "dspark", draft_n_max=6, dspark_pctree=True, dspark_pctree_k=2, dspark_pctree_n=8),
        ),
    ]


def run(label: str, files: dict[str, Path], max_tokens: int) -> None:
    target = files["target"]
    with PythonEngine(context_size=1024, threads=2) as engine:
        baseline = engine.measure(SpecConfig(target), MIX, max_tokens=max_tokens)
        trajectories = Trajectories.from_measurement(
            str(target),
            "python",
            baseline,
            [engine.prompt_tokens(target, p, max_tokens) for p in MIX],
            max_tokens,
            engine.model(target).is_eog,
        )
        print(f"\n{label}: {len(MIX.prompts)} prompts x {max_tokens} tokens")
        print(
            f"{'configuration':<22} {'engine d/a/steps':>18} {'replayed d/a/steps':>20} {'equal':>5} "
            f"{'engine s':>8} {'record s':>8} {'replay ms':>9}"
        )
        recorded: dict[tuple, tuple[DraftBlocks, float]] = {}
        for name, config in configurations(files):
            started = time.perf_counter()
            measured = engine.measure(config, MIX, max_tokens=max_tokens)
            engine_s = time.perf_counter() - started
            pair = engine.dflash_pair(config)
            pctree = bool(config.params.get("dspark_pctree"))
            key = (config.spec_type, config.draft, config.value("draft_n_max"), pctree)
            if key not in recorded:
                started = time.perf_counter()
                n_max = int(config.value("draft_n_max"))
                [blocks] = DraftBlocks.record(
                    pair,
                    trajectories,
                    spec_type=config.spec_type,
                    n_maxes=[n_max],
                    p_min=float(config.value("draft_p_min")) > 0,
                    candidates=[n_max] if pctree else [],
                ).values()
                recorded[key] = (blocks, time.perf_counter() - started)
            blocks, record_s = recorded[key]
            started = time.perf_counter()
            replayed = (
                replay_tree(blocks, config, pair.markov(), trajectories)
                if pctree
                else replay_linear(blocks, config, trajectories)
            )
            replay_ms = (time.perf_counter() - started) * 1000
            ours = (replayed.drafted, replayed.accepted, replayed.verify_steps)
            theirs = (measured.n_drafted, measured.n_accepted, sum(r.n_verify_steps for r in measured.results))
            print(
                f"{name:<22} {'/'.join(map(str, theirs)):>18} {'/'.join(map(str, ours)):>20} "
                f"{'yes' if ours == theirs else 'NO':>5} {engine_s:8.2f} {record_s:8.2f} {replay_ms:9.1f}"
            )


#: more prompts than MIX, so that a sample has windows to choose among
LONG_MIX = PromptMix(
    "sample", MIX.prompts + tuple(Prompt(f"t{i}", "training", text) for i, text in enumerate(TRAINING_TEXTS[:3]))
)
SAMPLE_SIZES = (128, 256, 512, 1024)


def truncation(engine: PythonEngine, config: SpecConfig, trajectories: Trajectories, sizes: list[int]) -> None:
    """Per block size n, the share of positions where its chain equals the first n of the largest block's."""
    pair = engine.dflash_pair(config)
    found = DraftBlocks.record(pair, trajectories, spec_type=config.spec_type, n_maxes=sizes)
    largest = found[max(found)]
    for n, blocks in sorted(found.items()):
        same = total = 0
        for key, rows in blocks.blocks.items():
            for short, long in zip(rows, largest.blocks[key]):
                same += short.chain == long.chain[:n]
                total += 1
        print(
            f"  n_max {n}: chain = the largest block's first {n} rows at {same}/{total} positions ({same / total:.1%})"
        )


def sampled_against_full(files: dict[str, Path], max_tokens: int) -> None:
    target, draft = files["target"], files["dspark"]
    plan = BlockPlan("draft-dspark", n_maxes=(1, 2, 3, 4), pctree=True, p_min=False, tree_k=3, tree_n=12)
    with PythonEngine(context_size=1024, threads=2) as engine:
        baseline = engine.measure(SpecConfig(target), LONG_MIX, max_tokens=max_tokens)
        model = measure_target(
            engine,
            target,
            baseline,
            LONG_MIX,
            arbiter="python",
            max_tokens=max_tokens,
            drafts=[],
            chain_length=3,
            block_drafts=[(plan, draft)],
            note=lambda text: None,
        )
        trajectories = model.trajectories
        positions = sum(len(t.tokens) for t in trajectories.prompts)
        print(
            f"\nsampled against full: bigram DSpark draft, {len(LONG_MIX)} prompts x {max_tokens} tokens = "
            f"{positions} positions"
        )
        print("does a shorter block equal the largest one cut short?")
        truncation(engine, SpecConfig(target, "draft-dspark", draft), trajectories, [1, 2, 3, 4])
        configs = [
            SpecConfig(target, "draft-dspark", draft, p)
            for p in (
                {"draft_n_max": 1},
                {"draft_n_max": 2},
                {"draft_n_max": 3},
                {"draft_n_max": 4},
                {"draft_n_max": 4, "dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 12},
            )
        ]
        full = {c.describe(): model.prediction(c) for c in configs}
        pair = engine.dflash_pair(configs[0])
        print(
            f"{'sample':>7} {'record s':>8} {'configuration':<44} {'tok/step':>8} {'± se':>7} {'full':>7} "
            f"{'speedup moves':>13}"
        )
        for size in SAMPLE_SIZES:
            started = time.perf_counter()
            sampled, _ = BlockDraft.record(pair, plan, trajectories, sample_positions=size)
            record_s = time.perf_counter() - started
            model.block_drafts[("draft-dspark", draft.name)] = sampled
            for config in configs:
                ours, theirs = model.prediction(config), full[config.describe()]
                print(
                    f"{size:>7} {record_s:8.2f} {config.describe()[:44]:<44} {ours.replay.tokens_per_step:8.3f} "
                    f"{ours.replay.sampling_error or 0:7.2%} {theirs.replay.tokens_per_step:7.3f} "
                    f"{ours.speedup / theirs.speedup - 1:+13.2%}"
                )


def quants_against_full(target: Path, drafts: dict[str, tuple[str, Path, Path]], max_tokens: int) -> None:
    """Per draft and block size, how often an F16 copy's chain equals the F32 draft's, both recorded in full."""
    with PythonEngine(context_size=1024, threads=2) as engine:
        baseline = engine.measure(SpecConfig(target), LONG_MIX, max_tokens=max_tokens)
        trajectories = Trajectories.from_measurement(
            str(target),
            "python",
            baseline,
            [engine.prompt_tokens(target, p, max_tokens) for p in LONG_MIX],
            max_tokens,
            engine.model(target).is_eog,
        )
        print(f"\nper quant: {len(LONG_MIX)} prompts x {max_tokens} tokens, F16 against F32, every position")
        for name, (spec_type, f32, f16) in drafts.items():
            sizes = [1, 2, 3, 4] if spec_type == "draft-dspark" else [1, 2, 3]
            recorded = []
            for path in (f32, f16):
                config = SpecConfig(target, spec_type, path)
                engine.load(config)  # the pair binds the loaded target and draft
                recorded.append(
                    DraftBlocks.record(engine.dflash_pair(config), trajectories, spec_type=spec_type, n_maxes=sizes)
                )
            for n in sorted(recorded[0]):
                share, compared = recorded[0][n].agreement(recorded[1][n])
                print(f"  {name} n_max {n}: F16 chain = F32 chain at {share:.1%} of {compared} positions")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=QWEN3_VOCAB)
    parser.add_argument("--sample-tokens", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pair").mkdir()
        run(
            f"fixture pair at a {args.vocab}-token vocabulary (random weights)",
            write_qwen3_pair(root / "pair", vocab_size=args.vocab, ctx=1024),
            args.max_tokens,
        )
        target = tiny_gguf.write_qwen3_target(root / "tiny-target.gguf")
        successors = bigram_table(greedy_continuations(target, TRAINING_TEXTS, 64))
        bigram = write_bigram_dspark_draft(root / "bigram.gguf", target, successors)
        dflash = tiny_gguf.write_dspark_draft(root / "dflash.gguf", target_path=target, markov_rank=0, seed=5)
        run(
            "tiny target with the bigram DSpark draft (it predicts its target)",
            {"target": target, "dspark": bigram, "dflash": dflash},
            args.max_tokens,
        )
        sampled_against_full({"target": target, "dspark": bigram}, args.sample_tokens)
        quants_against_full(
            target,
            {
                "bigram DSpark": (
                    "draft-dspark",
                    bigram,
                    write_bigram_dspark_draft(root / "bigram-f16.gguf", target, successors, f16=True),
                ),
                "random DSpark": (
                    "draft-dspark",
                    tiny_gguf.write_dspark_draft(root / "dspark.gguf", target_path=target),
                    tiny_gguf.write_dspark_draft(root / "dspark-f16.gguf", target_path=target, f16=True),
                ),
                "random DFlash": (
                    "draft-dflash",
                    dflash,
                    tiny_gguf.write_dspark_draft(
                        root / "dflash-f16.gguf", target_path=target, markov_rank=0, seed=5, f16=True
                    ),
                ),
            },
            args.sample_tokens,
        )


if __name__ == "__main__":
    main()
