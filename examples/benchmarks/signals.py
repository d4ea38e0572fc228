"""Benchmark of how autotune ends when it is signalled (figures for issue 23's closing note).

(a) A fault run on Gemma 3 270M with the server engine: SIGTERM, SIGHUP and SIGKILL sent to autotune
    alone (as `timeout`, cron or a dropped ssh session would) while a trial's llama-server starts up
    (the process exists, /health does not answer yet) and while it generates, `--runs` times each,
    each group in a study of its own. Per group: exit codes, llama-server processes left 5 s later
    (target 0), trials left RUNNING, and RUNNING after the next run of the same command (target 0).
(b) `--repeat` runs in a row of the two Ctrl-C tests (tests/engines/test_worker.py and
    tests/search/test_faults.py), started from a terminal-like foreground (`script`, a pty) and from a
    background job of a shell script (SIGINT ignored): passes of 2 x repeat per way.

Run: python examples/benchmarks/signals.py [--runs 5] [--repeat 20] [--skip-tests]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from autotune.testing.processes import process_ids_named, start_autotune

ROOT = Path(__file__).resolve().parents[2]
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP, "SIGKILL": signal.SIGKILL}
WINDOWS = ("start-up", "generation")
CTRL_C_TESTS = [
    "tests/engines/test_worker.py::test_ctrl_c_kills_the_worker_and_leaves_no_process_behind",
    "tests/search/test_faults.py::test_a_stop_signal_closes_the_running_trial_kills_the_server_and_the_"
    "study_resumes[SIGINT-generation]",
]


def search_args(models: Path) -> list[str]:
    return [
        "search",
        "--strategy",
        "measure",
        "--engine",
        "server",
        "--model",
        "gemma3-270m",
        "--models-dir",
        str(models),
        "--trials",
        "3",
        "--max-tokens",
        "32",
        "--per-category",
        "1",
        "--no-pruning",
        "--no-confirm",
        "--baseline-every",
        "0",
    ]


def ready(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        port = argv[argv.index("--port") + 1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
            return answer.status == 200
    except (OSError, ValueError):
        return False


def running_trials(home: Path) -> int:
    with sqlite3.connect(f"file:{home / 'autotune.db'}?mode=ro", uri=True) as db:
        return db.execute("SELECT COUNT(*) FROM trials WHERE state = 'RUNNING'").fetchone()[0]


def one_fault(models: Path, home: Path, signum: int, window: str) -> tuple[int | None, int, int]:
    """Start a search, signal it in `window` of its second trial's server; (exit code, servers left after
    5 s, trials RUNNING). Exit code None: the window was never seen (the run ended first)."""
    env = {**os.environ, "AUTOTUNE_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    proc = start_autotune(search_args(models), env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        if not any(line.startswith("[1/") for line in proc.stderr):
            return None, 0, 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            servers = process_ids_named("llama-server", containing=str(models))
            if servers and (window == "start-up") != ready(servers[0]):
                os.kill(proc.pid, signum)
                break
            time.sleep(0.005)
        else:
            return None, 0, 0
        proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    time.sleep(5)
    return proc.returncode, len(process_ids_named("llama-server", containing=str(models))), running_trials(home)


def fault_run(models: Path, runs: int) -> None:
    print(f"(a) fault run: Gemma 3 270M, server engine, {runs} runs per signal and window, each in a fresh study")
    print(f"{'signal':8} {'window':10} {'exit codes':22} {'servers left':>12} {'RUNNING':>8} {'after next run':>14}")
    for name, signum in SIGNALS.items():
        for window in WINDOWS:
            codes, left, running, after = Counter(), 0, 0, 0
            for _ in range(runs):
                with tempfile.TemporaryDirectory(prefix="autotune-signals-") as home_dir:
                    home = Path(home_dir)
                    code, servers, stuck = one_fault(models, home, signum, window)
                    codes[code] += 1
                    left += servers
                    running += stuck
                    if stuck:  # the next run of the same command must close what the dead one left
                        env = {**os.environ, "AUTOTUNE_HOME": str(home)}
                        subprocess.run(
                            [sys.executable, "-m", "autotune", *search_args(models)],
                            env=env,
                            capture_output=True,
                            timeout=900,
                        )
                        after += running_trials(home)
            shown = ", ".join(f"{c}x{n}" for c, n in sorted(codes.items(), key=lambda kv: str(kv[0])))
            print(f"{name:8} {window:10} {shown:22} {left:>12} {running:>8} {after:>14}", flush=True)


def ctrl_c_tests(repeat: int) -> None:
    print(f"(b) the two Ctrl-C tests, {repeat} runs in a row each way")
    command = " ".join(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *CTRL_C_TESTS]
    )
    ways = {
        "foreground (a pty)": ["script", "-qec", command, "/dev/null"],
        "background job of a script": ["bash", "-c", f"{command} & wait $!"],
    }
    for way, argv in ways.items():
        passed = 0
        for _ in range(repeat):
            done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
            found = re.findall(r"(\d+) passed", done.stdout + done.stderr)
            passed += int(found[-1]) if found else 0
        print(f"{way:28} {passed} passed of {2 * repeat}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--skip-tests", action="store_true", help="only the fault run")
    parser.add_argument("--skip-faults", action="store_true", help="only the Ctrl-C tests")
    args = parser.parse_args()
    if not args.skip_faults:
        with tempfile.TemporaryDirectory(prefix="autotune-signals-models-") as models:
            fault_run(Path(models), args.runs)
    if not args.skip_tests:
        ctrl_c_tests(args.repeat)


if __name__ == "__main__":
    main()
