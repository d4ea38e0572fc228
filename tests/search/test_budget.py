"""A search sized to its budget (autotune.search.plan.fit_budget), on the qwen3-8b workload at the pace its
space states and the files' sizes on the hub: the prediction is shortened (one prompt a category, then
fewer tokens) before the race is ever cut below its first bound; whatever it picks, its plan fits the
budget; a budget the user gives that is too small is refused with the smallest that works, one the space
gives is raised to it. Arithmetic only: nothing is measured."""

from __future__ import annotations

from dataclasses import replace

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.errors import SearchSpaceError, UsageError
from autotune.race.race import RaceBudget
from autotune.search.fleet import search_lease
from autotune.search.inputs import RaceOptions, SearchOptions, SearchSettings, check_inputs
from autotune.search.plan import (
    Pace,
    SearchBudget,
    Shape,
    Workload,
    files_by_role,
    finalists_within,
    fit_budget,
    make_plan,
    plan_phases,
    race_budget_left,
    search_budget,
)
from autotune.search.plan._budget import MIN_FINALISTS, first_bound_s, prediction_shapes, racing_s
from autotune.search.plan._pace import GPU_DRAFT_STEP_FLOOR_S
from autotune.search.plan._phases import after_decision_s, race_round_s
from autotune.search.predicted import predict_and_race
from autotune.spec.space import load_model_space, load_space
from autotune.study.records import StudyRecord, TrialRecord
from autotune.study.verdict import RACE_BUDGET_CAP, SEARCH_BUDGET_CAP, RaceVerdict
from autotune.testing.reporter import KeptNotes

GB = 1_000_000_000
#: the qwen3-8b space's files, their sizes on the hub as docs/gpu.md states them
SIZES = {
    "Qwen3-8B-Q4_K_M.gguf": 5.0 * GB,
    "Qwen3-8B-Q8_0.gguf": 8.7 * GB,
    "Qwen3-0.6B-Q8_0.gguf": 0.6 * GB,
    "Qwen3-1.7B-Q8_0.gguf": 1.8 * GB,
    "dspark-Qwen3-8B-Q8_0.gguf": 1.2 * GB,
    "dspark-Qwen3-8B-BF16.gguf": 2.3 * GB,
    "dflash-Qwen3-8B-Q8_0.gguf": 1.1 * GB,
    "dflash-Qwen3-8B-BF16.gguf": 2.1 * GB,
}
PACE = Pace(95.0, 10.0, 0.2, measured_on="Qwen3-8B-Q4_K_M.gguf")


@pytest.fixture(scope="module")
def qwen3_8b():
    space = load_model_space("qwen3-8b", None)
    files = files_by_role(
        ["Qwen3-8B-Q4_K_M.gguf", "Qwen3-8B-Q8_0.gguf"],
        {
            "draft-simple": ["Qwen3-0.6B-Q8_0.gguf", "Qwen3-1.7B-Q8_0.gguf"],
            "draft-dspark": ["dspark-Qwen3-8B-Q8_0.gguf", "dspark-Qwen3-8B-BF16.gguf"],
            "draft-dflash": ["dflash-Qwen3-8B-Q8_0.gguf", "dflash-Qwen3-8B-BF16.gguf"],
        },
    )
    work = Workload.of(
        space,
        {k: v for k, v in files.items() if k == "target" or k in space.spec_types},
        prompts=44,
        max_tokens=512,
        race_top=4,
        race_budget=RaceBudget(rounds=4),
        server_arbiter=True,
        sizes={k: int(v) for k, v in SIZES.items()},
        replayed=2000,
        categories=11,
    )
    return space, work


def _total_s(work: Workload) -> float:
    return sum(p.seconds for p in plan_phases(work, PACE))


def _before_race_s(work: Workload) -> float:
    return sum(p.seconds for p in plan_phases(work, PACE) if p.name != "race")


