"""`search --strategy predict` (the default) end to end on the tiny models and a real llama-server, and
its one-line fallback to measuring where a search cannot be predicted."""

from __future__ import annotations

import json

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key

pytestmark = pytest.mark.usefixtures("no_server_left_behind")


def run(*args: str):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_predict_then_race_prints_the_race_winner_with_its_prediction(tiny_space, models_dir, autotune_home):
    result = run("search", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir),
                 "--max-tokens", "24", "--race-top", "2", "--race-rounds", "2")
    assert "predicted" in result.output and "racing the 2 best predicted" in result.output
    study = optuna.load_study(study_name=f"tiny@{hardware_key()}:predicted",
                              storage=f"sqlite:///{autotune_home / 'autotune.db'}")
    roles = [t.user_attrs.get("role") for t in study.trials]
    assert roles[:2] == ["baseline", "spec-default"] and len(roles) > 10  # the references, then the predictions
    prediction = study.user_attrs["prediction"]
    trajectory = prediction["trajectories"][str(models_dir / "tiny-target.gguf")]
    assert trajectory["engine"] == "server" and len(trajectory["prompts"]) == 11
    assert all(len(p["tokens"]) <= 24 and p["prompt_tokens"] for p in trajectory["prompts"])
    assert set(prediction["costs"][str(models_dir / "tiny-target.gguf")]["drafts"]) == {"tiny-draft.gguf"}
    confirmation = study.user_attrs["confirmation"]
    assert confirmation["engine"] == "server" and len(confirmation["configs"]) == 2
    best = json.loads(run("best", "--model", "tiny", "--json").output)
    assert best["engine"] in ("predicted", "server") and "calibration_error" in best and "predicted_speedup" in best
    assert best["confirmed"]["engine"] == "server"
    trials = run("trials", "--model", "tiny").output.splitlines()
    assert "pred" in trials[0]
    raced = {row["trial"] for row in confirmation["configs"]}
    raced_lines = [line for line in trials[1:] if int(line.split()[0]) in raced]
    assert len(raced_lines) == 2 and all(line.split()[2] != "-" for line in raced_lines)  # measured beside predicted


def test_a_search_that_cannot_be_predicted_says_so_and_measures(tiny_space, models_dir):
    result = run("search", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir),
                 "--max-tokens", "8", "--trials", "3", "--temperature", "0.7", "--no-confirm", "--no-pruning")
    notes = [line for line in result.output.splitlines() if "not predicted" in line]
    assert notes == ["autotune: not predicted: sampling at temperature 0.7, top-k 40, top-p 0.95, min-p 0.05, seed 0 "
                     "is not the baseline's greedy output; measuring instead (as --strategy measure)"]
    assert "[3/3] trial" in result.output and "--temp 0.7" in result.output
