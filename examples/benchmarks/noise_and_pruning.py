"""Benchmark of noise control and pruning on Gemma 3 270M (figures for issue 5's closing note).

(a) the coefficient of variation of the baseline's mix tok/s over `--repeats` back-to-back measurements;
(b) the wall time of a `--trials` study with and without Wilcoxon pruning (same seed, same prompts),
    and whether both find the same best configuration.

Run: python examples/benchmarks/noise_and_pruning.py [--trials 30] [--max-tokens 24] [--repeats 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace

import optuna
from _gemma import gemma_inputs  # noqa: E402  (beside this script)

from autotune.cli.progress import SilentReporter
from autotune.engines.python import PythonEngine
from autotune.search.inputs import runnable_space
from autotune.search.measured import Tuner
from autotune.spec.config import SpecConfig
from autotune.study.best import best_result
from autotune.study.records import TrialRecord


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    options, inputs, mix = gemma_inputs(trials=args.trials, max_tokens=args.max_tokens, seed=7)
    engine = PythonEngine(context_size=inputs.space.model.context_size)
    baseline = SpecConfig(inputs.candidates.targets[0])
    engine.prepare(baseline, mix, max_tokens=args.max_tokens)
    print(f"Gemma 3 270M Q4_K_M, {engine.runtime.n_threads} threads, {len(mix)} prompts x {args.max_tokens} tokens")

    samples = [engine.measure(baseline, mix, max_tokens=args.max_tokens).mix_tok_s for _ in range(args.repeats)]
    cv = statistics.stdev(samples) / statistics.mean(samples)
    print(
        f"\n(a) baseline mix tok/s over {args.repeats} repeats: mean {statistics.mean(samples):.1f}, "
        f"min {min(samples):.1f}, max {max(samples):.1f}, coefficient of variation {100 * cv:.1f}%"
    )

    print(f"\n(b) {args.trials}-trial study, seed 7, with and without pruning")
    runnable = runnable_space(inputs.space, engine, inputs.candidates, SilentReporter())
    for pruning in (True, False):
        settings = replace(options, pruning=pruning).settings("gemma3-270m")
        storage = optuna.storages.RDBStorage(f"sqlite:///{tempfile.mkdtemp()}/bench.db")
        started = time.perf_counter()
        study = Tuner(runnable, inputs.candidates, mix, engine, settings, SilentReporter()).run(storage)
        wall = time.perf_counter() - started
        states = [t.state.name for t in study.trials]
        best = best_result(study)
        print(
            f"  pruning {'on ' if pruning else 'off'}: wall {wall:6.1f} s, {states.count('COMPLETE')} complete, "
            f"{states.count('PRUNED')} pruned, {states.count('FAIL')} failed; best: trial {best.trial.number} "
            f"{TrialRecord.of(best.trial).label} {best.tok_s:.1f} tok/s ({best.speedup:.2f}x)"
        )
    engine.close()


if __name__ == "__main__":
    main()
