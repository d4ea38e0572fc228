"""Reading what the tuner stored on trials: configurations, roles and baselines."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.spec import SpecConfig

BASELINE_ROLE = "baseline"
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


def is_drift_check(trial: optuna.trial.FrozenTrial) -> bool:
    """A baseline re-measured between search trials to see drift (not counted against --trials)."""
    return is_baseline(trial) and bool(trial.user_attrs.get("drift_check"))


def decode_tok_s(trial: optuna.trial.FrozenTrial) -> float:
    """The trial's mix decode tok/s, whatever the study's objective."""
    return float(trial.user_attrs["figures"]["mix_tok_s"])


def baselines_of(study: optuna.Study, target: Path) -> list[optuna.trial.FrozenTrial]:
    """Completed baseline measurements of `target`, oldest first."""
    return [t for t in study.get_trials(deepcopy=False, states=(COMPLETE,))
            if is_baseline(t) and t.user_attrs["config"]["target"] == str(target)]


def baseline_trial(study: optuna.Study, target: Path) -> optuna.trial.FrozenTrial | None:
    """The first completed baseline of `target`: the reference output and speed."""
    found = baselines_of(study, target)
    return found[0] if found else None


def latest_baseline(study: optuna.Study, target: Path) -> optuna.trial.FrozenTrial | None:
    """The most recent completed baseline of `target`: speedups divide by it, so drift cancels."""
    found = baselines_of(study, target)
    return found[-1] if found else None


def counted_trials(study: optuna.Study) -> int:
    """Finished trials that count against --trials: not drift checks, not interrupted trials, and not
    trials of a dead worker that were re-queued (their copy counts)."""
    trials = study.get_trials(deepcopy=False)
    requeued = {t.user_attrs["requeued_from"] for t in trials if "requeued_from" in t.user_attrs}
    return sum(t.state in FINISHED and not is_drift_check(t) and not t.user_attrs.get("interrupted")
               and t.number not in requeued for t in trials)


def drift_corrected(trial: optuna.trial.FrozenTrial, complete: list[optuna.trial.FrozenTrial]) -> float:
    """A trial's objective over that of the baseline measured nearest before it (a baseline: 1), so trials
    measured while the machine ran hot or cold compare fairly; raw when no baseline came before."""
    if is_baseline(trial):
        return 1.0
    reference = trial.user_attrs.get("speedup_baseline_trial")
    baseline = next((t for t in complete if t.number == reference), None)
    return trial.values[0] / baseline.values[0] if baseline is not None and baseline.values[0] else trial.values[0]
