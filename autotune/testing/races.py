"""Race rows built from decode times, for tests of what reads a race (the verdict, nightly's decision,
`best`'s lines): every figure is computed by the race's own paired rule, not written by hand."""

from __future__ import annotations

import numpy as np

from autotune.measure.paired import MIN_EFFECT, Units, paired_speedup
from autotune.measure.stats import ci95
from autotune.study.verdict import RacedConfig

TOKENS = 47  # decode tokens of every prompt


def raced_row(
    label: str,
    role: str,
    decode_ms: list[list[float]],
    *,
    baseline_ms: list[list[float]] | None = None,
    trial: int | None = None,
    target: str = "t.gguf",
    argv: list[str] | None = None,
    significant: bool = False,
) -> RacedConfig:
    """A row whose units are `decode_ms` (per round, per prompt; TOKENS tokens each), paired prompt by
    prompt with `baseline_ms` for its speedup, interval and p-value (none for a baseline)."""
    tokens = [[TOKENS] * len(r) for r in decode_ms]
    samples = [TOKENS * len(r) * 1000.0 / sum(r) for r in decode_ms]
    speedup = None
    if baseline_ms is not None:
        speedup = paired_speedup(
            Units.of(baseline_ms, [[TOKENS] * len(r) for r in baseline_ms]),
            Units.of(decode_ms, tokens),
            pair_by_unit=True,
        )
    mean = float(np.mean(samples))
    return RacedConfig(
        label=label,
        role=role,
        trial=trial,
        target=target,
        argv=argv or [label],
        samples=samples,
        mean_tok_s=mean,
        ci95=ci95(samples) or (mean, mean),
        p_value=None if speedup is None else speedup.p_faster(1 + MIN_EFFECT),
        speedup=None if speedup is None else round(speedup.ratio, 4),
        speedup_ci=None if speedup is None else speedup.interval(),
        significant=significant,
        rounds=len(decode_ms),
        prompts=len(decode_ms[0]),
        decode_ms=decode_ms,
        tokens=tokens,
    )


def scaled(decode_ms: list[list[float]], factor: float, jitter: float = 0.0, seed: int = 0) -> list[list[float]]:
    """`decode_ms` divided by `factor` (a configuration `factor` times as fast), each unit times a random
    1 +- `jitter`."""
    rng = np.random.default_rng(seed)
    return [[float(v / factor * (1 + rng.uniform(-jitter, jitter))) for v in r] for r in decode_ms]
