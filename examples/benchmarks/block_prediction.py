"""Predicted against measured speedup for DFlash, DSpark and PCTree (issue 25), on the fixture pairs.

For each fixture the in-process engine (the arbiter here: the PCTree fork's llama-server is not at
hand, and mainline's runs no trees) measures the baseline and `--spec-default`; `measure_target` then
records the drafts' blocks for every configuration's n_max and measures the step costs (target
batches, draft blocks, feature injection, tree verifies); every configuration is predicted, then
measured with the baseline in interleaved rounds. Prints per configuration: replayed and measured
drafted/accepted/verify steps, predicted and measured speedup (mean over rounds, 95% interval), the
error, and the host time of one prediction; then the setup times, median |error| and Spearman's rank
correlation. The calibration is the one a search starts with (baseline and `--spec-default`).

What the in-process PCTree pays and the cost model does not charge: building each tree in Python
(llama-server's fork does it in C++), which the per-step calibration term absorbs only in part.

    python examples/benchmarks/block_prediction.py [--max-tokens 48] [--rounds 3]

Run it on an otherwise idle machine: figures move ±15% between runs on 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import stats

from autotune.engines.python import PythonEngine
from autotune.measure.stats import ci95
from autotune.predict.block_drafts import BlockPlan
from autotune.predict.target import measure_target
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config
from autotune.testing import tiny_gguf
from autotune.testing.dspark_fixtures import (
    MIX,
    TRAINING_TEXTS,
    bigram_table,
    greedy_continuations,
    write_bigram_dspark_draft,
    write_qwen3_pair,
)

CONTEXT = 1024


def configurations(files: dict[str, Path]) -> list[SpecConfig]:
    target = files["target"]

    def spec(spec_type: str, draft: str, **params) -> SpecConfig:
        return SpecConfig(target, spec_type, files[draft], params)

    return [
        spec("draft-dspark", "dspark", draft_n_max=2),
        spec("draft-dspark", "dspark", draft_n_max=3),
        spec("draft-dspark", "dspark", draft_n_max=4),
        spec("draft-dflash", "dflash", draft_n_max=3),
        spec("draft-dflash", "dflash", draft_n_max=3, draft_p_min=0.3),
        spec("draft-dspark", "dspark", draft_n_max=4, dspark_pctree=True, dspark_pctree_k=2, dspark_pctree_n=8),
        spec("draft-dspark", "dspark", draft_n_max=4, dspark_pctree=True, dspark_pctree_k=3, dspark_pctree_n=16),
        spec("draft-dspark", "dspark", draft_n_max=4, dspark_pctree=True, dspark_pctree_k=4, dspark_pctree_n=22),
    ]


def plans(candidates: list[SpecConfig]) -> list[tuple[BlockPlan, Path]]:
    """One recording plan per (type, draft file): the configurations' n_max values and largest tree."""
    found: dict[tuple[str, Path], list[SpecConfig]] = {}
    for config in candidates:
        found.setdefault((config.spec_type, config.draft), []).append(config)
    out = []
    for (spec_type, draft), configs in found.items():
        trees = [c for c in configs if c.params.get("dspark_pctree")]
        out.append(
            (
                BlockPlan(
                    spec_type,
                    tuple(sorted({int(c.value("draft_n_max")) for c in configs})),
                    bool(trees),
                    any(float(c.value("draft_p_min")) > 0 for c in configs),
                    max((int(c.value("dspark_pctree_k")) for c in trees), default=0),
                    max((int(c.value("dspark_pctree_n")) for c in trees), default=0),
                ),
                draft,
            )
        )
    return out


