"""`best`, the confirmation's finalists and the pruner rank trials by their speedup over the nearest baseline, not by
raw tok/s measured while the machine drifted."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.race.confirm import top_trials
from autotune.search.measured._references import baseline_prompt_scores, drift_corrected_score
from autotune.study.best import best_result


def _trial(number_tok_s: float, *, baseline: bool = False, reference: int | None = None, n: int = 0):
    config = {
        "spec_type": "none" if baseline else "ngram-simple",
        "target": "/m/t.gguf",
        "draft": None,
        "params": {} if baseline else {"ngram_simple_size_n": n},
        "label": "none" if baseline else f"ngram {n}",
    }
    attrs = {"config": config, "figures": {"mix_tok_s": number_tok_s}, "argv": ["llama-server", "-m", "/m/t.gguf"]}
    if baseline:
        attrs["role"] = "baseline"
    else:
        attrs.update(lossless=True, speedup_baseline_trial=reference)
    return optuna.trial.create_trial(value=number_tok_s, user_attrs=attrs)


def test_a_trial_measured_on_a_cold_machine_is_not_beaten_by_one_measured_hot():
    study = optuna.create_study(direction="maximize")
    study.add_trial(_trial(100.0, baseline=True))  # 0: baseline
    study.add_trial(_trial(120.0, reference=0, n=1))  # 1: 1.20x
    study.add_trial(_trial(60.0, baseline=True))  # 2: drift check, the machine slowed
    study.add_trial(_trial(90.0, reference=2, n=2))  # 3: 1.50x, though fewer raw tok/s
    assert best_result(study).trial.number == 3
    assert [t.number for t in top_trials(study, 2)] == [3, 1]


def test_the_pruner_sees_each_prompt_over_the_nearest_baselines_score():
    study = optuna.create_study(direction="maximize")
    first = _trial(100.0, baseline=True)
    first.user_attrs["per_prompt"] = [
        {
            "prompt_id": "a",
            "category": "qa",
            "n_prompt": 5,
            "prompt_ms": 10.0,
            "n_generated": 11,
            "decode_ms": 100.0,
            "decode_tok_s": 100.0,
        }
    ]
    study.add_trial(first)
    drifted = _trial(60.0, baseline=True)  # a drift check: the machine now runs at 0.6
    drifted.user_attrs["per_prompt"] = [{**first.user_attrs["per_prompt"][0], "decode_ms": 166.7}]
    study.add_trial(drifted)
    reference = baseline_prompt_scores(study, Path("/m/t.gguf"), lambda r: r.decode_tok_s)
    assert reference == [pytest.approx(60.0, rel=1e-3)]
    # 72 tok/s on the slow machine is 1.2x its baseline: reported as such, not as a loss against 100
    assert drift_corrected_score(72.0, 0, reference, is_baseline=False) == pytest.approx(1.2, rel=1e-3)
    assert drift_corrected_score(60.0, 0, reference, is_baseline=True) == 1.0
    assert drift_corrected_score(72.0, 0, None, is_baseline=False) == 72.0
