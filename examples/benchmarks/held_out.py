"""Does a search pick the fastest configuration on prompts it was not built on?

1. Searches: `autotune search --model gemma3-270m --prompts examples/prompts-held-out.jsonl --max-tokens 96
   --seed S` for each of --seeds seeds, each in a fresh data dir, as a user runs it (a subprocess, its
   default budget). The held-out prompts are a changelog, a recipe, meeting minutes and a YAML file:
   categories the bundled mixes do not have. Each search's printed command is kept in --recording, so a
   rerun with --skip-search measures the same picks again.
2. A grid on fresh servers: the plain command, llama.cpp's --spec-default, ngram-simple over m x n,
   ngram-mod at five sizes, draft-simple with the target as its own draft, and every search's printed
   command exactly as printed. --rounds rounds; in each, every entry runs the held-out prompts on a
   llama-server started for it alone, in a new shuffled order each round. An entry's speedup is its
   tok/s over the plain command's in the same round, the geometric mean over rounds with a 95 % t
   interval.
3. Each pick against the grid's best (the best entry other than the picks themselves), round by round:
   the pick counts as found when its point lies within 3 % of the best.

    python examples/benchmarks/held_out.py [--seeds 5] [--rounds 3] [--max-tokens 96] [--skip-search]

Run it on an otherwise idle machine: figures move ±15 % between runs on 2 cores. The best of a noisy grid
is biased high (it is a maximum), so a pick within 3 % of it is a conservative test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _printed import fresh_tok_s, searched, spec_flags
from scipy import stats

from autotune.engines.prompt_tokens import PromptTokens
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config

HELD_OUT = Path(__file__).resolve().parents[1] / "prompts-held-out.jsonl"
WITHIN = 0.03
NGRAM_SIMPLE = [(m, n) for m in (3, 5, 9, 16, 24) for n in (2, 3, 5)]
NGRAM_MOD = [(5, 16, 2), (8, 16, 0), (8, 32, 0), (12, 48, 4), (16, 64, 8)]


def run_searches(recording: Path, seeds: int, max_tokens: int) -> list[dict]:
    """One default search per seed (those already in `recording` kept): its printed command and verdict."""
    done = json.loads(recording.read_text()) if recording.exists() else []
    done = [s for s in done if s["max_tokens"] == max_tokens]
    for seed in range(1, seeds + 1):
        if any(s["seed"] == seed for s in done):
            continue
        home = tempfile.mkdtemp(prefix=f"autotune-held-out-{seed}-")
        started = time.perf_counter()
        ran = subprocess.run(
            [
                sys.executable,
                "-m",
                "autotune",
                "search",
                "--model",
                "gemma3-270m",
                "--prompts",
                str(HELD_OUT),
                "--max-tokens",
                str(max_tokens),
                "--seed",
                str(seed),
            ],
            env={**os.environ, "AUTOTUNE_HOME": home},
            capture_output=True,
            text=True,
        )
        if ran.returncode != 0:
            sys.exit(f"the search of seed {seed} failed (exit {ran.returncode}): {ran.stderr[-800:]}")
        done.append(
            {
                "seed": seed,
                "max_tokens": max_tokens,
                "home": home,
                "seconds": time.perf_counter() - started,
                "stdout": ran.stdout,
            }
        )
        recording.write_text(json.dumps(done, indent=1))
        print(f"  seed {seed}: {done[-1]['seconds']:.0f} s", flush=True)
        print("\n".join("    " + line for line in ran.stdout.splitlines()[:4]), flush=True)
    return sorted(done, key=lambda s: s["seed"])[:seeds]


def grid(target: Path, command) -> dict[str, list[str]]:
    """The grid's entries by name: each a llama-server argv."""
    configs = {
        "plain": SpecConfig(target),
        "--spec-default": spec_default_config(target),
        "draft-simple n4 (itself)": SpecConfig(target, "draft-simple", target, {"draft_n_max": 4}),
    }
    for m, n in NGRAM_SIMPLE:
        configs[f"ngram-simple m{m}/n{n}"] = SpecConfig(
            target, "ngram-simple", params={"ngram_simple_size_m": m, "ngram_simple_size_n": n}
        )
    for match, most, least in NGRAM_MOD:
        configs[f"ngram-mod {match}/{most}/{least}"] = SpecConfig(
            target, "ngram-mod", params={"ngram_mod_n_match": match, "ngram_mod_n_max": most, "ngram_mod_n_min": least}
        )
    return {name: command.argv(config) for name, config in configs.items()}


