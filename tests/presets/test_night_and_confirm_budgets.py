"""`nightly --budget` and `confirm --budget` (issue 57): what each parses, what it defaults to (the search space's
`budget_per_target` a target, which every bundled space states), and what reaches the plan or the race; none of
these measures anything."""

from __future__ import annotations

import shutil
import textwrap
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import autotune.presets.confirmed as confirmed_module
import autotune.presets.nightly as nightly_module
from autotune.cli.main import cli
from autotune.presets.confirmed import confirm_budget
from autotune.presets.nightly import measured_race_budget
from autotune.race.race import DEFAULT_BUDGET, RaceBudget
from autotune.search.plan import SearchBudget
from autotune.spec.duration import duration_s
from autotune.spec.space import known_models, load_model_space
from autotune.study.verdict import CONFIRM_ROUNDS_CAP, RACE_BUDGET_CAP, SEARCH_BUDGET_CAP, SPACE_BUDGET_CAP


@pytest.mark.parametrize("command", ["nightly", "confirm"])
def test_help_shows_budget(command):
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0 and "--budget" in result.output and "budget_per_target" in result.output


@pytest.mark.parametrize("model", known_models())
def test_every_bundled_space_states_a_budget_per_target(model):
    """A search, a night and confirm's race of any bundled model keep to a time by default."""
    stated = load_model_space(model).model.budget_per_target
    assert stated is not None and duration_s(stated) > 0, f"search_spaces/{model}.toml states no budget_per_target"


@pytest.mark.parametrize(
    "argv",
    [
        ["nightly", "--model", "gemma3-270m", "--budget", "soon"],
        ["nightly", "--all", "--budget", "10 minutes"],
        ["confirm", "--model", "gemma3-270m", "--budget", "soon"],
    ],
)
def test_a_bad_budget_is_one_line_and_exit_2_before_anything_runs(argv):
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"autotune: error: --budget {argv[-1]}: give a duration (15m, 1h, 900s), or none for no cap"
    ]


