"""Benchmark of in-process DSpark and PCTree on the tiny fixture pair (figures for the DSpark issue).

(a) in-process draft-dspark decode tok/s / llama-server draft-dspark decode tok/s: same target, draft,
    n-max, threads and prompts, configs interleaved round by round, each engine with its own baseline
    (speedup), and both engines' drafted/accepted counts;
(b) PCTree k/n sweep (k 2-4, n 8-32) on the in-process engine: mean accepted length (1 + accepted /
    verify steps), accepted tokens per verify step, acceptance, decode tok/s and speedup, next to
    linear DSpark and the baseline.

Two drafts for the tiny qwen3 target (tiny_gguf.write_qwen3_target): the random-weight DSpark draft of
the test fixtures (tiny_gguf.write_dspark_draft, block 4), and the "bigram" draft (dspark_fixtures),
whose Markov head was set from the target's greedy bigrams on prompts outside the benchmark mix,
so drafts are often but not always right -- what a tree needs to show anything. Figures are medians
over the rounds. Tiny models on a CPU mostly measure per-step overhead, not model compute.

Run: python examples/benchmarks/dspark.py [--max-tokens 64] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.measure.measurement import Measurement
from autotune.measure.prompts import load_prompt_mix
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf
from autotune.testing.dspark_fixtures import (
    bigram_table,
    greedy_continuations,
    write_bigram_dspark_draft,
)

CONTEXT = 1024


def figures(runs: list[Measurement]) -> dict:
    steps = [sum(r.n_verify_steps for r in m.results) for m in runs]
    last = runs[-1]
    return {
        "tok_s": statistics.median(m.mix_tok_s for m in runs),
        "drafted": last.n_drafted,
        "accepted": last.n_accepted,
        "steps": steps[-1],
        "mean_len": last.mean_accepted_length,
        "acceptance": last.acceptance,
    }


def fmt(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-max", type=int, default=4)
    args = parser.parse_args()

    full = load_prompt_mix()
    mix = full.take(per_category=1)
    held_out = [p.text for p in full if p.id not in {q.id for q in mix}]
    root = Path(tempfile.mkdtemp(prefix="autotune-dspark-bench-"))
    target = tiny_gguf.write_qwen3_target(root / "target.gguf", ctx=CONTEXT)
    drafts = {
        "random": tiny_gguf.write_dspark_draft(root / "dspark.gguf", target_path=target),
        "bigram": write_bigram_dspark_draft(
            root / "bigram.gguf", target, bigram_table(greedy_continuations(target, held_out, 64))
        ),
    }
    print(
        f"mix: {len(mix.prompts)} prompts ({', '.join(p.id for p in mix)}), max_tokens {args.max_tokens}, "
        f"threads {args.threads}, rounds {args.rounds}; bigram draft learned from {len(held_out)} other prompts"
    )

    baseline = SpecConfig(target)
    linear = {
        name: SpecConfig(target, "draft-dspark", path, {"draft_n_max": args.n_max}) for name, path in drafts.items()
    }
    python = PythonEngine(context_size=CONTEXT, threads=args.threads)
    server = ServerEngine(context_size=CONTEXT, threads=args.threads)
    try:
        for config in [baseline, *linear.values()]:
            python.prepare(config, mix, max_tokens=args.max_tokens)
        print(f"python engine: {python.build_info}\nserver engine: {server.build_info}\n")

        # (a) the two engines, interleaved
        runs: dict[tuple[str, str], list[Measurement]] = {}
        for _ in range(args.rounds):
            for engine_name, engine in (("python", python), ("server", server)):
                for label, config in [("none", baseline)] + [(f"dspark/{n}", c) for n, c in linear.items()]:
                    runs.setdefault((engine_name, label), []).append(
                        engine.measure(config, mix, max_tokens=args.max_tokens)
                    )
        print(
            f"(a) draft-dspark n_max={args.n_max}: in-process vs llama-server (decode tok/s, median of {args.rounds})"
        )
        print(
            f"{'config':<16}{'python tok/s':>14}{'server tok/s':>14}{'ratio':>8}{'py speedup':>12}{'srv speedup':>12}"
            f"{'py drafted/acc':>16}{'srv drafted/acc':>17}"
        )
        py_base, srv_base = figures(runs[("python", "none")]), figures(runs[("server", "none")])
        for label in ["none"] + [f"dspark/{n}" for n in linear]:
            p, s = figures(runs[("python", label)]), figures(runs[("server", label)])
            print(
                f"{label:<16}{p['tok_s']:>14.1f}{s['tok_s']:>14.1f}{p['tok_s'] / s['tok_s']:>8.2f}"
                f"{p['tok_s'] / py_base['tok_s']:>12.2f}{s['tok_s'] / srv_base['tok_s']:>12.2f}"
                f"{p['drafted']:>9}/{p['accepted']:<6}{s['drafted']:>10}/{s['accepted']:<6}"
            )
        outputs_equal = all(
            [r.tokens for r in runs[("python", f"dspark/{n}")][-1].results]
            == [r.tokens for r in runs[("python", "none")][-1].results]
            for n in linear
        )
        print(f"in-process DSpark output == baseline output: {outputs_equal}\n")

        # (b) PCTree sweep on the in-process engine
        sweep = [(None, None)] + [(k, n) for k in (2, 3, 4) for n in (8, 16, 32)]
        for name, draft in drafts.items():
            configs = {
                (k, n): SpecConfig(
                    target,
                    "draft-dspark",
                    draft,
                    {"draft_n_max": args.n_max}
                    if k is None
                    else {"draft_n_max": args.n_max, "dspark_pctree": True, "dspark_pctree_k": k, "dspark_pctree_n": n},
                )
                for k, n in sweep
            }
            tree_runs: dict = {}
            for _ in range(args.rounds):
                tree_runs.setdefault("none", []).append(python.measure(baseline, mix, max_tokens=args.max_tokens))
                for key, config in configs.items():
                    tree_runs.setdefault(key, []).append(python.measure(config, mix, max_tokens=args.max_tokens))
            base = figures(tree_runs["none"])
            base_tokens = [r.tokens for r in tree_runs["none"][-1].results]
            print(
                f"(b) PCTree sweep, {name} draft, n_max={args.n_max} (in-process; baseline {base['tok_s']:.1f} tok/s)"
            )
            print(
                f"{'setting':<16}{'mean acc len':>13}{'acc/step':>10}{'acceptance':>12}{'drafted':>9}{'steps':>7}"
                f"{'tok/s':>9}{'speedup':>9}{'vs linear':>10}{'== base':>9}"
            )
            lin = figures(tree_runs[(None, None)])
            for key in configs:
                f = figures(tree_runs[key])
                label = "linear" if key == (None, None) else f"k={key[0]} n={key[1]}"
                same = [r.tokens for r in tree_runs[key][-1].results] == base_tokens
                print(
                    f"{label:<16}{fmt(f['mean_len']):>13}{fmt(f['accepted'] / f['steps'] if f['steps'] else None):>10}"
                    f"{fmt(f['acceptance'], '.3f'):>12}{f['drafted']:>9}{f['steps']:>7}{f['tok_s']:>9.1f}"
                    f"{f['tok_s'] / base['tok_s']:>9.2f}{f['tok_s'] / lin['tok_s']:>10.2f}{str(same):>9}"
                )
            print()
    finally:
        python.close()
        server.close()


if __name__ == "__main__":
    main()