def test_the_prediction_is_shortened_by_prompts_first_then_by_tokens_never_below_64(qwen3_8b):
    _, work = qwen3_8b
    assert prediction_shapes(work) == [Shape(44, 512), Shape(11, 512), Shape(11, 256), Shape(11, 128), Shape(11, 64)]
    short = Workload(prompts=11, max_tokens=48, targets=work.targets, categories=11)
    assert prediction_shapes(short) == [Shape(11, 48)]  # the demo's mix: nothing to shorten


@pytest.mark.parametrize("minutes", [46, 60, 90, 180, 600])
def test_whatever_it_picks_its_plan_fits_the_budget_and_the_race_keeps_its_first_bound(qwen3_8b, minutes):
    _, work = qwen3_8b
    fitted, budget = fit_budget(work, PACE, SearchBudget(minutes * 60.0))
    assert budget.seconds == minutes * 60.0
    assert _total_s(fitted) <= budget.seconds + 1e-6
    assert fitted.raced == Shape(44, 512)  # the race runs the user's mix and length, always
    race = next(p for p in plan_phases(fitted, PACE) if p.name == "race")
    assert race.seconds >= first_bound_s(fitted, PACE) - 1e-6
    # where the race gets what the budget leaves, more of --budget (not --race-budget) races longer
    assert fitted.race_budget.cap == (SEARCH_BUDGET_CAP if fitted.race_budget.seconds else RACE_BUDGET_CAP)
    chosen = racing_s(fitted, PACE, budget.seconds - _before_race_s(fitted))
    for shape in prediction_shapes(work):  # no other prediction that keeps the first bound leaves the race more
        for other in (work.predicting(shape), replace(work.predicting(shape), replicate_per_category=True)):
            before = _before_race_s(other)
            if before + first_bound_s(other, PACE) <= budget.seconds:
                assert racing_s(other, PACE, budget.seconds - before) <= chosen + 1


def _fitted_at(work: Workload, tok_s: float, minutes: float) -> Workload:
    pace = Pace(tok_s, 10.0, 0.2, measured_on="Qwen3-8B-Q4_K_M.gguf")
    fitted, budget = fit_budget(work, pace, SearchBudget(minutes * 60.0, "a default", given=False))
    return fitted, pace, budget


def _race_minutes(work: Workload, tok_s: float, minutes: float) -> tuple[float, bool, int]:
    """The minutes the plan of `work` at `tok_s` within `minutes` leaves the race's rounds, whether that is all
    the race asked for (its own rounds fit), and the prediction's tokens."""
    pace = Pace(tok_s, 10.0, 0.2, measured_on="Qwen3-8B-Q4_K_M.gguf")
    fitted, budget = fit_budget(work, pace, SearchBudget(minutes * 60.0, "a default", given=False))
    before = sum(p.seconds for p in plan_phases(fitted, pace) if p.name != "race")
    return (
        racing_s(fitted, pace, budget.seconds - before) / 60,
        fitted.race_budget.rounds is not None,
        (fitted.predicted.mix_tokens),
    )


def test_more_pace_or_more_budget_never_races_less_nor_predicts_on_fewer_tokens(qwen3_8b):
    """A faster GPU, or a longer budget, gets a race at least as long (or all the rounds it asked for) and a
    prediction at least as long: the plan that sized qwen3-8b's race at 95 tok/s must not give it less at 150
    (it gave 10.7 min, then 8.8, with a round after the decision on all 44 prompts)."""
    _, work = qwen3_8b
    paces, budgets = (95, 120, 150, 180, 240, 300, 400), (30, 45, 60, 90, 180)
    grid = {(tok_s, minutes): _race_minutes(work, tok_s, minutes) for tok_s in paces for minutes in budgets}
    for (tok_s, minutes), (race_min, _, tokens) in grid.items():
        more = [grid[t, minutes] for t in paces if t > tok_s] + [grid[tok_s, m] for m in budgets if m > minutes]
        for other_min, all_asked, other_tokens in more:
            assert (other_min >= race_min - 1 / 60 or all_asked) and other_tokens >= tokens, (tok_s, minutes)
    assert grid[150, 30][0] >= grid[95, 30][0]  # issue 57's plan: 150 tok/s raced less than 95


