"""A fleet of workers on one database: real PostgreSQL (and SQLite where it makes sense), real
worker processes, real llama.cpp."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from datetime import datetime, timezone

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.testing.processes import LineLog
from storage.presets import Preset, PresetStore


@pytest.fixture(params=["sqlite", "postgres"])
def storage_url(request, autotune_home):
    if request.param == "sqlite":
        return f"sqlite:///{autotune_home / 'fleet.db'}"
    return request.getfixturevalue("postgres_url")


def worker_argv(space, models, *extra):
    return [
        sys.executable,
        "-m",
        "autotune",
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(space),
        "--models-dir",
        str(models),
        "--baseline-every",
        "0",
        "--no-pruning",
        *extra,
    ]


def worker_env(home, storage_url, **extra):
    return {**os.environ, "AUTOTUNE_HOME": str(home), "AUTOTUNE_STORAGE": storage_url, "PYTHONUNBUFFERED": "1", **extra}


def trials_of(storage_url, hardware=None):
    return optuna.load_study(study_name=f"tiny@{hardware or hardware_key()}:python", storage=storage_url).trials


@pytest.mark.slow
def test_two_workers_share_one_study(tiny_space, models_dir, autotune_home, storage_url):
    if storage_url.startswith("postgresql"):
        import sqlalchemy

        engine = sqlalchemy.create_engine(storage_url)
        with engine.begin() as connection:
            connection.execute(sqlalchemy.text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        engine.dispose()
    argv = worker_argv(tiny_space, models_dir, "--trials", "8", "--max-tokens", "24")
    workers = [
        subprocess.Popen(
            argv, env=worker_env(autotune_home, storage_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=300) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [err[-2000:] for _, err in outputs]
    trials = trials_of(storage_url)
    assert [t.number for t in trials] == list(range(len(trials)))  # no duplicate trial numbers
    assert all(t.state.is_finished() for t in trials)  # no lost or dangling trial
    assert 8 <= len(trials) <= 11
    assert sum(err.count("] trial ") for _, err in outputs) == len(trials)  # every trial was some worker's
    # one race for the study: the first worker to finish took the lease and raced, the other found the
    # lease held (or, where that race had ended, a race stored since its finalists began) and left it
    racers = [err for _, err in outputs if "autotune: racing the top " in err]
    others = [
        err
        for _, err in outputs
        if "races this study's finalists" in err or "this study's race is stored already" in err
    ]
    assert len(racers) == 1 and len(others) == 1, [err[-1500:] for _, err in outputs]
    assert "race round 1:" not in others[0]
    study = optuna.load_study(study_name=f"tiny@{hardware_key()}:python", storage=storage_url)
    assert study.user_attrs["confirmation"]["repeats"] >= 1


@pytest.mark.slow
@pytest.mark.parametrize("running_after, killed", [("[1/4]", "reference"), ("[2/4]", "search trial")])
def test_a_killed_worker_trial_is_failed_by_the_heartbeat_and_requeued(
    tiny_space, models_dir, autotune_home, fresh_postgres, running_after, killed
):
    argv = worker_argv(
        tiny_space,
        models_dir,
        "--trials",
        "4",
        "--max-tokens",
        "150",
        "--per-category",
        "3",
        "--repeats",
        "6",
        "--heartbeat",
        "1",
    )
    env = worker_env(autotune_home, fresh_postgres)
    doomed = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:  # "[1/4]": the baseline finished, --spec-default runs; "[2/4]": that too, the first search trial runs
        assert any(line.startswith(running_after) for line in doomed.stderr)
        time.sleep(0.5)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=30)
    finally:
        doomed.kill()
    (running,) = [t for t in trials_of(fresh_postgres) if t.state == optuna.trial.TrialState.RUNNING]
    assert (running.user_attrs.get("role") == "spec-default") == (killed == "reference")
    time.sleep(3.5)  # past the grace period of 3 heartbeats
    survivor = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert survivor.returncode == 0, survivor.stderr
    trials = trials_of(fresh_postgres)
    assert trials[running.number].state == optuna.trial.TrialState.FAIL
    requeued = [t for t in trials if t.user_attrs.get("requeued_from") == running.number]
    if killed == "search trial":
        (copy,) = requeued
        assert copy.state.is_finished() and copy.params == running.params
    else:  # the survivor found the dead worker's process gone and re-queued its --spec-default (or, where
        # the heartbeat failed it first, enqueued its own): measured once either way, below
        assert len(requeued) <= 1
    assert all(t.state.is_finished() for t in trials)
    assert len(trials) == 6  # 4 counted trials, --spec-default and the dead worker's one
    for role in ("baseline", "spec-default"):  # each reference measured once
        assert sum(t.user_attrs.get("role") == role and t.state.name == "COMPLETE" for t in trials) == 1, role


@pytest.mark.slow
def test_each_hardware_has_its_own_study_and_presets_of_every_machine_are_listed(
    tiny_space, models_dir, autotune_home, tmp_path, fresh_postgres
):
    fake_bin = tmp_path / "fake-gpu"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, GPU-1234, NVIDIA FakeGPU, 24576, 555.1'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    argv = worker_argv(tiny_space, models_dir, "--trials", "2", "--max-tokens", "12")
    here = subprocess.run(
        argv, env=worker_env(autotune_home, fresh_postgres), capture_output=True, text=True, timeout=300
    )
    gpu_env = worker_env(autotune_home, fresh_postgres, PATH=f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    there = subprocess.run(argv, env=gpu_env, capture_output=True, text=True, timeout=300)
    assert here.returncode == 0 and there.returncode == 0, (here.stderr, there.stderr)
    assert len(trials_of(fresh_postgres)) == 3  # 2 counted and the --spec-default reference
    assert len(trials_of(fresh_postgres, "NVIDIA FakeGPU 24GiB")) == 3

    with PresetStore(fresh_postgres) as store:
        for hardware in (hardware_key(), "NVIDIA FakeGPU 24GiB"):
            store.save(
                Preset(
                    model="tiny",
                    hardware=hardware,
                    argv=("llama-server", "-m", "t.gguf"),
                    tok_s=100.0,
                    baseline_tok_s=80.0,
                    speedup=1.25,
                    engine="server",
                    llama_cpp_build="b1",
                    file_hashes={},
                    params={},
                    study_name="s",
                    created_at=datetime.now(timezone.utc),
                )
            )
    listing = CliRunner().invoke(cli, ["presets", "list", "--storage", fresh_postgres])
    assert listing.exit_code == 0, listing.output
    assert hardware_key() in listing.stdout and "NVIDIA FakeGPU 24GiB" in listing.stdout


@pytest.mark.slow
def test_three_workers_work_through_two_models_and_take_over_the_model_of_one_killed_mid_race(
    tiny_space, models_dir, autotune_home, tmp_path, fresh_postgres
):
    tiny2_space = tmp_path / "tiny2.toml"
    tiny2_space.write_text(tiny_space.read_text().replace('name = "tiny"', 'name = "tiny2"'))
    argv = [
        sys.executable,
        "-m",
        "autotune",
        "search",
        "--model",
        "tiny",
        "--model",
        "tiny2",
        "--space",
        str(tiny_space),
        "--space",
        str(tiny2_space),
        "--models-dir",
        str(models_dir),
        "--max-tokens",
        "24",
        "--race-top",
        "2",
        "--race-budget",
        "3",
        "--heartbeat",
        "1",
    ]
    workers = [
        subprocess.Popen(
            argv,
            env=worker_env(autotune_home, fresh_postgres, AUTOTUNE_LOCK_DIR=str(tmp_path / f"machine-{i}-locks")),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    logs = [LineLog(w.stderr) for w in workers]
    try:
        deadline = time.monotonic() + 600
        while not any(log.first("racing 2 predicted finalists") for log in logs) and time.monotonic() < deadline:
            time.sleep(0.2)
        (victim,) = [i for i, log in enumerate(logs) if log.first("racing 2 predicted finalists")][:1]
        workers[victim].kill()  # mid-race: the race has begun, nothing of it is stored
        leased = [line for _, line in logs[victim].lines if "leased to this worker" in line]
        victim_model = leased[-1].split("autotune: ", 1)[1].split(":", 1)[0]
        codes = [w.wait(timeout=900) for w in workers]
    finally:
        for w in workers:
            w.kill()
    outputs = [log.text() for log in logs]
    assert codes[victim] == -signal.SIGKILL
    assert [c for i, c in enumerate(codes) if i != victim] == [0, 0], [o[-2000:] for o in outputs]
    takeover = f"took over the lease of {victim_model} on {hardware_key()} from autotune pid {workers[victim].pid} on "
    takers = [i for i, text in enumerate(outputs) if takeover in text]
    assert len(takers) == 1 and takers[0] != victim, outputs
    searched = {
        model: [i for i, text in enumerate(outputs) if f"autotune: {model}: leased to this worker" in text]
        for model in ("tiny", "tiny2")
    }
    assert sorted(len(who) for who in searched.values()) == [1, 2]  # the victim's model searched twice
    for model in ("tiny", "tiny2"):
        runs = {
            s.study_name: s.user_attrs
            for s in optuna.get_all_study_summaries(fresh_postgres, include_best_trial=False)
            if s.study_name.startswith(f"{model}@{hardware_key()}:predicted")
        }
        raced = [name for name, attrs in runs.items() if attrs.get("confirmation")]
        assert len(raced) == 1, runs  # exactly one stored race per pair
        assert len(runs) == (2 if model == victim_model else 1)  # the victim's unfinished run kept beside it
    print(
        f"\nworkers {[w.pid for w in workers]}: pairs searched {searched}; worker {victim} (pid "
        f"{workers[victim].pid}) killed racing {victim_model}; taken over by worker {takers[0]}; "
        f"races stored: 1 per pair"
    )
