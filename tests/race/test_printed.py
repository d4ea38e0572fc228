"""What a verdict prints (autotune.cli.output.race_lines) of a race stored by autotune.race.record: the
winner's interval is the one that decided, its point inside it and its level named once; the round after
the decision is printed apart as a replication; a rival still within reach and a void round are said.
Rows are built from decode times by the race's paired rule (autotune.testing.races)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from autotune.cli.output import race_lines, race_table
from autotune.study.verdict import (
    BUDGET_SPENT,
    CONFIRM_ROUNDS_CAP,
    RACE_BUDGET_CAP,
    SEARCH_BUDGET_CAP,
    SPACE_BUDGET_CAP,
    RaceVerdict,
)
from autotune.testing.races import raced_row, scaled

BASELINE_MS = [[400.0, 650.0, 300.0, 520.0]] * 3


def verdict(**winner_fields) -> RaceVerdict:
    winner = raced_row(
        "ngram-simple n=3",
        "trial",
        scaled(BASELINE_MS, 1.3, 0.02, seed=1),
        baseline_ms=BASELINE_MS,
        trial=7,
        significant=True,
    )
    winner = replace(
        winner,
        speedup=1.26,
        speedup_at_decision=1.31,
        speedup_ci=(1.12, 1.52),
        speedup_ci_level=1 - 0.0125,
        decided_by="stratified rounds",
        replication_ci=(1.2, 1.33),
        **winner_fields,
    )
    baseline = raced_row("none", "baseline", BASELINE_MS)
    return RaceVerdict(
        "server", "b1", 3, "2026-12-07", [baseline], [winner], pairing="prompt", decided_round=1, after_decision_round=2
    )


def test_the_winner_prints_the_interval_that_decided_with_its_point_inside_and_one_level():
    lines = race_lines(verdict(), verdict().configs[0])
    head = lines[0]
    point, low, high = map(float, re.search(r"# (\d\.\d\d)x .*\[97\.5% CI (\d\.\d\d)-(\d\.\d\d)\]", head).groups())
    assert low <= point <= high and (point, low, high) == (1.31, 1.12, 1.52)
    assert len(re.findall(r"% CI", head)) == 1 and "proven by the stratified rounds in round 2" in head
    assert lines[1] == (
        "# replicated on fresh servers after the decision: 1.26x [95% CI 1.20-1.33], that round alone "
        "(a race stops where its estimate is high; this is the figure to expect)"
    )
    assert all(len(re.findall(r"% CI", line)) <= 1 for line in lines)


def test_a_rival_still_within_reach_and_a_void_round_are_said():
    race = replace(
        verdict(),
        ended=BUDGET_SPENT,
        within_reach=["ngram-mod 9/37/0"],
        void_rounds=["round 2: the plain command against itself ran 1.081x, more than 4 sd from 1.00x"],
    )
    lines = race_lines(race, race.configs[0])
    assert (
        "# the budget ended before every rival was ruled out: ngram-mod 9/37/0 may still be within 2% of it; "
        "`--race-budget N` races longer"
    ) in lines
    assert lines[-1].startswith("# 1 round(s) set aside and played again, their control having moved: round 2: ")


def test_a_race_the_searchs_budget_cut_short_names_that_budget_as_what_races_longer():
    race = replace(verdict(), ended=BUDGET_SPENT, within_reach=["ngram-mod 9/37/0"], budget_cap=SEARCH_BUDGET_CAP)
    assert race.within_reach and any(
        line.endswith("may still be within 2% of it; a longer `--budget` races longer")
        for line in race_lines(race, race.configs[0])
    )
    plain = race_lines(race, race.baselines[0])  # where the plain command is the pick: why the fastest is not
    assert any("ngram-simple n=3" in line and line.endswith("; a longer `--budget` races longer") for line in plain)
    assert not any("--race-budget" in line for line in plain)
    assert RaceVerdict.from_dict(race.as_dict()).budget_cap == SEARCH_BUDGET_CAP
    stored_before_the_kinds = {k: v for k, v in race.as_dict().items() if k != "budget_cap"}
    assert (
        RaceVerdict.from_dict({**stored_before_the_kinds, "budget_option": "--budget"}).budget_cap == SEARCH_BUDGET_CAP
    )


@pytest.mark.parametrize(
    ("cap", "advice"),
    [
        (RACE_BUDGET_CAP, "`--race-budget N` races longer"),
        (CONFIRM_ROUNDS_CAP, "`--repeats N` races longer"),
        (SPACE_BUDGET_CAP, "a longer `--budget` (the search space's budget_per_target capped it) races longer"),
    ],
)
def test_the_verdict_stores_what_capped_the_race_and_the_cli_names_the_option(cap, advice):
    race = replace(verdict(), ended=BUDGET_SPENT, within_reach=["ngram-mod 9/37/0"], budget_cap=cap)
    assert race.as_dict()["budget_cap"] == cap and "budget_option" not in race.as_dict()
    assert any(line.endswith(f"may still be within 2% of it; {advice}") for line in race_lines(race, race.configs[0]))


def test_the_table_prints_the_decisions_point_and_each_rows_coverage_and_a_stored_race_reads_back():
    race = verdict()
    table = race_table(race).splitlines()
    row = next(line for line in table if "ngram-simple n=3" in line)
    assert row.split()[:3] == ["1.31x", "97.5%", "1.12-1.52"] and row.endswith(
        "[at the decision; replicated 1.26x after it]"
    )
    restored = RaceVerdict.from_dict(race.as_dict())
    assert restored.configs[0].replication_ci == (1.2, 1.33) and restored.configs[0].decided_by == "stratified rounds"
    older = race.as_dict()
    for key in ("void_rounds", "within_reach"):
        older.pop(key)
    for row in older["configs"] + older["baselines"]:
        row.pop("decided_by"), row.pop("replication_ci")
    old = RaceVerdict.from_dict(older)  # a race stored before issue 50 prints its one interval, as it did
    assert race_lines(old, old.configs[0])[0].startswith(
        "# 1.26x the plain command's speed on fresh servers after the decision [97.5% CI 1.12-1.52]"
    )