def test_a_generous_budget_leaves_the_search_as_asked(qwen3_8b):
    _, work = qwen3_8b
    fitted, _ = fit_budget(work, PACE, SearchBudget(24 * 3600.0))
    assert fitted == work and fitted.race_budget == RaceBudget(rounds=4)


def test_a_given_budget_too_small_is_refused_a_default_one_is_raised(qwen3_8b):
    space, work = qwen3_8b
    with pytest.raises(
        UsageError,
        match=r"--budget 20.0 min is too small for a verdict here: .*give at least "
        r"--budget (\d+)m",
    ) as refused:
        fit_budget(work, PACE, SearchBudget(20 * 60.0))
    smallest = int(str(refused.value).split("give at least --budget ")[1].split("m")[0])
    fitted, raised = fit_budget(work, PACE, SearchBudget(20 * 60.0, "a default", given=False))
    assert raised.seconds == smallest * 60 and "raised to the smallest that gives a verdict here" in raised.how
    assert _total_s(fitted) <= raised.seconds + 1e-6
    default = search_budget(None, space, 2)
    assert default is not None and not default.given and default.seconds == 2 * 15 * 60  # the space's 15m a target
    assert search_budget(SearchBudget.parse("none"), space, 2) is None
    assert search_budget(SearchBudget.parse("90m"), space, 2) == SearchBudget(5400.0)


def test_qwen3_8b_by_its_default_budget_is_15_minutes_a_target_with_every_target_and_draft_quant(qwen3_8b):
    space, work = qwen3_8b
    fitted, budget = fit_budget(work, PACE, search_budget(None, space, len(work.targets)))
    assert budget.seconds == 2 * 15 * 60 and "raised" not in budget.how  # the files' sizes known: no raise
    assert _total_s(fitted) <= 2 * 15 * 60 + 1e-6
    assert len(fitted.targets) == 2 and len(fitted.draft_models) == 2 and len(fitted.block_drafts) == 4
    assert [d.other_quant for d in fitted.block_drafts] == [False, True, False, True]  # BF16 checks Q8_0's blocks
    assert fitted.predicted == Shape(11, 64) and fitted.replicate_per_category  # the race gets the most


