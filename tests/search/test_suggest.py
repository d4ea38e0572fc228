"""What the sampler proposes is what is measured: bounded parameters are asked within their bound."""

from __future__ import annotations

import warnings
from pathlib import Path

import optuna
import pytest
import tomllib

from autotune.models.candidates import Candidates
from autotune.search.measured import suggest_config
from autotune.spec.space import parse_space
from autotune.testing.tiny_gguf import tiny_space

#: the tiny space with draft-simple's n-min bounded by its n-max, and ngram-simple's m by its n
SPACE = tiny_space(
    spec_types={
        "draft-simple": {"draft_n_max": (1, 6), "draft_n_min": (3, 5)},
        "ngram-simple": {"ngram_simple_size_n": (1, 6), "ngram_simple_size_m": (2, 8)},
    }
)
TARGET, DRAFT = Path("tiny-target.gguf"), Path("tiny-draft.gguf")
CANDIDATES = Candidates(targets=(TARGET,), pairs={"draft-simple": ((TARGET, DRAFT),)})


def space(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(SPACE)
    return parse_space(path, tomllib.loads(SPACE))


def proposals(tmp_path, sampler: optuna.samplers.BaseSampler, n: int) -> list[tuple[dict, dict]]:
    """(the sampler's params, the measured configuration's params) of up to `n` trials."""
    study = optuna.create_study(sampler=sampler, direction="maximize")
    found = []
    bounded = space(tmp_path)

    def objective(trial: optuna.Trial) -> float:
        config = suggest_config(trial, bounded, CANDIDATES)
        found.append((dict(trial.params), dict(config.params)))
        return float(sum(v for v in config.params.values() if isinstance(v, int)))

    study.optimize(objective, n_trials=n)  # BruteForce stops the study once it has proposed everything
    return found


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_every_asked_value_is_the_measured_one_and_every_bound_holds(tmp_path, sampler):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        made = (
            optuna.samplers.TPESampler(seed=3, multivariate=True, group=True, n_startup_trials=8)
            if sampler == "tpe"
            else optuna.samplers.RandomSampler(seed=3)
        )
    for asked, measured in proposals(tmp_path, made, 80):
        for name, value in asked.items():
            if name in measured:
                assert measured[name] == value, (asked, measured)
        if "draft_n_min" in measured:
            assert measured["draft_n_min"] <= measured["draft_n_max"]
            if measured["draft_n_max"] < 3:  # below n-min's range: the bound, not asked
                assert measured["draft_n_min"] == measured["draft_n_max"] and "draft_n_min" not in asked
        if "ngram_simple_size_m" in measured:
            assert measured["ngram_simple_size_m"] >= measured["ngram_simple_size_n"]


def test_brute_force_proposes_each_runnable_configuration_once(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        found = proposals(tmp_path, optuna.samplers.BruteForceSampler(seed=1), 500)
    measured = [tuple(sorted(m.items())) for _, m in found]
    assert len(measured) == len(set(measured))
    # draft-simple: n_max 1..6, n_min within [3, 5] and <= n_max (n_max 1, 2: fixed) -> 1+1+1+2+3+3 = 11;
    # ngram-simple: n 1..6, m within [max(2, n), 8] -> 7+7+6+5+4+3 = 32
    assert len(measured) == 11 + 32
