"""The prediction's error per family: its prior, moved by what this key's earlier races measured of their
finalists, and the band `trials` shows beside each prediction."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from scipy.stats import norm

from autotune.search.finalists._error import BAND_LEVEL, PRIOR_ERROR_SD, PRIOR_WEIGHT, band, family_error_sds, floored
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.study.best import trial_rows
from autotune.study.records import config_attrs, trial_attrs
from autotune.study.verdict import RacedConfig, RaceVerdict

TARGET = Path("/m/target.gguf")
BASE = "tiny@cpu:predicted"
NGRAM = SpecConfig(TARGET, "ngram-simple", params={"ngram_simple_size_n": 2, "ngram_simple_size_m": 3})
DRAFT = SpecConfig(TARGET, "draft-simple", Path("/m/draft.gguf"), {"draft_n_max": 3})


def predicted_trial(config: SpecConfig, speedup: float, **predicted) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        value=speedup,
        user_attrs=trial_attrs(
            config=config_attrs(config),
            argv=ServerCommand(4096).argv(config),
            predicted={"speedup": speedup, **predicted},
        ),
    )


def raced(trial: int, family: str, speedup: float, failure: str | None = None) -> RacedConfig:
    return RacedConfig(
        label=f"#{trial}",
        role="trial",
        trial=trial,
        target=str(TARGET),
        argv=[],
        samples=[],
        mean_tok_s=0.0,
        ci95=(0.0, 0.0),
        p_value=None,
        speedup=speedup,
        failure=failure,
        family=family,
    )


@pytest.fixture
def storage(tmp_path):
    return optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'runs.db'}")


def test_a_first_run_takes_each_familys_prior(storage):
    study = optuna.create_study(storage=storage, study_name=BASE)
    assert family_error_sds(study) == PRIOR_ERROR_SD


def test_an_earlier_races_finalists_move_the_sd_toward_what_they_measured(storage):
    earlier = optuna.create_study(storage=storage, study_name=BASE)
    earlier.add_trials([predicted_trial(NGRAM, 1.80), predicted_trial(DRAFT, 1.20), predicted_trial(DRAFT, 1.10)])
    confirmation = RaceVerdict(
        "server",
        "b1",
        2,
        "2025-01-01",
        baselines=[],
        configs=[
            raced(0, "n-gram", 1.50),
            raced(1, "draft model", 1.25),
            raced(2, "draft model", 0.5, failure="crashed"),
        ],
    )
    earlier.set_user_attr("confirmation", confirmation.as_dict())
    unraced = optuna.create_study(storage=storage, study_name=f"{BASE}/v2")  # stopped before its race: no errors
    unraced.add_trials([predicted_trial(NGRAM, 3.0)])
    now = optuna.create_study(storage=storage, study_name=f"{BASE}/v3")

    sds = family_error_sds(now)

    def pooled(prior: float, error: float) -> float:
        return math.sqrt((PRIOR_WEIGHT * prior**2 + error**2) / (PRIOR_WEIGHT + 1))

    assert sds["n-gram"] == pytest.approx(pooled(PRIOR_ERROR_SD["n-gram"], math.log(1.80 / 1.50)))
    assert sds["draft model"] == pytest.approx(pooled(PRIOR_ERROR_SD["draft model"], math.log(1.20 / 1.25)))
    assert sds["block draft"] == PRIOR_ERROR_SD["block draft"]  # nothing raced: its prior


def test_the_band_holds_its_level_under_the_sd_and_trials_shows_it():
    low, high = band(1.60, 0.10)
    assert norm.cdf(math.log(high / 1.60) / 0.10) - norm.cdf(math.log(low / 1.60) / 0.10) == pytest.approx(
        BAND_LEVEL, abs=1e-3
    )
    study = optuna.create_study(direction="maximize")
    study.add_trial(predicted_trial(NGRAM, 1.60, error_sd=0.10, speedup_band=[low, high]))
    assert trial_rows(study)[0]["predicted_band"] == [low, high]


def test_the_calibrations_own_error_is_the_floor():
    assert floored(0.10, 0.25) == pytest.approx(math.log(1.25), abs=1e-4)
    assert floored(0.10, 0.02) == 0.10 and floored(0.10, None) == 0.10
