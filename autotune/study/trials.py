"""Which trials are which: references, drift checks, the baselines each speedup divides by, and the
trials that count against --trials. Read through `TrialRecord` (autotune.study.records)."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.study.records import BASELINE_ROLE, REFERENCE_ROLES, SPEC_DEFAULT_ROLE, TrialRecord

COMPLETE = optuna.trial.TrialState.COMPLETE
FINISHED = (COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)


def is_baseline(trial: optuna.trial.FrozenTrial) -> bool:
    return TrialRecord.of(trial).role == BASELINE_ROLE


def is_spec_default(trial: optuna.trial.FrozenTrial) -> bool:
    return TrialRecord.of(trial).role == SPEC_DEFAULT_ROLE


def is_reference(trial: optuna.trial.FrozenTrial) -> bool:
    """A reference trial (the baseline or llama.cpp's default): measured by the study, never sampled."""
    return TrialRecord.of(trial).role in REFERENCE_ROLES


def is_drift_check(trial: optuna.trial.FrozenTrial) -> bool:
    """A reference re-measured between search trials to see drift (not counted against --trials)."""
    return is_reference(trial) and TrialRecord.of(trial).drift_check


def decode_tok_s(trial: optuna.trial.FrozenTrial) -> float:
    """The trial's mix decode tok/s, whatever the study's objective."""
    return float(TrialRecord.of(trial).figures["mix_tok_s"])


def baselines_of(study: optuna.Study, target: Path, role: str = BASELINE_ROLE) -> list[optuna.trial.FrozenTrial]:
    """Completed measurements of `target`'s reference `role` (its baseline by default), oldest first."""
    found = []
    for trial in study.get_trials(deepcopy=False, states=(COMPLETE,)):
        record = TrialRecord.of(trial)
        if record.role == role and record.config["target"] == str(target):
            found.append(trial)
    return found


def baseline_trial(study: optuna.Study, target: Path) -> optuna.trial.FrozenTrial | None:
    """The first completed baseline of `target`: the reference output and speed."""
    found = baselines_of(study, target)
    return found[0] if found else None


def latest_baseline(study: optuna.Study, target: Path) -> optuna.trial.FrozenTrial | None:
    """The most recent completed baseline of `target`: speedups divide by it, so drift cancels."""
    found = baselines_of(study, target)
    return found[-1] if found else None


def spec_default_near(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> optuna.trial.FrozenTrial | None:
    """The `--spec-default` measurement of `trial`'s target nearest before it (else the first after it):
    the one measured under the most similar conditions."""
    found = baselines_of(study, Path(TrialRecord.of(trial).config["target"]), SPEC_DEFAULT_ROLE)
    before = [t for t in found if t.number <= trial.number]
    return before[-1] if before else (found[0] if found else None)


def is_counted(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial counts against --trials: the first baseline and the search trials do; drift checks
    and llama.cpp's default (a reference the study adds) do not."""
    return not is_drift_check(trial) and not is_spec_default(trial)


def counted_trials(study: optuna.Study) -> int:
    """Finished trials that count against --trials (is_counted): not interrupted trials either, nor
    trials of a dead worker that were re-queued (their copy counts)."""
    trials = study.get_trials(deepcopy=False)
    records = {t.number: TrialRecord.of(t) for t in trials}
    requeued = {r.requeued_from for r in records.values() if r.requeued_from is not None}
    return sum(
        t.state in FINISHED and is_counted(t) and not records[t.number].interrupted and t.number not in requeued
        for t in trials
    )


def drift_corrected(trial: optuna.trial.FrozenTrial, complete: list[optuna.trial.FrozenTrial]) -> float | None:
    """A trial's objective over that of the baseline its speedup divides by (a baseline: 1), so trials
    measured while the machine ran hot or cold compare fairly. None without that baseline: a raw tok/s
    is never ranked against ratios."""
    if is_baseline(trial):
        return 1.0
    reference = TrialRecord.of(trial).speedup_baseline_trial
    baseline = next((t for t in complete if t.number == reference), None)
    return trial.values[0] / baseline.values[0] if baseline is not None and baseline.values[0] else None
