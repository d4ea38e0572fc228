"""Benchmark: the in-process engine against a real llama-server on Gemma 3 270M (issue 3's figures).

For each configuration, both engines measure the same prompts, interleaved, `--rounds` times:
- in-process tok/s / server tok/s for baseline, ngram-simple and draft-simple (target 0.95-1.05);
- Spearman rank correlation of the two engines over all configurations (target >= 0.8);
- the server's start-up time per trial as a share of the trial's wall time.

Run: python examples/benchmarks/engines.py [--max-tokens 64] [--rounds 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from scipy import stats

from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.measure.prompts import load_prompt_mix
from autotune.models.files import resolve_model_files
from autotune.spec.config import SpecConfig
from autotune.spec.space import load_model_space


def configs(target: Path) -> list[SpecConfig]:
    def ngram(n: int, m: int) -> SpecConfig:
        return SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": n, "ngram_simple_size_m": m})

    def self_draft(n_max: int) -> SpecConfig:
        return SpecConfig(target, "draft-simple", target, {"draft_n_max": n_max})

    return [
        SpecConfig(target),
        ngram(1, 4),
        ngram(2, 8),
        ngram(3, 16),
        ngram(4, 32),
        self_draft(2),
        self_draft(4),
        self_draft(8),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    space = load_model_space("gemma3-270m")
    files = resolve_model_files(space, Path(tempfile.gettempdir()) / "autotune-bench-models")
    mix = load_prompt_mix().take(per_category=1)
    ctx = space.model.context_size
    python = PythonEngine(context_size=ctx, threads=None)
    server = ServerEngine(context_size=ctx, threads=python.runtime.threads)
    print(
        f"Gemma 3 270M Q4_K_M, {python.runtime.n_threads} threads, {len(mix)} prompts x {args.max_tokens} tokens, "
        f"{args.rounds} rounds; server: {server.build_info}"
    )
    tok_s: dict[str, dict[str, list[float]]] = {}
    startup_share = []
    for _ in range(args.rounds):
        for config in configs(files.target):
            row = tok_s.setdefault(config.describe(), {"python": [], "server": []})
            row["python"].append(python.measure(config, mix, max_tokens=args.max_tokens).mix_tok_s)
            started = time.perf_counter()
            measured = server.measure(config, mix, max_tokens=args.max_tokens)
            wall_ms = (time.perf_counter() - started) * 1000
            row["server"].append(measured.mix_tok_s)
            startup_share.append(measured.startup_ms / wall_ms)
    print(f"\n{'configuration':<40} {'python':>8} {'server':>8} {'ratio':>6}")
    means = []
    for label, row in tok_s.items():
        p, s = sum(row["python"]) / args.rounds, sum(row["server"]) / args.rounds
        means.append((p, s))
        print(f"{label:<40} {p:8.1f} {s:8.1f} {p / s:6.3f}")
    rho = stats.spearmanr([m[0] for m in means], [m[1] for m in means]).statistic
    print(f"\nSpearman rank correlation over {len(means)} configurations: {rho:.3f}")
    print(
        f"server start-up share of a trial's wall time: mean {100 * sum(startup_share) / len(startup_share):.1f}%, "
        f"max {100 * max(startup_share):.1f}%"
    )
    python.close()
    server.close()


if __name__ == "__main__":
    main()
