"""A tool that survives: Ctrl-C, two workers on one SQLite file, timeouts; and the noise, pruning and
objective machinery that makes its figures trustworthy. Real processes, real llama.cpp, real SQLite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.testing.processes import process_ids_named, start_autotune, wait_for_exits, watch_exits


def study(home: Path, suffix: str = "", engine: str = "python") -> optuna.Study:
    return optuna.load_study(
        study_name=f"tiny@{hardware_key()}:{engine}{suffix}", storage=f"sqlite:///{home / 'autotune.db'}"
    )


def search_args(space, models, *extra):
    return [
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(space),
        "--models-dir",
        str(models),
        *extra,
    ]


def search_argv(space, models, *extra):
    return [sys.executable, "-m", "autotune", *search_args(space, models, *extra)]


def env_for(home):
    return {**os.environ, "AUTOTUNE_HOME": str(home), "PYTHONUNBUFFERED": "1"}


def llama_servers_for(models: Path) -> list[int]:
    """llama-server processes running on files of this test's models dir."""
    return process_ids_named("llama-server", containing=str(models))


def server_is_ready(pid: int) -> bool:
    """Whether the llama-server `pid` answers /health with 200 (then it generates within milliseconds)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        port = int(argv[argv.index("--port") + 1])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
            return answer.status == 200
    except (OSError, ValueError):
        return False


def signal_a_server_run(
    argv, home: Path, models: Path, signum: int, window: str
) -> tuple[subprocess.Popen, dict[int, int | None]]:
    """Start `argv`, and once the second trial's llama-server is in `window` ("start-up": it exists but
    does not answer yet; "generation": it answers), send `signum` to autotune alone (a `timeout`, a
    cron job's kill, a dropped ssh session), not to its group. Returns the finished process and its
    servers at the signal, watched (autotune.testing.processes.watch_exits)."""
    proc = start_autotune(argv, env=env_for(home), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        assert any(line.startswith("[1/") for line in proc.stderr), "the first trial did not finish"
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, f"the second trial's server never reached {window}"
            servers = llama_servers_for(models)
            if servers and (window == "start-up") != server_is_ready(servers[0]):
                break
            time.sleep(0.01)
        watched = watch_exits(servers)
        os.kill(proc.pid, signum)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    return proc, watched


@pytest.mark.parametrize(
    "signum, window",
    [(signal.SIGINT, "generation"), (signal.SIGTERM, "start-up"), (signal.SIGHUP, "generation")],
    ids=["SIGINT-generation", "SIGTERM-start-up", "SIGHUP-generation"],
)
@pytest.mark.slow
def test_a_stop_signal_closes_the_running_trial_kills_the_server_and_the_study_resumes(
    tiny_space, models_dir, autotune_home, signum, window
):
    argv = search_args(
        tiny_space,
        models_dir,
        "--engine",
        "server",
        "--trials",
        "5",
        "--max-tokens",
        "48",
        "--per-category",
        "4",
        "--no-pruning",
        "--baseline-every",
        "0",
        "--no-confirm",
    )
    proc, servers = signal_a_server_run(argv, autotune_home, models_dir, signum, window)
    stderr = proc.stderr.read()
    assert proc.returncode == 128 + signum, stderr
    assert f"autotune: interrupted by {signal.Signals(signum).name}" in stderr
    assert not llama_servers_for(models_dir)  # stopped before autotune exited
    assert wait_for_exits(servers) == []
    trials = study(autotune_home, engine="server").trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]
    assert trials[1].user_attrs["interrupted"]

    done = subprocess.run(
        [sys.executable, "-m", "autotune", *argv],
        env=env_for(autotune_home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    trials = study(autotune_home, engine="server").trials
    # 5 counted, the interrupted --spec-default and the one measured on resuming
    assert sum(t.state.is_finished() for t in trials) == len(trials) == 7
    assert not llama_servers_for(models_dir)


@pytest.mark.slow
def test_autotune_killed_leaves_no_server_and_the_next_run_requeues_its_trial(tiny_space, models_dir, autotune_home):
    argv = search_args(
        tiny_space,
        models_dir,
        "--engine",
        "server",
        "--trials",
        "3",
        "--max-tokens",
        "48",
        "--per-category",
        "4",
        "--no-pruning",
        "--baseline-every",
        "0",
        "--no-confirm",
    )
    proc, servers = signal_a_server_run(argv, autotune_home, models_dir, signal.SIGKILL, "generation")
    assert proc.returncode == -signal.SIGKILL
    # the kernel kills the server as autotune dies (PR_SET_PDEATHSIG): waited for, however slow the box
    assert servers and wait_for_exits(servers) == []
    assert not llama_servers_for(models_dir)
    assert study(autotune_home, engine="server").trials[1].state == optuna.trial.TrialState.RUNNING

    done = subprocess.run(
        [sys.executable, "-m", "autotune", *argv],
        env=env_for(autotune_home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "1 trial(s) left running by an autotune process that died were failed and re-queued" in done.stderr
    trials = study(autotune_home, engine="server").trials
    assert optuna.trial.TrialState.RUNNING not in [t.state for t in trials]
    assert "died while measuring it" in trials[1].user_attrs["fail_reason"]
    (again,) = [t for t in trials if t.user_attrs.get("requeued_from") == 1]
    assert again.state == optuna.trial.TrialState.COMPLETE
    assert again.user_attrs["role"] == "spec-default"


@pytest.mark.slow
def test_two_workers_on_one_sqlite_file_lose_no_trial(tiny_space, models_dir, autotune_home):
    # no pruning: on the tiny models most trials are pruned, and one that completes is what this checks
    argv = search_argv(
        tiny_space, models_dir, "--trials", "10", "--max-tokens", "24", "--baseline-every", "0", "--no-pruning"
    )
    workers = [
        subprocess.Popen(argv, env=env_for(autotune_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=300) for w in workers]
    for worker, (_, err) in zip(workers, outputs):
        assert worker.returncode == 0, err
    trials = study(autotune_home).trials
    assert [t.number for t in trials] == list(range(len(trials)))
    assert all(t.state.is_finished() for t in trials)
    assert 10 <= len(trials) <= 13  # two baselines may be enqueued at once, and each worker finishes its trial
    reported = sum(err.count("] trial ") for _, err in outputs)
    assert reported == len(trials)
    # a trial that finished before the other worker's baseline waited for it: every one is a ratio
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and "role" not in t.user_attrs]
    assert complete, [
        (t.number, t.state.name, {k: v for k, v in t.user_attrs.items() if k in ("role", "failure", "pruned")})
        for t in trials
    ]
    for trial in complete:
        baseline = trials[trial.user_attrs["speedup_baseline_trial"]]
        assert baseline.user_attrs["role"] == "baseline" and baseline.state == optuna.trial.TrialState.COMPLETE
        assert trial.user_attrs["lossless"] is not None


@pytest.mark.slow
def test_repeats_give_intervals_and_drift_checks_are_recorded_not_counted(tiny_space, models_dir, autotune_home):
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--strategy",
            "measure",
            "--model",
            "tiny",
            "--space",
            str(tiny_space),
            "--models-dir",
            str(models_dir),
            "--trials",
            "5",
            "--repeats",
            "3",
            "--baseline-every",
            "2",
            "--max-tokens",
            "16",
            "--no-pruning",
        ],
    )
    assert result.exit_code == 0, result.output
    trials = study(autotune_home).trials
    checks = [t for t in trials if t.user_attrs.get("drift_check")]
    # baseline, --spec-default, 2 trials, the drift check of both references, 2 trials
    assert [t.user_attrs["role"] for t in checks] == ["baseline", "spec-default"] and len(trials) == 8
    assert checks[0].user_attrs["drift"] > 0
    for trial in trials:
        if trial.state == optuna.trial.TrialState.COMPLETE:
            assert len(trial.user_attrs["decode_samples"]) == 3
            low, high = trial.user_attrs["ci95"]
            assert low <= trial.values[0] <= high
            assert trial.user_attrs["cv"] >= 0
    later = [t for t in trials if t.number > checks[0].number and not t.user_attrs.get("role")]
    assert all(t.user_attrs["speedup_baseline_trial"] >= checks[0].number for t in later if "speedup" in t.user_attrs)
    listing = CliRunner().invoke(cli, ["trials", "--model", "tiny"]).stdout
    assert "drift" in listing and "95% CI" in listing


SLOW_DRAFT_SPACE = """
[model]
name = "tiny"
target = "tiny-target.gguf"
draft = "tiny-draft.gguf"
context_size = 512

[spec_types.draft-simple]  # 12-16 tokens from a draft as big as the target that rarely agrees: far slower
draft_n_max = [12, 16]

[spec_types.ngram-simple]
ngram_simple_size_n = [1, 3]
ngram_simple_size_m = [2, 8]
"""


def test_pruned_trials_never_become_the_best(tmp_path, models_dir, autotune_home):
    space = tmp_path / "slow-draft.toml"
    space.write_text(SLOW_DRAFT_SPACE)
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--strategy",
            "measure",
            "--model",
            "tiny",
            "--space",
            str(space),
            "--models-dir",
            str(models_dir),
            "--trials",
            "8",
            "--max-tokens",
            "16",
            "--seed",
            "4",
        ],
    )
    assert result.exit_code == 0, result.output
    trials = study(autotune_home).trials
    pruned = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
    assert pruned, [(t.number, t.state.name, t.params) for t in trials]
    assert any(t.params["spec_type"] == "draft-simple" for t in pruned)
    assert all(
        t.user_attrs["prune_reason"].startswith("significantly slower") and len(t.intermediate_values) <= 11
        for t in pruned
    )
    best = json.loads(CliRunner().invoke(cli, ["best", "--model", "tiny", "--json"]).stdout)
    assert trials[best["trial"]].state == optuna.trial.TrialState.COMPLETE
    assert best["trial"] not in {t.number for t in pruned}


def test_pareto_study_prints_its_front_and_the_pick(tiny_space, models_dir, autotune_home):
    args = ["--model", "tiny", "--objective", "pareto"]
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--strategy",
            "measure",
            *args,
            "--space",
            str(tiny_space),
            "--models-dir",
            str(models_dir),
            "--trials",
            "5",
            "--max-tokens",
            "16",
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(study(autotune_home, "+pareto").directions) == 2
    best = json.loads(CliRunner().invoke(cli, ["best", *args, "--json"]).stdout)
    front = {row["trial"] for row in best["pareto_front"]}
    assert best["trial"] in front
    assert max(row["e2e_tok_s"] for row in best["pareto_front"]) == best["figures"]["e2e_tok_s"]
    assert "pareto front" in CliRunner().invoke(cli, ["best", *args]).stdout


def test_e2e_objective_is_its_own_study(tiny_space, models_dir, autotune_home):
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--strategy",
            "measure",
            "--model",
            "tiny",
            "--objective",
            "e2e",
            "--space",
            str(tiny_space),
            "--models-dir",
            str(models_dir),
            "--trials",
            "3",
            "--max-tokens",
            "16",
        ],
    )
    assert result.exit_code == 0, result.output
    e2e = study(autotune_home, "+e2e")
    baseline = e2e.trials[0]
    assert baseline.values[0] == pytest.approx(baseline.user_attrs["figures"]["e2e_tok_s"], rel=1e-3)


@pytest.mark.slow
def test_a_trial_past_its_timeout_fails_and_the_study_goes_on(tmp_path, gemma_path, autotune_home):
    models = tmp_path / "models"
    models.mkdir()
    (models / "gemma-3-270m-Q4_K_M.gguf").symlink_to(gemma_path)
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--strategy",
            "measure",
            "--model",
            "gemma3-270m",
            "--models-dir",
            str(models),
            "--trials",
            "2",
            "--max-tokens",
            "128",
            "--trial-timeout",
            "1",
            "--no-pruning",
        ],
    )
    assert result.exit_code == 1 and "every trial failed" in result.output
    trials = optuna.load_study(
        study_name=f"gemma3-270m@{hardware_key()}:python", storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    ).trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL", "FAIL"]  # baseline, --spec-default, one search trial
    assert all(t.user_attrs["fail_reason"].startswith("timeout") for t in trials)