def run(label: str, files: dict[str, Path], max_tokens: int, rounds: int) -> None:
    target = files["target"]
    candidates = configurations(files)
    with PythonEngine(context_size=CONTEXT, threads=2) as engine:
        for config in candidates:
            engine.prepare(config, MIX, max_tokens=max_tokens)
        started = time.perf_counter()
        baseline = engine.measure(SpecConfig(target), MIX, max_tokens=max_tokens)
        spec_default = engine.measure(spec_default_config(target), MIX, max_tokens=max_tokens)
        model = measure_target(
            engine,
            target,
            baseline,
            MIX,
            arbiter="python",
            max_tokens=max_tokens,
            drafts=[],
            chain_length=3,
            block_drafts=plans(candidates),
            note=lambda text: print(f"  {text}"),
        )
        model.calibrate(
            [
                (SpecConfig(target), [r.decode_ms for r in baseline.results]),
                (spec_default_config(target), [r.decode_ms for r in spec_default.results]),
            ]
        )
        setup_s = time.perf_counter() - started
        predictions, predict_ms = [], []
        for config in candidates:
            started = time.perf_counter()
            predictions.append(model.prediction(config))
            predict_ms.append((time.perf_counter() - started) * 1000)
        speedups: dict[int, list[float]] = {i: [] for i in range(len(candidates))}
        counts: dict[int, tuple[int, int, int]] = {}
        for _ in range(rounds):
            base = engine.measure(SpecConfig(target), MIX, max_tokens=max_tokens)
            for index, config in enumerate(candidates):
                measured = engine.measure(config, MIX, max_tokens=max_tokens)
                speedups[index].append(measured.mix_tok_s / base.mix_tok_s)
                counts[index] = (
                    measured.n_drafted,
                    measured.n_accepted,
                    sum(r.n_verify_steps for r in measured.results),
                )
    print(
        f"\n{label}: {len(MIX)} prompts x {max_tokens} tokens, {rounds} interleaved rounds in-process "
        f"(setup {setup_s:.1f} s); calibration scale {model.calibration.scale:.3f}, "
        f"per step {model.calibration.per_step_ms:.3f} ms"
    )
    print(
        f"  {'configuration':<44} {'replayed d/a/s':>15} {'measured d/a/s':>15} {'pred':>6} "
        f"{'measured [95% CI]':>19} {'error':>7} {'ms':>6}"
    )
    errors, predicted, means = [], [], []
    for index, config in enumerate(candidates):
        mean = float(np.mean(speedups[index]))
        low, high = ci95(speedups[index]) or (mean, mean)
        guess = predictions[index].speedup or 0.0
        errors.append(abs(guess / mean - 1))
        predicted.append(guess)
        means.append(mean)
        replayed = predictions[index].replay
        ours = (replayed.drafted, replayed.accepted, replayed.verify_steps)
        flag = "" if ours == counts[index] else "  COUNTS DIFFER"
        print(
            f"  {config.describe()[:44]:<44} {'/'.join(map(str, ours)):>15} {'/'.join(map(str, counts[index])):>15} "
            f"{guess:6.2f} {mean:6.2f} [{low:.2f}-{high:.2f}] {guess / mean - 1:+7.1%} {predict_ms[index]:6.1f}{flag}"
        )
    rho = stats.spearmanr(predicted, means).statistic
    print(f"  median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%}, Spearman {rho:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = tiny_gguf.write_qwen3_target(root / "tiny-target.gguf")
        successors = bigram_table(greedy_continuations(target, TRAINING_TEXTS, 64))
        files = {
            "target": target,
            "dspark": write_bigram_dspark_draft(root / "bigram.gguf", target, successors),
            "dflash": tiny_gguf.write_dspark_draft(root / "dflash.gguf", target_path=target, markov_rank=0, seed=5),
        }
        run("tiny target with the bigram DSpark draft (it predicts its target)", files, args.max_tokens, args.rounds)
        (root / "pair").mkdir()
        run(
            "fixture pair at Qwen3's 151,936-token vocabulary (random weights: few drafts accepted)",
            write_qwen3_pair(root / "pair", ctx=CONTEXT),
            args.max_tokens,
            args.rounds,
        )


if __name__ == "__main__":
    main()
