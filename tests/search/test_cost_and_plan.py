"""What a search costs, on the tiny models and a real llama-server: the plan before it (`search --plan`,
which stores nothing), the plan and ETA lines during it, the ledger it stores and prints at its end, and
`best --json`'s `cost`. The ledger's counts are checked against what the search stored on its own: the
tokens its baseline generated, the references its calibration measured."""

from __future__ import annotations

import json

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines.base import WARMUP_TOKENS
from autotune.hardware import hardware_key

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

PHASES = ("baseline", "trajectory", "step costs", "chains", "replay", "calibration", "race")


def run(*args: str):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_plan_prints_each_phase_and_stores_nothing(tiny_space, models_dir, autotune_home, tmp_path):
    database = tmp_path / "never.db"
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
        "--plan",
        "--storage",
        f"sqlite:///{database}",
    )
    lines = result.stdout.splitlines()
    assert lines[0] == "download: nothing, every file is on disk"
    assert lines[1].startswith("workload: 1 target(s), 11 prompts x 16 tokens; 1 draft model(s) (chains)")
    assert (
        lines[2].startswith("pace: ")
        and "tok/s, the baseline of tiny-target.gguf on one prompt on the server engine" in lines[2]
    )
    rows = {line.split()[0] if not line.strip().startswith("step") else "step costs": line for line in lines[3:-1]}
    assert set(rows) == set(PHASES), lines
    assert "11 prompts" in lines[1] and f"{11 * 16 + 8:,} tokens" in rows["baseline"]  # the mix and its warm-up, once
    assert lines[-1].startswith("plan: up to ") and "on this machine: baseline " in lines[-1]
    assert "plan: measuring the baseline of tiny-target.gguf on one prompt" in result.stderr
    assert not database.exists() and not (autotune_home / "autotune.db").exists()


def test_plan_of_a_hub_space_with_nothing_on_disk_prices_the_download_at_the_spaces_pace(tmp_path, autotune_home):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [
        "search",
        "--model",
        "qwen3-8b",
        "--models-dir",
        str(empty),
        "--plan",
        "--offline",
        "--max-tokens",
        "512",
        "--per-category",
        "4",
        "--budget",
        "none",
    ]  # no cap: the prediction as long as the race
    lines = run(*args).stdout.splitlines()  # nothing to measure: the space states a pace (model.plan_tok_s)
    assert lines[0].startswith("downloading 8 files from the hub (size unknown")  # offline: no sizes
    assert lines[1].startswith(
        "workload: 2 target(s), 44 prompts x 512 tokens; 2 draft model(s) (chains), 4 DFlash/DSpark draft(s)"
    ), lines[1]
    assert lines[2].startswith("pace: 95 tok/s for Qwen3-8B-Q4_K_M.gguf, the pace qwen3-8b's search space states"), (
        lines[2]
    )
    baseline = next(line for line in lines if line.split()[0] == "baseline")
    assert f"{2 * (44 * 512 + 8):,} tokens" in baseline  # the mix and its warm-up, once per target
    given = run(*args, "--plan-tok-s", "40").stdout.splitlines()
    assert given[2].startswith("pace: 40 tok/s as given (--plan-tok-s)")


def test_a_budget_too_small_for_a_verdict_is_refused_with_the_smallest_that_works(tmp_path, autotune_home):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [
        "search",
        "--model",
        "qwen3-8b",
        "--models-dir",
        str(empty),
        "--plan",
        "--offline",
        "--max-tokens",
        "512",
        "--per-category",
        "4",
    ]
    refused = CliRunner().invoke(cli, [*args, "--budget", "15m"])
    assert refused.exit_code == 2 and "--budget 15.0 min is too small for a verdict here" in refused.output, (
        refused.output
    )
    smallest = int(refused.output.split("give at least --budget ")[1].split("m")[0])
    lines = run(*args, "--budget", f"{smallest}m").stdout.splitlines()
    assert lines[3].startswith(
        f"budget: {smallest:.1f} min (--budget; downloads aside): the prediction on 11 prompts x "
    ), lines[3]
    total = lines[-1].split("plan: up to ")[1].split(" min")[0]
    assert float(total) <= smallest  # the plan fits the budget it was given
    bad = CliRunner().invoke(cli, [*args, "--budget", "15"])
    assert bad.exit_code == 2 and "give a duration (15m, 1h, 900s)" in bad.output


def test_a_search_plans_keeps_an_eta_and_stores_its_cost(tiny_space, models_dir, autotune_home):
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
    notes = [line.removeprefix("autotune: ") for line in result.stderr.splitlines()]
    planned = next(i for i, line in enumerate(notes) if line.startswith("plan: "))
    assert planned < next(i for i, line in enumerate(notes) if line.startswith("measuring the step costs"))
    etas = [line for line in notes if line.startswith("ETA: ")]
    assert len(etas) >= 4 and etas[-1].startswith("ETA: 0 s left, done"), etas
    assert notes[-1].startswith("cost: baseline ") and "(total " in notes[-1]
    study = optuna.load_study(
        study_name=f"tiny@{hardware_key()}:predicted", storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    )
    cost = study.user_attrs["cost"]
    assert tuple(cost) == PHASES
    # the baseline: one server, the tokens the baseline trial says it generated and the server's warm-up
    baseline = next(t for t in study.trials if t.user_attrs.get("role") == "baseline")
    generated = sum(p["n_generated"] for p in baseline.user_attrs["per_prompt"])
    assert cost["baseline"]["server_starts"] == 1
    assert generated < cost["baseline"]["tokens"] <= generated + WARMUP_TOKENS
    # the trajectory is the baseline's output: the in-process engine only prefills it (where it would part
    # from it), generating nothing and starting no server
    assert cost["trajectory"]["server_starts"] == 0 and cost["trajectory"]["tokens"] == 0
    assert cost["chains"]["decodes"] > 0 and cost["chains"]["tokens"] == 0
    # the calibration: one server per reference it names
    references = study.user_attrs["prediction"]["calibration"][str(models_dir / "tiny-target.gguf")]["references"]
    assert cost["calibration"]["server_starts"] == len(references) and cost["calibration"]["tokens"] > 0
    assert cost["race"]["server_starts"] >= 2 and cost["race"]["tokens"] > 0  # one round of at least two entrants
    assert all(row["seconds"] > 0 for row in cost.values())
    best = json.loads(run("best", "--model", "tiny", "--json").stdout)
    assert best["cost"] == cost


def test_a_measured_search_stores_its_cost_too(tiny_space, models_dir, autotune_home):
    result = run(
        "search",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--strategy",
        "measure",
        "--engine",
        "python",
        "--trials",
        "3",
        "--max-tokens",
        "8",
        "--no-confirm",
        "--no-pruning",
    )
    assert result.stderr.splitlines()[-1].startswith("autotune: cost: trials ")
    cost = json.loads(run("best", "--model", "tiny", "--engine", "python", "--json").stdout)["cost"]
    assert list(cost) == ["trials"] and cost["trials"]["server_starts"] == 0  # in-process: no server started
    assert cost["trials"]["tokens"] >= 3 * 11 * 2  # three trials of 11 prompts (in the worker), two tokens at least
