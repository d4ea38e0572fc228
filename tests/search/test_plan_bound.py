"""The plan is an upper bound of the cost line: a real search of the tiny models on llama-server does no
more work in any phase than its `--plan` said it would (tokens generated, servers started, draft decodes
recorded), counted by the search's own ledger. Counts, not seconds: seconds move with the machine."""

from __future__ import annotations

import re

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]


def _planned(lines: list[str]) -> dict[str, tuple[int, int, int]]:
    """Each phase row of `--plan`: (tokens, decodes, server starts)."""
    rows = {}
    for line in lines:
        match = re.match(r"\s+(.+?)\s+([\d,]+) tokens\s+([\d,]+) decodes\s+(\d+) server starts", line)
        if match:
            rows[match.group(1)] = tuple(int(g.replace(",", "")) for g in match.groups()[1:])
    return rows


def test_no_phase_of_a_search_does_more_than_its_plan(tiny_space, models_dir, autotune_home):
    args = [
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
        "2",
        "--race-budget",
        "2",
    ]
    plan = CliRunner().invoke(cli, [*args, "--plan"])
    assert plan.exit_code == 0, plan.output
    planned = _planned(plan.stdout.splitlines())
    assert {"baseline", "calibration", "race"} <= set(planned), plan.stdout
    searched = CliRunner().invoke(cli, args)
    assert searched.exit_code == 0, searched.output
    cost = optuna.load_study(
        study_name=f"tiny@{hardware_key()}:predicted", storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    ).user_attrs["cost"]
    over = [
        f"{phase}: {what} {cost[phase][what]} > planned {planned[phase][i]}"
        for phase in planned
        if phase in cost
        for i, what in enumerate(("tokens", "decodes", "server_starts"))
        if what != "decodes" or phase in ("chains", "blocks")
        if cost[phase][what] > planned[phase][i]
    ]
    assert over == [], (over, plan.stdout)
    assert cost["race"]["server_starts"] > 0 and cost["race"]["tokens"] > 0
