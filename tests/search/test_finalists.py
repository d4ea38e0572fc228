"""Which predicted configurations race: each family's best within its margin of the overall best, a night's
new file's best whatever its prediction, then the seats that cover the top under the prediction's error,
one per region: one biased corner never takes every seat."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.llamacpp.runnable import CommandCheck
from autotune.search.finalists import FAMILY_MARGIN, finalists
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.study.records import TrialRecord, config_attrs, trial_attrs

TARGET, DRAFT, NEW = Path("/m/target.gguf"), Path("/m/draft.gguf"), Path("/m/dspark-new.gguf")
RUNS_ALL = CommandCheck("llama-server")  # no binary here: every mainline flag counts as runnable


def predicted_study(rows: list[tuple[SpecConfig, float]]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    command = ServerCommand(4096)
    for number, (config, speedup) in enumerate(rows):
        counts = {"drafted": number, "accepted": number, "verify_steps": number}  # no two alike
        study.add_trial(
            optuna.trial.create_trial(
                value=speedup,
                user_attrs=trial_attrs(
                    config=config_attrs(config), argv=command.argv(config), predicted={"speedup": speedup, **counts}
                ),
            )
        )
    return study


def ngram(n_max: int) -> SpecConfig:
    return SpecConfig(
        TARGET, "ngram-mod", params={"ngram_mod_n_match": 8, "ngram_mod_n_min": 2, "ngram_mod_n_max": n_max}
    )


def draft(n_max: int, path: Path = DRAFT) -> SpecConfig:
    return SpecConfig(TARGET, "draft-simple", path, {"draft_n_max": n_max})


def labels(picked) -> list[tuple[str, str]]:
    return [(TrialRecord.of(t).label, why) for t, why in picked]


def test_a_family_within_its_margin_races_though_ranked_below_the_top():
    ngrams = [(ngram(n), 1.60 - n / 100) for n in range(10, 20)]  # 1.50-1.59x, ten of them
    close_draft = 1.59 / (1 + FAMILY_MARGIN["draft model"]) + 0.01  # just inside its 35 % margin
    study = predicted_study([*ngrams, (draft(3), close_draft), (draft(5), close_draft - 0.05)])
    picked = labels(finalists(study, 4, RUNS_ALL))
    assert len(picked) == 4 and picked[0][1] == "the best predicted"
    assert (draft(3).describe(), "its family's best, within its 35% margin") in picked
    assert draft(5).describe() not in [label for label, _ in picked]  # only the family's best is given a seat


def test_a_family_outside_its_margin_is_left_to_rank():
    study = predicted_study([*((ngram(n), 1.60 - n / 100) for n in range(10, 20)), (draft(3), 1.0)])
    assert draft(3).describe() not in [label for label, _ in labels(finalists(study, 4, RUNS_ALL))]


def test_a_new_release_races_whatever_its_prediction():
    new = SpecConfig(TARGET, "draft-dspark", NEW, {"draft_n_max": 3})
    study = predicted_study([*((ngram(n), 1.60 - n / 100) for n in range(10, 20)), (new, 0.40)])
    picked = labels(finalists(study, 2, RUNS_ALL, new_files=frozenset({NEW.name})))
    assert (new.describe(), f"the best predicted with the new {NEW.name}") in picked
    assert len(picked) == 2 and picked[0][1] == "the best predicted"


def ngram_simple(m: int, n: int) -> SpecConfig:
    return SpecConfig(TARGET, "ngram-simple", params={"ngram_simple_size_n": n, "ngram_simple_size_m": m})


def test_near_duplicates_of_one_type_do_not_fill_the_race():
    study = predicted_study([(ngram(10), 1.50), (ngram(11), 1.495), (ngram(12), 1.40), (ngram(13), 1.30)])
    picked = [label for label, _ in labels(finalists(study, 3, RUNS_ALL))]
    assert picked == [ngram(10).describe(), ngram(12).describe(), ngram(13).describe()]  # one region: the race
    # keeps its size, but 11 (within 2 % of 10) never races beside it


def test_one_biased_corner_cannot_take_every_seat_and_the_best_outside_it_races():
    """Issue 50's demo: ngram-simple m13-18 predicted 1.67-1.82x took all four seats; m3/n2, predicted
    lower, was the grid's best on held-out prompts."""
    corner = {(m, n): 1.82 - abs(m - 15) / 50 - abs(n - 4) / 50 for m in range(13, 19) for n in range(3, 7)}
    rest = {(m, n): 1.20 for m in (2, 3, 4, 6, 8, 24, 32) for n in (1, 2, 3)}
    grid = {**rest, (3, 2): 1.60, **corner}
    study = predicted_study([(ngram_simple(m, n), speedup) for (m, n), speedup in grid.items()])
    picked = labels(finalists(study, 4, RUNS_ALL))
    outside = [label for label, _ in picked if label not in {ngram_simple(m, n).describe() for m, n in corner}]
    assert outside == [ngram_simple(3, 2).describe()] and len(picked) == 4  # 1.20x is out of any error seen
    assert picked[0] == (ngram_simple(15, 4).describe(), "the best predicted")
    assert all(why.endswith("chance of being the fastest") for _, why in picked[1:])


@pytest.mark.parametrize("family", sorted(FAMILY_MARGIN))
def test_every_family_has_a_stated_margin(family):
    assert 0 < FAMILY_MARGIN[family] < 1