def test_confirm_takes_repeats_or_a_budget_not_both():
    result = CliRunner().invoke(cli, ["confirm", "--model", "gemma3-270m", "--repeats", "3", "--budget", "10m"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "autotune: error: --repeats and --budget both cap confirm's race, which keeps to one cap: give --repeats "
        "(rounds) or --budget (time)"
    ]


def test_confirm_races_the_spaces_budget_a_target_unless_told_otherwise():
    space_default = confirm_budget("qwen3-8b", 2, repeats=None, budget=None)
    assert space_default == (
        RaceBudget(seconds=2 * 15 * 60, cap=SPACE_BUDGET_CAP),
        "the space's budget_per_target of 15m a target x 2",
    )
    assert confirm_budget("qwen3-8b", 2, repeats=3, budget=None) == (
        RaceBudget(rounds=3, cap=CONFIRM_ROUNDS_CAP),
        "--repeats",
    )
    assert confirm_budget("qwen3-8b", 2, repeats=None, budget=SearchBudget.parse("20m")) == (
        RaceBudget(seconds=1200, cap=SEARCH_BUDGET_CAP),
        "--budget",
    )
    rounds = RaceBudget(rounds=int(DEFAULT_BUDGET), cap=CONFIRM_ROUNDS_CAP)
    assert confirm_budget("qwen3-8b", 2, repeats=None, budget=SearchBudget.parse("none")) == (
        rounds,
        "--budget none: --repeats' default",
    )
    assert confirm_budget("some-gguf", 1, repeats=None, budget=None) == (  # a --hf study: no bundled space
        rounds,
        "no search space of some-gguf states a budget_per_target: --repeats' default",
    )


class StopBeforeMeasuring(Exception):
    """Raised where a command would start to measure: what it was about to measure with is all these tests ask."""


def test_confirm_races_within_the_spaces_budget_for_the_targets_its_finalists_run_on(monkeypatch):
    """No --budget, no --repeats: qwen3-8b's 15m for each of the two targets its finalists run on reaches the race,
    and the command says so first."""
    raced = []

    def race_study(study, *, budget, **kwargs):
        raced.append(budget)
        raise StopBeforeMeasuring

    monkeypatch.setattr(confirmed_module, "open_study_of", lambda *args, **kwargs: "a study")
    monkeypatch.setattr(confirmed_module, "finalists", lambda study, top, check: ["Q4_K_M", "Q8_0", "Q4_K_M"])
    monkeypatch.setattr(confirmed_module, "trial_entrant", lambda t: SimpleNamespace(config=SimpleNamespace(target=t)))
    monkeypatch.setattr(confirmed_module, "race_study", race_study)
    result = CliRunner().invoke(cli, ["confirm", "--model", "qwen3-8b"])
    assert isinstance(result.exception, StopBeforeMeasuring), result.output
    assert raced == [RaceBudget(seconds=1800.0, cap=SPACE_BUDGET_CAP)]
    assert "autotune: race budget: 30 min (the space's budget_per_target of 15m a target x 2)" in result.stderr


def test_a_measured_nights_budget_caps_its_race_in_time():
    rounds = RaceBudget(rounds=4)
    space = SearchBudget(1800.0, "the space's budget_per_target of 15m a target x 2", given=False)
    assert measured_race_budget(rounds, None) == rounds  # no cap: --race-budget as it was
    assert measured_race_budget(rounds, space) == RaceBudget(seconds=1800.0, cap=SPACE_BUDGET_CAP)
    assert measured_race_budget(rounds, SearchBudget(600.0)) == RaceBudget(seconds=600.0, cap=SEARCH_BUDGET_CAP)
    shorter = RaceBudget(seconds=300.0)
    assert measured_race_budget(shorter, space) == shorter and shorter.cap == RACE_BUDGET_CAP
    assert measured_race_budget(RaceBudget(seconds=3600.0), space) == RaceBudget(seconds=1800.0, cap=SPACE_BUDGET_CAP)


BUDGETED_SPACE = """
[model]
name = "tiny"
target = "tiny-target.gguf"
context_size = 512
budget_per_target = "7m"

[spec_types.ngram-simple]
ngram_simple_size_n = [1, 3]
ngram_simple_size_m = [2, 8]
"""


@pytest.fixture
def night_plan(tmp_path, tiny_dir, monkeypatch):
    """A predicted night of the tiny target whose space states budget_per_target 7m, stopped once its plan is made
    (priced at a stated pace, so nothing is measured): returns (the plan, the CLI result)."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_dir / "tiny-target.gguf", models)
    space = tmp_path / "tiny.toml"
    space.write_text(textwrap.dedent(BUDGETED_SPACE))
    made = []
    make_plan = nightly_module.make_plan

    def priced_plan(*args, **kwargs):
        made.append(make_plan(*args, **kwargs, assume_tok_s=1000.0))
        return made[-1]

    def stop(*args, **kwargs):
        raise StopBeforeMeasuring

    monkeypatch.setattr(nightly_module, "make_plan", priced_plan)
    monkeypatch.setattr(nightly_module, "predict_and_race", stop)

    def run(*flags):
        argv = ["nightly", "--model", "tiny", "--space", str(space), "--models-dir", str(models), "--max-tokens", "8"]
        result = CliRunner().invoke(cli, [*argv, *flags])
        assert isinstance(result.exception, StopBeforeMeasuring), result.output
        return (made.pop() if made else None), result

    return run


def test_a_night_with_no_budget_given_keeps_to_the_spaces_budget_per_target(night_plan):
    plan, result = night_plan()
    assert not plan.budget.given and plan.budget.how.startswith("the space's budget_per_target of 7m a target x 1")
    assert plan.budget.seconds >= 7 * 60  # raised where 7 minutes could give no verdict on this machine
    assert "autotune: budget: " in result.stderr and "budget_per_target of 7m a target x 1" in result.stderr


def test_a_nights_budget_is_the_given_one_and_none_is_no_cap(night_plan):
    plan, _ = night_plan("--budget", "9m")
    assert plan.budget == SearchBudget(540.0)
    uncapped, result = night_plan("--budget", "none")
    assert uncapped.budget is None and "autotune: budget: " not in result.stderr


def test_a_measured_night_runs_its_trials_and_says_the_budget_caps_its_race(tmp_path, tiny_dir):
    """A night that cannot be predicted (the e2e objective) under the space's 7m: its trials run as --trials says,
    and the line before them says the race keeps to the budget (none of them completes here, so no race runs)."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_dir / "tiny-target.gguf", models)
    space = tmp_path / "tiny.toml"
    space.write_text(textwrap.dedent(BUDGETED_SPACE).replace("[1, 3]", "12").replace("[2, 8]", "48"))
    argv = ["nightly", "--model", "tiny", "--space", str(space), "--models-dir", str(models), "--objective", "e2e"]
    result = CliRunner().invoke(cli, [*argv, "--trials", "2", "--max-tokens", "8", "--no-pruning"])
    assert result.exit_code == 3 and "no speculative configuration completed" in result.stdout, result.output
    assert (
        "autotune: budget: 7.0 min (the space's budget_per_target of 7m a target x 1): the measured study runs its "
        "--trials 2, uncapped, then the race up to 7 min"
    ) in result.stderr