def test_a_space_budget_must_be_a_duration(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(
        '[model]\nname = "m"\ntarget = "m.gguf"\nbudget_per_target = "15"\n'
        "[spec_types.ngram-simple]\nngram_simple_size_n = [1, 3]\n"
    )
    with pytest.raises(SearchSpaceError, match="model.budget_per_target"):
        load_space(path)


def test_plan_of_qwen3_8b_with_no_budget_given_keeps_to_the_spaces_default(tmp_path, autotune_home):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(
        cli,
        [
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
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    budget = next(line for line in lines if line.startswith("budget: "))
    assert "the space's budget_per_target of 15m a target x 2" in budget and "the race's 44 x 512" in budget
    minutes = float(budget.split("budget: ")[1].split(" min")[0])
    total = float(lines[-1].split("plan: up to ")[1].split(" min")[0])
    assert total <= minutes  # offline the files' sizes are unknown: priced as large as a target, and it still fits


@pytest.mark.slow
@pytest.mark.usefixtures("no_server_left_behind")
def test_a_shortened_prediction_predicts_on_fewer_prompts_and_tokens_and_races_the_users(
    tiny_space, models_dir, autotune_home
):
    """What fit_budget picks is what the search does: the baseline, recordings and calibration on one prompt a
    category and 8 tokens, the race on both prompts of each category and 16 tokens, its round after the
    decision (if any) on one prompt a category; the stored measurement is the race's."""
    settings = SearchSettings(model="tiny", trials=1, max_tokens=16, seed=0)
    options = SearchOptions(
        settings, engine_name="server", per_category=2, models_dir=models_dir, space_file=tiny_space
    )
    notes = KeptNotes()
    inputs = check_inputs(options, notes.note)
    raced = len(inputs.mix)
    categories = len({p.category for p in inputs.mix})
    assert raced == 2 * categories
    with search_lease(options, notes.note) as lease:
        plan = make_plan(
            options,
            inputs,
            RaceOptions(top=1, budget=RaceBudget(rounds=1)),
            SearchBudget.parse("none"),
            server_bin=None,
            note=notes.note,
            replayed=20,
        )
        plan = replace(plan, work=replace(plan.work, replicate_per_category=True).predicting(Shape(categories, 8)))
        study = predict_and_race(
            inputs, settings, plan, storage_url=None, server_bin=None, reporter=notes, lease=lease, predict_trials=20
        )
    record = StudyRecord.of(study)
    assert (
        f"predicting on {categories} prompts x 8 tokens, within the budget; the race runs {raced} x 16" in notes.lines
    )
    assert record.measurement["max_tokens"] == 16 and len(record.measurement["prompts"]) == raced
    assert record.prediction["measured_on"]["max_tokens"] == 8
    assert len(record.prediction["measured_on"]["prompts"]) == categories
    baseline = next(t for t in study.trials if TrialRecord.of(t).role == "baseline")
    assert len(baseline.user_attrs["per_prompt"]) == categories  # the prediction's baseline
    race = RaceVerdict.from_dict(record.confirmation)
    assert all(len(r) == raced for r in race.baselines[0].decode_ms[:1])  # the race's first round: every prompt
    assert max(t for r in race.baselines[0].tokens[:1] for t in r) > 8  # at the user's length
    if race.after_decision_round is not None:
        assert len(race.winner.decode_ms[race.after_decision_round]) == categories


def test_a_race_short_of_time_takes_the_finalists_that_play_two_complete_rounds(qwen3_8b):
    """Two complete rounds are where the stratified test first bounds anything: a race budget that holds two
    rounds of four finalists keeps them, one that holds two rounds of three takes three, and none takes fewer
    than MIN_FINALISTS; a budget of rounds keeps every finalist asked."""
    _, work = qwen3_8b
    rounds_of = {top: 2 * race_round_s(replace(work, race_top=top), PACE, work.raced) for top in (2, 3, 4)}
    assert rounds_of[2] < rounds_of[3] < rounds_of[4]
    assert finalists_within(work, PACE, RaceBudget(seconds=rounds_of[4])) == 4
    assert finalists_within(work, PACE, RaceBudget(seconds=rounds_of[4] - 1)) == 3
    assert finalists_within(work, PACE, RaceBudget(seconds=rounds_of[3] - 1)) == 2
    assert finalists_within(work, PACE, RaceBudget(seconds=1.0)) == MIN_FINALISTS == 2
    assert finalists_within(work, PACE, RaceBudget(rounds=4)) == 4
    # the budget's leftover, too short for the asked rounds, is the search budget's: more of it races longer
    assert race_budget_left(work, PACE, rounds_of[2]) == RaceBudget(
        seconds=rounds_of[2] - after_decision_s(work, PACE), cap=SEARCH_BUDGET_CAP
    )


def test_a_draft_models_step_is_priced_at_least_at_the_gpus_launch_floor(qwen3_8b):
    """By file size a 0.6B draft of an 8B target steps in 0.7 ms at 95 tok/s; on a GPU kernel launches set its
    step (GPU_DRAFT_STEP_FLOOR_S), so the chains are priced at least that a decode."""
    _, work = qwen3_8b
    by_size = {p.name: p for p in plan_phases(work, PACE)}["chains"]
    floored = {p.name: p for p in plan_phases(work, replace(PACE, draft_floor_s=GPU_DRAFT_STEP_FLOOR_S))}["chains"]
    assert floored.decodes == by_size.decodes and by_size.seconds < floored.seconds
    assert floored.seconds >= floored.decodes * GPU_DRAFT_STEP_FLOOR_S - 1e-6
