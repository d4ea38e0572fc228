"""DFlash, DSpark and PCTree replayed from recorded blocks against the in-process engine (issue 25).

On the fixture pair at Qwen3's 151,936-token vocabulary (dspark_fixtures.write_qwen3_pair: random weights,
so drafts are rarely accepted; trees are still built node for node) and on the small-vocabulary bigram
DSpark draft that predicts its target (acceptance that matters), for each configuration it prints:
the counts the in-process engine measured (drafted / accepted / verify steps), the counts replayed from
the blocks recorded along the baseline's trajectory, the host time of recording those blocks (once per
draft file and block size, shared by every configuration of that size) and of replaying one configuration,
and the engine's own measurement time beside them.

This is a benchmark that prints figures, not a test. Times depend on load: run it on a quiet machine.

Run: python examples/benchmarks/block_replay.py [--max-tokens 32] [--vocab 151936]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from autotune.engines.python import PythonEngine
from autotune.predict.blocks import DraftBlocks, replay_tree
from autotune.predict.replay import replay
from autotune.predict.trajectory import Trajectories
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf
from autotune.testing.dspark_fixtures import (
    MIX, QWEN3_VOCAB, TRAINING_TEXTS, bigram_table, greedy_continuations, write_bigram_dspark_draft, write_qwen3_pair,
)


def configurations(files: dict[str, Path]) -> list[tuple[str, SpecConfig]]:
    target = files["target"]

    def spec(spec_type: str, draft: str, **params) -> SpecConfig:
        return SpecConfig(target, spec_type, files[draft], params)

    return [
        ("dspark n3", spec("draft-dspark", "dspark", draft_n_max=3)),
        ("dspark n6", spec("draft-dspark", "dspark", draft_n_max=6)),
        ("dflash n5 p_min 0.05", spec("draft-dflash", "dflash", draft_n_max=5, draft_p_min=0.05)),
        ("pctree k3 n16", spec("draft-dspark", "dspark", draft_n_max=6, dspark_pctree=True, dspark_pctree_k=3,
                               dspark_pctree_n=16)),
        ("pctree k4 n22", spec("draft-dspark", "dspark", draft_n_max=6, dspark_pctree=True, dspark_pctree_k=4,
                               dspark_pctree_n=22)),
        ("pctree k2 n8", spec("draft-dspark", "dspark", draft_n_max=6, dspark_pctree=True, dspark_pctree_k=2,
                              dspark_pctree_n=8)),
    ]


def run(label: str, files: dict[str, Path], max_tokens: int) -> None:
    target = files["target"]
    with PythonEngine(context_size=1024, threads=2) as engine:
        baseline = engine.measure(SpecConfig(target), MIX, max_tokens=max_tokens)
        trajectories = Trajectories.from_measurement(
            str(target), "python", baseline, [engine.prompt_tokens(target, p, max_tokens) for p in MIX], max_tokens,
            engine.model(target).is_eog)
        print(f"\n{label}: {len(MIX.prompts)} prompts x {max_tokens} tokens")
        print(f"{'configuration':<22} {'engine d/a/steps':>18} {'replayed d/a/steps':>20} {'equal':>5} "
              f"{'engine s':>8} {'record s':>8} {'replay ms':>9}")
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
                [blocks] = DraftBlocks.record(pair, trajectories, spec_type=config.spec_type, n_maxes=[n_max],
                                              p_min=float(config.value("draft_p_min")) > 0,
                                              candidates=[n_max] if pctree else []).values()
                recorded[key] = (blocks, time.perf_counter() - started)
            blocks, record_s = recorded[key]
            started = time.perf_counter()
            replayed = (replay_tree(blocks, config, pair.markov(), trajectories) if pctree
                        else replay(blocks.drafter(config), trajectories))
            replay_ms = (time.perf_counter() - started) * 1000
            ours = (replayed.drafted, replayed.accepted, replayed.verify_steps)
            theirs = (measured.n_drafted, measured.n_accepted, sum(r.n_verify_steps for r in measured.results))
            print(f"{name:<22} {'/'.join(map(str, theirs)):>18} {'/'.join(map(str, ours)):>20} "
                  f"{'yes' if ours == theirs else 'NO':>5} {engine_s:8.2f} {record_s:8.2f} {replay_ms:9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=QWEN3_VOCAB)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pair").mkdir()
        run(f"fixture pair at a {args.vocab}-token vocabulary (random weights)",
            write_qwen3_pair(root / "pair", vocab_size=args.vocab, ctx=1024), args.max_tokens)
        target = tiny_gguf.write_qwen3_target(root / "tiny-target.gguf")
        successors = bigram_table(greedy_continuations(target, TRAINING_TEXTS, 64))
        bigram = write_bigram_dspark_draft(root / "bigram.gguf", target, successors)
        dflash = tiny_gguf.write_dspark_draft(root / "dflash.gguf", target_path=target, markov_rank=0, seed=5)
        run("tiny target with the bigram DSpark draft (it predicts its target)",
            {"target": target, "dspark": bigram, "dflash": dflash}, args.max_tokens)


if __name__ == "__main__":
    main()
