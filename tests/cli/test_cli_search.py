"""`autotune search`, `best` and `trials` end to end, on real llama.cpp and real SQLite."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.llamacpp.server_binary import command_binary
from autotune.study.trials import is_reference


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def tiny_search(tiny_space, models_dir, *extra):
    return run(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--max-tokens",
        "12",
        "--per-category",
        "1",
        *extra,
    )


def load(home: Path, model: str) -> optuna.Study:
    storage = f"sqlite:///{home / 'autotune.db'}"
    return optuna.load_study(study_name=f"{model}@{hardware_key()}:python", storage=storage)


@pytest.mark.slow
def test_tiny_search_stores_baseline_first_and_every_attr(tiny_space, models_dir, autotune_home):
    result = tiny_search(tiny_space, models_dir, "--trials", "5", "--seed", "3", "--no-pruning")
    argv = shlex.split(result.stdout.splitlines()[0])
    assert argv[0] == command_binary()[0] and argv[1] == "-m"  # the llama-server that resolves here
    study = load(autotune_home, "tiny")
    trials = study.get_trials()
    assert len(trials) == 6  # 5 counted, and llama.cpp's --spec-default, a reference that is not
    baseline, spec_default = trials[:2]
    assert baseline.user_attrs["role"] == "baseline" and baseline.user_attrs["config"]["spec_type"] == "none"
    assert spec_default.user_attrs["role"] == "spec-default" and spec_default.state == optuna.trial.TrialState.COMPLETE
    # every configuration of this space runs on the tiny models and nothing prunes: each trial completes
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 6
    for trial in trials:
        attrs = trial.user_attrs
        for key in ("engine", "llama_cpp_build", "hardware", "hardware_detail", "model_files", "argv", "wall_s"):
            assert key in attrs, key
        assert attrs["engine"] == "python"
        assert all(len(sha) == 64 for sha in attrs["model_files"].values())
        for key in ("per_prompt", "per_category", "figures", "output_tokens", "decode_samples"):
            assert key in attrs, key
        assert len(attrs["per_prompt"]) == 11
    for trial in [t for t in trials if not is_reference(t)]:
        assert trial.user_attrs["config"]["spec_type"] in ("draft-simple", "ngram-simple")
        assert trial.user_attrs["lossless"] is True
        assert trial.user_attrs["speedup"] > 0


@pytest.mark.slow
def test_rerun_resumes_the_same_study(tiny_space, models_dir, autotune_home):
    tiny_search(tiny_space, models_dir, "--trials", "3")
    tiny_search(tiny_space, models_dir, "--trials", "3")
    assert len(load(autotune_home, "tiny").trials) == 4  # 3 counted and --spec-default
    tiny_search(tiny_space, models_dir, "--trials", "4")
    trials = load(autotune_home, "tiny").trials
    assert len(trials) == 5
    assert sum(t.user_attrs.get("role") == "baseline" for t in trials) == 1
    assert sum(t.user_attrs.get("role") == "spec-default" for t in trials) == 1


@pytest.mark.slow
def test_changed_measurement_settings_are_refused(tiny_space, models_dir):
    tiny_search(tiny_space, models_dir, "--trials", "2")
    result = run(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--max-tokens",
        "20",
        "--trials",
        "3",
        ok=False,
    )
    assert result.exit_code == 2 and "--max-tokens 12" in result.output


@pytest.mark.slow
def test_best_and_trials_read_the_study(tiny_space, models_dir, autotune_home, confirmed_pick):
    # no pruning: on a loaded machine every search trial could be pruned, and the baseline be the best
    tiny_search(tiny_space, models_dir, "--trials", "4", "--seed", "1", "--no-pruning")
    study = load(autotune_home, "tiny")
    best = json.loads(run("best", "--model", "tiny", "--json").stdout)
    assert set(best) >= {"command", "argv", "tok_s", "baseline_tok_s", "speedup", "params", "engine"}
    assert shlex.split(best["command"]) == best["argv"]
    assert Path(best["argv"][best["argv"].index("-m") + 1]).is_file()
    # the best is the confirmation's pick (a finalist or --spec-default significantly faster than the
    # baseline), else the baseline itself: the plain command
    pick = confirmed_pick(study.user_attrs["confirmation"])
    trial = study.trials[best["trial"]]
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert best["argv"] == trial.user_attrs["argv"]
    assert best["tok_s"] == round(trial.user_attrs["figures"]["mix_tok_s"], 3)
    if pick is None:
        assert trial.user_attrs["role"] == "baseline" and best["params"]["spec_type"] == "none"
        assert best["speedup"] == 1.0 and best["confirmed"]["speedup"] is None
    else:
        assert best["trial"] == pick["trial"] and trial.user_attrs["lossless"] is True
        assert best["params"]["spec_type"] == trial.user_attrs["config"]["spec_type"] != "none"
        assert best["speedup"] == round(trial.user_attrs["speedup"], 4)
        baseline = study.trials[trial.user_attrs["speedup_baseline_trial"]]
        assert best["baseline_tok_s"] == round(baseline.user_attrs["figures"]["mix_tok_s"], 3)
    rows = json.loads(run("trials", "--model", "tiny", "--json").stdout)
    assert [(r["number"], r["state"]) for r in rows] == [(t.number, t.state.name) for t in study.trials]
    assert [r["number"] for r in rows] == [0, 1, 2, 3, 4]
    assert [rows[0]["role"], rows[1]["role"]] == ["baseline", "spec-default"]
    text = run("trials", "--model", "tiny").output
    assert "(baseline)" in text and "(llama.cpp's --spec-default)" in text


@pytest.mark.slow
def test_gemma_search_end_to_end_in_a_real_process(tmp_path, gemma_path, autotune_home):
    """The README's main job, scaled down: a real `autotune` process on the real Gemma 3 270M."""
    models = tmp_path / "models"
    models.mkdir()
    env = {**os.environ, "AUTOTUNE_HOME": str(autotune_home), "AUTOTUNE_MODELS_DIR": str(models)}
    args = [
        sys.executable,
        "-m",
        "autotune",
        "search",
        "--strategy",
        "measure",
        "--model",
        "gemma3-270m",
        "--trials",
        "4",
        "--max-tokens",
        "16",
        "--seed",
        "2",
        "--race-top",
        "1",
        "--race-budget",
        "2",
    ]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "[1/4] trial   0 none" in done.stderr
    command = done.stdout.splitlines()[0]
    argv = shlex.split(command)
    assert Path(argv[0]).name == "llama-server" and os.access(shutil.which(argv[0]) or argv[0], os.X_OK)
    assert Path(argv[argv.index("-m") + 1]).is_file()

    db = sqlite3.connect(autotune_home / "autotune.db")
    (count,) = db.execute("select count(*) from trials").fetchone()
    assert count == 5  # 4 counted and --spec-default
    study = load(autotune_home, "gemma3-270m")
    baseline_tokens = study.trials[0].user_attrs["output_tokens"]
    for trial in study.trials[1:]:
        if trial.state == optuna.trial.TrialState.COMPLETE:
            assert trial.user_attrs["lossless"] is True, trial.user_attrs.get("output_match")
            assert len(trial.user_attrs["output_tokens"]) == len(baseline_tokens)


def test_the_sampler_never_measures_a_combination_that_cannot_draft(tmp_path, models_dir, autotune_home):
    space = tmp_path / "bounds.toml"
    space.write_text(
        '[model]\nname = "tiny"\ntarget = "tiny-target.gguf"\ndraft = "tiny-draft.gguf"\n'
        "context_size = 512\n[spec_types.draft-simple]\ndraft_n_max = [1, 2]\ndraft_n_min = [0, 6]\n"
        "[spec_types.ngram-simple]\nngram_simple_size_n = [2, 6]\nngram_simple_size_m = [1, 3]\n"
    )
    tiny_search(space, models_dir, "--trials", "8", "--seed", "4", "--no-pruning", "--no-confirm")
    configs = [t.user_attrs["config"] for t in load(autotune_home, "tiny").trials if not is_reference(t)]
    assert len(configs) == 7
    for config in configs:
        params = config["params"]
        if config["spec_type"] == "draft-simple":
            assert params["draft_n_min"] <= params["draft_n_max"], params
        else:
            assert params["ngram_simple_size_m"] >= params["ngram_simple_size_n"], params
