"""Reading what the tuner stored on trials: configurations, roles and baselines."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.spec.config import SpecConfig

BASELINE_ROLE = "baseline"
#: llama.cpp's own default (`--spec-default`), measured beside the baseline as a second reference
SPEC_DEFAULT_ROLE = "spec-default"
REFERENCE_ROLES = (BASELINE_ROLE, SPEC_DEFAULT_ROLE)
WARM_START_ROLE = "warm-start"
COMPLETE = optuna.trial.TrialState.COMPLETE
FINISHED = (COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)


def config_attrs(config: SpecConfig) -> dict:
    """The `config` user attribute of a trial."""
    return {
        "spec_type": config.spec_type,
        "target": str(config.target),
        "draft": str(config.draft) if config.draft else None,
        "params": dict(config.params),
        "runtime": dict(config.runtime),
        "label": config.describe(),
    }


def config_from_attrs(attrs: dict) -> SpecConfig:
    """The SpecConfig a trial's `config` user attribute describes."""
    draft = Path(attrs["draft"]) if attrs["draft"] else None
    return SpecConfig(Path(attrs["target"]), attrs["spec_type"], draft, attrs["params"], runtime=attrs.get("runtime", {}))


def is_baseline(trial: optuna.trial.FrozenTrial) -> bool:
    return trial.user_attrs.get("role") == BASELINE_ROLE


def is_spec_default(trial: optuna.trial.FrozenTrial) -> bool:
    return trial.user_attrs.get("role") == SPEC_DEFAULT_ROLE


def is_reference(trial: optuna.trial.FrozenTrial) -> bool:
    """A reference trial (the baseline or llama.cpp's default): measured by the study, never sampled."""
    return trial.user_attrs.get("role") in REFERENCE_ROLES


def is_drift_check(trial: optuna.trial.FrozenTrial) -> bool:
    """A reference re-measured between search trials to see drift (not counted against --trials)."""
    return is_reference(trial) and bool(trial.user_attrs.get("drift_check"))


def decode_tok_s(trial: optuna.trial.FrozenTrial) -> float:
    """The trial's mix decode tok/s, whatever the study's objective."""
    return float(trial.user_attrs["figures"]["mix_tok_s"])


def baselines_of(study: optuna.Study, target: Path, role: str = BASELINE_ROLE) -> list[optuna.trial.FrozenTrial]:
    """Completed measurements of `target`'s reference `role` (its baseline by default), oldest first."""
    return [t for t in study.get_trials(deepcopy=False, states=(COMPLETE,))
            if t.user_attrs.get("role") == role and t.user_attrs["config"]["target"] == str(target)]


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
    found = baselines_of(study, Path(trial.user_attrs["config"]["target"]), SPEC_DEFAULT_ROLE)
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
    requeued = {t.user_attrs["requeued_from"] for t in trials if "requeued_from" in t.user_attrs}
    return sum(t.state in FINISHED and is_counted(t) and not t.user_attrs.get("interrupted")
               and t.number not in requeued for t in trials)


def drift_corrected(trial: optuna.trial.FrozenTrial, complete: list[optuna.trial.FrozenTrial]) -> float:
    """A trial's objective over that of the baseline measured nearest before it (a baseline: 1), so trials
    measured while the machine ran hot or cold compare fairly; raw when no baseline came before."""
    if is_baseline(trial):
        return 1.0
    reference = trial.user_attrs.get("speedup_baseline_trial")
    baseline = next((t for t in complete if t.number == reference), None)
    return trial.values[0] / baseline.values[0] if baseline is not None and baseline.values[0] else trial.values[0]
