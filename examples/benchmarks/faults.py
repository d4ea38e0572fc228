"""Benchmark of the python engine's worker process on Gemma 3 270M (figures for issue 12's closing note).

(a) the pipe's overhead: the wall time of `measure` through the worker minus the time the worker
    spent inside it, per trial, as a share of the generation time (target < 1%);
(b) a `--trials` study during which a background thread kills the worker at random moments, three
    times with SIGKILL and once with SIGSEGV: trials lost (must be 0: every trial COMPLETE, PRUNED or
    FAIL with a reason), whether the study finished, processes left, and what each restart cost.

Run: python examples/benchmarks/faults.py [--trials 20] [--max-tokens 64] [--overhead-rounds 5] [--seed 12]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

import optuna
from _gemma import gemma_inputs  # noqa: E402  (beside this script)

from autotune.cli.progress import SilentReporter, TerminalReporter
from autotune.engines.orphans import descendant_pids
from autotune.engines.worker import WorkerEngine
from autotune.search.inputs import runnable_space
from autotune.search.measured import Tuner
from autotune.spec.config import SpecConfig
from autotune.study.trials import counted_trials

SIGNALS = (signal.SIGKILL, signal.SIGKILL, signal.SIGKILL, signal.SIGSEGV)


class TimedRestarts(WorkerEngine):
    """A WorkerEngine that times each restart (the first worker starts before the study): a fresh
    worker's spawn, imports and model loads, before the measurement that needed it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.restarts_s: list[float] = []

    def measure(self, config, mix, **kwargs):
        if self.worker_pid is None:
            started = time.perf_counter()
            self.prepare(config, mix, max_tokens=kwargs["max_tokens"])
            self.restarts_s.append(time.perf_counter() - started)
        return super().measure(config, mix, **kwargs)


def killer(engine: WorkerEngine, rng: random.Random, done: threading.Event, kills: list[tuple[float, str]]) -> None:
    """Send SIGNALS, in a random order, each at a random moment to whatever worker runs then."""
    for signum in rng.sample(SIGNALS, len(SIGNALS)):
        if done.wait(rng.uniform(5, 40)):
            return
        while (pid := engine.worker_pid) is None:
            if done.wait(0.05):
                return
        os.kill(pid, signum)
        kills.append((time.monotonic(), signal.Signals(signum).name))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--overhead-rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()

    # the workers inherit it: a worker killed by SIGSEGV leaves no core file behind
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    options, inputs, mix = gemma_inputs(trials=args.trials, max_tokens=args.max_tokens, seed=args.seed)
    engine = TimedRestarts(context_size=inputs.space.model.context_size)
    baseline = SpecConfig(inputs.candidates.targets[0])
    engine.prepare(baseline, mix, max_tokens=args.max_tokens)
    print(f"Gemma 3 270M Q4_K_M, {engine.runtime.n_threads} threads, {len(mix)} prompts x {args.max_tokens} tokens")

    print(f"\n(a) pipe overhead over {args.overhead_rounds} baseline measurements")
    shares = []
    for _ in range(args.overhead_rounds):
        started = time.perf_counter()
        measurement = engine.measure(baseline, mix, max_tokens=args.max_tokens, on_prompt=lambda i, r: None)
        overhead_s = time.perf_counter() - started - engine.last_worker_busy_s
        shares.append(overhead_s / (measurement.generation_ms / 1000))
        print(
            f"  through the worker minus inside it: {1000 * overhead_s:6.2f} ms of "
            f"{measurement.generation_ms / 1000:5.2f} s generation = {100 * shares[-1]:.3f}%"
        )
    print(f"  median {100 * statistics.median(shares):.3f}% of generation time (target < 1%)")

    print(
        f"\n(b) {args.trials}-trial study, seed {args.seed}, the worker killed by "
        f"{', '.join(signal.Signals(s).name for s in SIGNALS)} at random moments"
    )
    runnable = runnable_space(inputs.space, engine, inputs.candidates, SilentReporter())
    storage = optuna.storages.RDBStorage(f"sqlite:///{tempfile.mkdtemp()}/faults.db")
    done = threading.Event()
    kills: list[tuple[float, str]] = []
    thread = threading.Thread(target=killer, args=(engine, random.Random(args.seed), done, kills), daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        study = Tuner(runnable, inputs.candidates, mix, engine, options.settings, TerminalReporter()).run(storage)
    finally:
        done.set()
        thread.join()
        wall_s = time.monotonic() - started
        engine.close()
    trials = study.trials
    lost = [
        t
        for t in trials
        if not (
            t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
            or (t.state == optuna.trial.TrialState.FAIL and t.user_attrs.get("fail_reason"))
        )
    ]
    states = [t.state.name for t in trials]
    print(f"  kills: {', '.join(f'{name} at {at - started:.1f} s' for at, name in kills)}")
    for trial in trials:
        if trial.user_attrs.get("worker_died"):
            print(
                f"  trial {trial.number} FAIL: {trial.user_attrs['fail_reason']} "
                f"(measurement lost: {trial.user_attrs['wall_s']:.1f} s)"
            )
    print(
        f"  {len(trials)} trials in {wall_s:.1f} s: {states.count('COMPLETE')} complete, {states.count('PRUNED')} "
        f"pruned, {states.count('FAIL')} failed; trials lost: {len(lost)}"
    )
    print(f"  study finished: {counted_trials(study) >= args.trials}")
    left = [pid for pid in descendant_pids(os.getpid()) if "spawn_main" in _cmdline(pid)]
    print(f"  processes left after close(): {len(left)}")
    print(
        f"  restarts: {len(engine.restarts_s)}, each {', '.join(f'{s:.2f} s' for s in engine.restarts_s)} "
        "(spawn, imports, model load)"
    )


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


if __name__ == "__main__":
    main()
