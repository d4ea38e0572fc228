"""`best` and the confirmation's finalists rank trials by their speedup over the nearest baseline, not by
raw tok/s measured while the machine drifted."""

from __future__ import annotations

import optuna

from autotune.confirm import top_trials
from autotune.results import best_result


def _trial(number_tok_s: float, *, baseline: bool = False, reference: int | None = None, n: int = 0):
    config = {"spec_type": "none" if baseline else "ngram-simple", "target": "/m/t.gguf", "draft": None,
              "params": {} if baseline else {"ngram_simple_size_n": n}, "label": "none" if baseline else f"ngram {n}"}
    attrs = {"config": config, "figures": {"mix_tok_s": number_tok_s}, "argv": ["llama-server", "-m", "/m/t.gguf"]}
    if baseline:
        attrs["role"] = "baseline"
    else:
        attrs.update(lossless=True, speedup_baseline_trial=reference)
    return optuna.trial.create_trial(value=number_tok_s, user_attrs=attrs)


def test_a_trial_measured_on_a_cold_machine_is_not_beaten_by_one_measured_hot():
    study = optuna.create_study(direction="maximize")
    study.add_trial(_trial(100.0, baseline=True))            # 0: baseline
    study.add_trial(_trial(120.0, reference=0, n=1))         # 1: 1.20x
    study.add_trial(_trial(60.0, baseline=True))             # 2: drift check, the machine slowed
    study.add_trial(_trial(90.0, reference=2, n=2))          # 3: 1.50x, though fewer raw tok/s
    assert best_result(study).trial.number == 3
    assert [t.number for t in top_trials(study, 2)] == [3, 1]