def log_interval(ratios: list[float]) -> tuple[float, float, float]:
    """The geometric mean of `ratios` with its 95 % t interval."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), float("nan"), float("nan")
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--recording", type=Path, default=Path(tempfile.gettempdir()) / "autotune-held-out.json")
    parser.add_argument("--skip-search", action="store_true", help="measure the picks already in --recording")
    args = parser.parse_args()
    print(
        f"{args.seeds} searches of gemma3-270m on {HELD_OUT.name}, {args.max_tokens} tokens (kept in {args.recording})"
    )
    searches = (
        json.loads(args.recording.read_text())[: args.seeds]
        if args.skip_search
        else run_searches(args.recording, args.seeds, args.max_tokens)
    )
    by_seed = {s["seed"]: s for s in searches}
    command, mix, max_tokens = searched(searches[0]["home"])
    printed = {s["seed"]: shlex.split(s["stdout"].splitlines()[0]) for s in searches}
    target = Path(printed[searches[0]["seed"]][printed[searches[0]["seed"]].index("-m") + 1])
    entries = grid(target, command)
    plain = entries["plain"]
    picks: dict[int, str] = {}
    for seed, argv in printed.items():
        argv = [plain[0]] + argv[1:]  # the binary as this machine names it, and one copy of the model
        argv[argv.index("-m") + 1] = str(target)
        name = next((n for n, a in entries.items() if a == argv), None)
        if name is None:
            name = f"pick: {spec_flags(argv, plain)}"
            entries[name] = argv
        picks[seed] = name
    tokens = PromptTokens(command.context_size)
    prompts = [(p, tokens.tokens(target, p, max_tokens)) for p in mix]
    print(
        f"\na grid of {len(entries)} entries (the picks among them), {args.rounds} rounds on fresh servers, "
        f"{len(prompts)} prompts x {max_tokens} tokens, interleaved and shuffled",
        flush=True,
    )
    tok_s: dict[str, list[float]] = {name: [] for name in entries}
    rng = random.Random(0)
    for round_ in range(args.rounds):
        started = time.perf_counter()
        order = list(entries)
        rng.shuffle(order)
        for name in order:
            tok_s[name].append(fresh_tok_s(entries[name], prompts, max_tokens, command))
        print(
            f"  round {round_ + 1}: {time.perf_counter() - started:.0f} s, plain {tok_s['plain'][-1]:.1f} tok/s",
            flush=True,
        )
    speedup = {name: log_interval([t / p for t, p in zip(tok_s[name], tok_s["plain"])]) for name in entries}
    print(f"\n{'entry':<44} {'tok/s':>7} {'speedup [95% CI]':>24}")
    for name in sorted(entries, key=lambda n: -speedup[n][0]):
        point, low, high = speedup[name]
        seeds = [str(s) for s, n in picks.items() if n == name]
        marker = f"  <- pick of seed {', '.join(seeds)}" if seeds else ""
        print(f"{name:<44} {statistics.fmean(tok_s[name]):7.1f} {point:8.3f}x [{low:.3f}-{high:.3f}]{marker}")
    best = max((n for n in entries if not n.startswith("pick: ")), key=lambda n: speedup[n][0])
    print(f"\nthe grid's best: {best}, {speedup[best][0]:.3f}x")
    found = 0
    for seed, name in sorted(picks.items()):
        point, low, high = log_interval([p / b for p, b in zip(tok_s[name], tok_s[best])])
        found += point >= 1 - WITHIN
        verdict = next(iter(by_seed[seed]["stdout"].splitlines()[1:2]), "")
        print(
            f"  seed {seed}: {name}: {point:.3f}x the best [95% CI {low:.3f}-{high:.3f}]"
            f"{'' if point >= 1 - WITHIN else ' (more than 3 % below)'}; it printed {verdict.lstrip('# ')}"
        )
    print(f"picks within {WITHIN:.0%} of the grid's best: {found} of {len(picks)}")


if __name__ == "__main__":
    main()
