"""Both engines over the same configurations, interleaved: the table fidelity.py and spec_types.py print."""

from __future__ import annotations

import statistics

from scipy import stats

from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.measure.stats import ci95
from autotune.spec.config import SpecConfig


def mean_ci(values: list[float]) -> str:
    """`mean ±half-width` of the 95% t interval."""
    mean = statistics.mean(values)
    interval = ci95(values)
    return f"{mean:7.1f}" if interval is None else f"{mean:7.1f} ±{(interval[1] - interval[0]) / 2:5.1f}"


def compare(name: str, configs: list[SpecConfig], mix, max_tokens: int, rounds: int, context: int) -> list[float]:
    """Interleave both engines over `configs`; print the table; return the in-process ÷ server ratios."""
    python = PythonEngine(context_size=context)
    server = ServerEngine(context_size=context)
    samples: dict[tuple[str, int], list[float]] = {}
    counts: dict[tuple[str, int], tuple[int, int]] = {}
    for config in configs:
        python.prepare(config, mix, max_tokens=max_tokens)
        server.prepare(config, mix, max_tokens=max_tokens)
    for _ in range(rounds):
        for index, config in enumerate(configs):
            for engine in (python, server):
                measured = engine.measure(config, mix, max_tokens=max_tokens)
                samples.setdefault((engine.name, index), []).append(measured.mix_tok_s)
                counts[(engine.name, index)] = (measured.n_drafted, measured.n_accepted)
    python.close()
    server.close()
    print(
        f"\n{name}: {len(mix)} prompts x {max_tokens} tokens, {rounds} interleaved rounds, "
        f"{python.runtime.n_threads} threads both"
    )
    print(
        f"  {'configuration':<44} {'in-process tok/s':>17} {'llama-server tok/s':>18} {'ratio':>6} "
        f"{'speedup py':>10} {'speedup srv':>11}  drafted/accepted py | srv"
    )
    means = {key: statistics.mean(values) for key, values in samples.items()}
    ratios = []
    for index, config in enumerate(configs):
        ratio = means[("python", index)] / means[("server", index)]
        ratios.append(ratio)
        speedups = [means[(e, index)] / means[(e, 0)] for e in ("python", "server")]
        print(
            f"  {config.describe()[:44]:<44} {mean_ci(samples[('python', index)]):>17} "
            f"{mean_ci(samples[('server', index)]):>18} {ratio:6.3f} {speedups[0]:9.2f}x {speedups[1]:10.2f}x  "
            f"{counts[('python', index)]} | {counts[('server', index)]}"
            f"{'' if counts[('python', index)] == counts[('server', index)] else '  COUNTS DIFFER'}"
        )
    rho = stats.spearmanr(
        [means[("python", i)] for i in range(len(configs))], [means[("server", i)] for i in range(len(configs))]
    ).statistic
    print(f"  Spearman (tok/s ranks, python vs server): {rho:.3f}")
    return ratios
