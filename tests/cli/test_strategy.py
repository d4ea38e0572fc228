"""`search --strategy predict` (the default) end to end on the tiny models and a real llama-server, and
its one-line fallback to measuring where a search cannot be predicted."""

from __future__ import annotations

import json
import re

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.search.plan import MAX_FIT_PROMPTS
from autotune.search.predicted._calibration import MIN_FIT_PROMPTS

pytestmark = pytest.mark.usefixtures("no_server_left_behind")


def run(*args: str):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.slow
def test_predict_then_race_prints_the_race_winner_with_its_prediction(
    tiny_space, models_dir, autotune_home, confirmed_pick
):
    result = run(
        "search",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--max-tokens",
        "24",
        "--race-top",
        "2",
        "--race-budget",
        "2",
    )
    assert "predicted" in result.output and "racing 2 predicted finalists with the references" in result.output
    calibration = [line for line in result.output.splitlines() if line.startswith("autotune: calibrating on the")]
    assert calibration and "(the baseline)" in calibration[0] and "(draft model)" in calibration[0]
    study = optuna.load_study(
        study_name=f"tiny@{hardware_key()}:predicted", storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    )
    roles = [t.user_attrs.get("role") for t in study.trials]
    assert roles[:2] == ["baseline", "spec-default"] and len(roles) > 10  # the references, then the predictions
    prediction = study.user_attrs["prediction"]
    trajectory = prediction["trajectories"][str(models_dir / "tiny-target.gguf")]
    assert trajectory["engine"] == "server" and len(trajectory["prompts"]) == 11
    assert all(len(p["tokens"]) <= 24 and p["prompt_tokens"] for p in trajectory["prompts"])
    assert set(prediction["costs"][str(models_dir / "tiny-target.gguf")]["drafts"]) == {"tiny-draft.gguf"}
    confirmation = study.user_attrs["confirmation"]
    assert confirmation["engine"] == "server" and len(confirmation["configs"]) == 2
    assert confirmation["pairing"] == "prompt" and confirmation["repeats"] <= 2
    assert {row["family"] for row in confirmation["configs"]} <= {"n-gram", "draft model"}
    best = json.loads(run("best", "--model", "tiny", "--json").output)
    assert best["engine"] in ("predicted", "server") and "predicted_speedup" in best and "calibration_error" not in best
    assert best["confirmed"]["engine"] == "server"
    race = best["race"]
    picked = confirmed_pick(confirmation)  # the race's rule, written out: None is the plain command
    assert len(race["finalists"]) == 2 and race["pick"]["trial"] == (picked["trial"] if picked else 0)
    assert best["trial"] == race["pick"]["trial"]
    assert best["command"] in result.stdout.splitlines()  # the command the search printed
    for row in race["finalists"]:
        assert set(row) >= {"speedup", "speedup_ci", "p_value", "significant", "rounds", "prompts"}
        if row["speedup"] is not None:
            low, high = row["speedup_ci"]
            assert low <= row["speedup"] <= high and row["prompts"] == 11
    trials = run("trials", "--model", "tiny").output.splitlines()
    assert "pred" in trials[0] and "error" in trials[0]
    raced = {row["trial"] for row in confirmation["configs"] if row["failure"] is None}
    raced_lines = [line for line in trials[1:] if int(line.split()[0]) in raced]
    assert raced_lines and all(line.split()[2] != "-" for line in raced_lines)  # measured beside predicted
    assert all(line.split()[6] != "-" for line in raced_lines)  # and the prediction's error


@pytest.mark.slow
@pytest.mark.parametrize("precision", [1.0, 0.0], ids=["every fit has enough at once", "no fit ever has enough"])
def test_each_reference_is_measured_for_as_many_prompts_as_its_fit_needs(
    monkeypatch, tiny_space, models_dir, autotune_home, precision
):
    monkeypatch.setattr("autotune.search.predicted._calibration.FIT_PRECISION", precision)
    result = run(
        "search",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--max-tokens",
        "16",
        "--race-top",
        "1",
        "--race-budget",
        "1",
    )
    said = [
        line.removeprefix("autotune: calibration: ")
        for line in result.output.splitlines()
        if line.startswith("autotune: calibration: ")
    ]
    counts = [int(re.search(r": (\d+) prompts, ", line).group(1)) for line in said]
    assert len(said) == 3, said  # 3 besides the baseline
    drafting = [line for line in said if "drafted nothing" not in line]  # the tiny target's --spec-default does not
    assert drafting
    if precision == 1.0:  # each leaves at its first look with MIN_FIT_PROMPTS timed prompts (a 0 ms one is not)
        assert all(MIN_FIT_PROMPTS <= count < MAX_FIT_PROMPTS for count in counts), said
        assert all("enough for its fit" in line for line in drafting), said
    else:  # each leaves proven slower than the plain command, or at the most a reference takes
        assert all(MIN_FIT_PROMPTS <= count <= MAX_FIT_PROMPTS for count in counts), said
        assert all(
            "proven slower than the plain command" in line or f": {MAX_FIT_PROMPTS} prompts, " in line
            for line in drafting
        ), said
    study = optuna.load_study(
        study_name=f"tiny@{hardware_key()}:predicted", storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    )
    fitted = study.user_attrs["prediction"]["calibration"][str(models_dir / "tiny-target.gguf")]
    assert (
        fitted["points"] == sum(counts) + max(counts) and fitted["configurations"] == 4
    )  # the baseline ran to the last
    spec_default = next(t for t in study.trials if t.user_attrs.get("role") == "spec-default")
    assert len(spec_default.user_attrs["per_prompt"]) in counts


def test_options_only_the_measured_strategy_reads_are_refused_when_the_search_predicts(
    tiny_space, models_dir, autotune_home
):
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--model",
            "tiny",
            "--space",
            str(tiny_space),
            "--models-dir",
            str(models_dir),
            "--trials",
            "50",
            "--repeats",
            "2",
        ],
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "autotune: error: --trials, --repeats: only the measured strategy reads these, and this search is predicted "
        "(--strategy predict, the default): drop them, or pass --strategy measure"
    )
    assert not (autotune_home / "autotune.db").exists()  # nothing measured, nothing written
    no_race = CliRunner().invoke(
        cli, ["search", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir), "--no-confirm"]
    )
    assert no_race.exit_code == 2 and no_race.output.strip().splitlines()[-1] == (
        "autotune: error: --no-confirm: only the measured strategy reads this, and this search is predicted "
        "(--strategy predict, the default): drop them, or pass --strategy measure"
    )


@pytest.mark.slow
def test_a_search_that_cannot_be_predicted_says_so_and_measures(tiny_space, models_dir):
    result = run(
        "search",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--max-tokens",
        "8",
        "--trials",
        "3",
        "--temperature",
        "0.7",
        "--no-confirm",
        "--no-pruning",
    )
    notes = [line for line in result.output.splitlines() if "not predicted" in line]
    assert notes == [
        "autotune: not predicted: sampling at temperature 0.7, top-k 40, top-p 0.95, min-p 0.05, seed 0 "
        "is not the baseline's greedy output; measuring instead (as --strategy measure)"
    ]
    assert "[3/3] trial" in result.output and "--temp 0.7" in result.output
