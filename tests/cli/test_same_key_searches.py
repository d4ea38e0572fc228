"""Two default searches of one model at once on one machine and one SQLite file, and a search stopped
mid-race: real processes, the tiny models, a real llama-server."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import optuna
import pytest

from autotune.hardware import hardware_key
from autotune.testing.processes import start_logged

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

BASELINE = "measuring the baseline of tiny-target.gguf"
RACING = "racing 2 predicted finalists"


def search_args(space, models, *extra: str) -> list[str]:
    return [
        "search",
        "--model",
        "tiny",
        "--space",
        str(space),
        "--models-dir",
        str(models),
        "--max-tokens",
        "24",
        "--race-top",
        "2",
        "--race-budget",
        "3",
        "--heartbeat",
        "1",
        *extra,
    ]


def runs(home) -> dict[str, dict]:
    """Each stored run of tiny's predicted study: its user attributes."""
    url = f"sqlite:///{home / 'autotune.db'}"
    return {s.study_name: s.user_attrs for s in optuna.get_all_study_summaries(url, include_best_trial=False)}


def test_a_second_search_of_one_model_waits_for_the_first_then_runs(tiny_space, models_dir, autotune_home):
    first, first_log = start_logged(search_args(tiny_space, models_dir))
    second = None
    try:
        assert first_log.wait_for(BASELINE, timeout_s=300), first_log.text()
        held_by = (
            f"tiny on {hardware_key()} is being searched by autotune pid {first.pid} on {socket.gethostname()} since "
        )
        refused = subprocess.run(
            [sys.executable, "-m", "autotune", *search_args(tiny_space, models_dir, "--no-wait")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 3, refused.stderr
        assert refused.stderr.strip().splitlines()[-1].startswith(f"autotune: error: {held_by}")
        assert BASELINE not in refused.stderr

        second, second_log = start_logged(
            search_args(tiny_space, models_dir, "--again")
        )  # else it answers from the first
        waiting = second_log.wait_for("autotune: waiting: ", timeout_s=120)
        assert waiting and waiting[1].startswith(f"autotune: waiting: {held_by}"), second_log.text()
        assert first.wait(timeout=600) == 0, first_log.text()[-3000:]
        first_done = first_log.lines[-1][0]
        assert second.wait(timeout=600) == 0, second_log.text()[-3000:]
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
    started = second_log.first(BASELINE)
    assert started and started[0] >= first_done  # it measured nothing while the first search ran
    print(f"\nthe second search waited {started[0] - waiting[0]:.1f} s (its 'waiting' line to its baseline)")
    assert len([line for _, line in second_log.lines if "autotune: waiting: " in line]) == 1
    stored = runs(autotune_home)
    base = f"tiny@{hardware_key()}:predicted"
    assert set(stored) == {base, f"{base}/v2"}  # the first's answer kept, the second's beside it
    assert all(attrs.get("confirmation") for attrs in stored.values())
    assert "replacing" not in first_log.text() + second_log.text()


def test_a_search_stopped_mid_race_leaves_best_printing_the_previous_verdict(tiny_space, models_dir, autotune_home):
    finished = subprocess.run(
        [sys.executable, "-m", "autotune", *search_args(tiny_space, models_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    verdict = finished.stdout.splitlines()[0]  # the command line the race chose

    stopped, log = start_logged(search_args(tiny_space, models_dir))
    try:
        assert log.wait_for(RACING, timeout_s=600), log.text()[-3000:]
        stopped.send_signal(signal.SIGTERM)
        assert stopped.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        if stopped.poll() is None:
            stopped.kill()
    base = f"tiny@{hardware_key()}:predicted"
    stored = runs(autotune_home)
    assert stored[base].get("confirmation")  # the stopped one kept its standing result, undecided
    assert stored[f"{base}/v2"].get("confirmation", {}).get("ended") in (None, "stopped before a verdict: undecided")

    best = subprocess.run(
        [sys.executable, "-m", "autotune", "best", "--model", "tiny"], capture_output=True, text=True, timeout=120
    )
    assert best.returncode == 0, best.stderr
    assert best.stdout.splitlines()[0] == verdict and "not raced" not in best.stdout
    as_json = json.loads(
        subprocess.run(
            [sys.executable, "-m", "autotune", "best", "--model", "tiny", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    )
    assert as_json["study"] == base and as_json["confirmed"] is not None
    trials = subprocess.run(
        [sys.executable, "-m", "autotune", "trials", "--model", "tiny", "--run", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert trials.returncode == 0 and "* run 2 " in trials.stderr and "no finished race" in trials.stderr

    pruned = subprocess.run(
        [sys.executable, "-m", "autotune", "prune", "--model", "tiny"], capture_output=True, text=True, timeout=120
    )
    assert pruned.returncode == 0 and "nothing to prune" in pruned.stdout  # the unfinished run is newer: kept
    assert set(runs(autotune_home)) == {base, f"{base}/v2"}
