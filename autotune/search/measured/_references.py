"""The references every study measures beside its search trials: one baseline (`none`) per target,
then llama.cpp's own `--spec-default` on each where the engine runs it (on llama-server: where the
binary lists `--spec-default`, or runs that configuration by default, when it is measured with no
speculative flag; see autotune.spec.default). They are enqueued (never sampled), re-measured every
`--baseline-every` search trials, and a dead worker's reference is measured again once. Speedups
divide by the baseline measured nearest before a trial, and the pruner sees each prompt's score over
that baseline's, so drift (heat, other load) cancels.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import optuna

from autotune.engines.base import Engine
from autotune.engines.orphans import is_gone
from autotune.engines.server import ServerEngine
from autotune.measure.measurement import GenerationResult
from autotune.spec.config import SpecConfig
from autotune.spec.default import SPEC_DEFAULT_PARAMS, SPEC_DEFAULT_TYPE, names_spec_default, spec_default_config
from autotune.spec.types import SPEC_TYPE_PARAMS
from autotune.study.records import (
    BASELINE_ROLE,
    REFERENCE_ROLES,
    SPEC_DEFAULT_ROLE,
    TrialRecord,
    store_trial,
    trial_attrs,
)
from autotune.study.trials import baseline_trial, baselines_of, is_baseline, is_reference, latest_baseline

#: how long a trial that finished first waits for the baseline another worker is measuring
BASELINE_WAIT_S = 900


def measures_spec_default(engine: Engine) -> bool:
    """Whether the engine runs llama.cpp's default: ngram-mod, with every parameter it sets, and on
    llama-server only where the binary names that default (`names_spec_default`)."""
    params = SPEC_TYPE_PARAMS[SPEC_DEFAULT_TYPE]
    runs = SPEC_DEFAULT_TYPE in engine.runnable_spec_types and all(
        engine.supports_param(params[name]) for name in SPEC_DEFAULT_PARAMS
    )
    return runs and (not isinstance(engine, ServerEngine) or names_spec_default(engine.capabilities))


def reference_configs(targets: list[Path], *, with_spec_default: bool) -> list[tuple[str, SpecConfig]]:
    """(role, configuration) of each reference: one baseline per target file (every speedup compares
    against its own target), then llama.cpp's default on each when `with_spec_default`."""
    references = [(BASELINE_ROLE, SpecConfig(target=target)) for target in targets]
    if with_spec_default:
        references += [(SPEC_DEFAULT_ROLE, spec_default_config(target)) for target in targets]
    return references


def reference_config(record: TrialRecord) -> SpecConfig:
    """What an enqueued reference trial measures."""
    target = Path(record.target)
    return SpecConfig(target=target) if record.role == BASELINE_ROLE else spec_default_config(target)


def enqueue_missing(study: optuna.Study, references: list[tuple[str, SpecConfig]]) -> None:
    """Enqueue each reference that has neither completed nor is waiting (another worker's)."""
    for role, config in references:
        if not baselines_of(study, config.target, role) and not _reference_waiting(study, config.target, role):
            study.enqueue_trial({}, user_attrs=trial_attrs(role=role, target=str(config.target)))


def enqueue_drift_checks(study: optuna.Study, references: list[tuple[str, SpecConfig]]) -> None:
    for role, config in references:
        study.enqueue_trial({}, user_attrs=trial_attrs(role=role, target=str(config.target), drift_check=True))


def wait_for_baseline(
    study: optuna.Study, target: Path, *, timeout_s: float = BASELINE_WAIT_S, poll_s: float = 0.5
) -> optuna.trial.FrozenTrial | None:
    """`target`'s first completed baseline, waiting while another worker measures one; None when none
    completed and none is running (it failed, or is still queued) or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = baseline_trial(study, target)
        if found is not None:
            return found
        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        if time.monotonic() > deadline or not any(
            is_baseline(t) and TrialRecord.of(t).target == str(target) for t in running
        ):
            return None
        time.sleep(poll_s)


def search_trials_since_reference(study: optuna.Study) -> int:
    count = 0
    for trial in reversed(study.get_trials(deepcopy=False)):
        if is_reference(trial):
            break
        count += trial.state.is_finished()
    return count


def baseline_prompt_scores(study: optuna.Study, target: Path, prompt_score) -> list[float] | None:
    """Each prompt's score in the latest baseline of `target` (None before one completed)."""
    latest = latest_baseline(study, target)
    if latest is None:
        return None
    names = {f.name for f in dataclasses.fields(GenerationResult)}
    return [
        prompt_score(GenerationResult(**{k: v for k, v in row.items() if k in names}))
        for row in TrialRecord.of(latest).per_prompt
    ]


def drift_corrected_score(score: float, index: int, reference: list[float] | None, is_baseline: bool) -> float:
    """What the pruner sees for prompt `index`: the score over the nearest baseline's on that prompt, so
    a trial measured while the machine ran slower is not pruned for the machine's sake; a baseline is
    1 by definition. Raw while no baseline completed."""
    if is_baseline:
        return 1.0
    if reference is None or index >= len(reference) or not reference[index]:
        return score
    return score / reference[index]


def requeue_stale_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Optuna's heartbeat failed `trial` because its worker died: measure the same configuration again,
    unless that configuration already killed a python engine's worker (a trial with `worker_died`) or
    `trial` was itself a re-queue, i.e. the configuration died twice (its process may have died with
    the worker and recorded nothing). Such a trial stays FAIL, once: a crashing configuration is not
    retried forever. A reference that a worker starting meanwhile enqueued again is not re-queued either."""
    dead = TrialRecord.of(trial)
    if dead.requeued_from is not None or _reference_replaced(study, trial):
        return
    if any(
        TrialRecord.of(t).worker_died and t.params == trial.params and TrialRecord.of(t).target == dead.target
        for t in study.get_trials(deepcopy=False)
    ):  # the target tells baselines apart: they have no params
        return
    kept = {key: value for key, value in _identity(dead).items() if value}
    study.enqueue_trial(trial.params, user_attrs=trial_attrs(**kept, requeued_from=trial.number))


def fail_trials_of_dead_runs(study: optuna.Study) -> int:
    """Fail and re-queue (as the heartbeat would, without its grace period) every RUNNING trial whose
    autotune process ran on this host and is gone (killed with SIGKILL, by the OOM killer, a power
    loss); returns how many."""
    failed = 0
    for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        owner = TrialRecord.of(frozen).owner
        if not owner or not is_gone(owner):
            continue
        trial = optuna.trial.Trial(study, frozen._trial_id)
        store_trial(trial, fail_reason=f"its autotune process (pid {owner['pid']}) died while measuring it")
        study._storage.set_trial_state_values(frozen._trial_id, optuna.trial.TrialState.FAIL)
        requeue_stale_trial(study, study._storage.get_trial(frozen._trial_id))
        failed += 1
    return failed


def _identity(record: TrialRecord) -> dict:
    """What the study enqueued a trial as: its role, a reference's target, whether a drift check."""
    return {"role": record.role, "target": record.target, "drift_check": record.drift_check}


def _reference_waiting(study: optuna.Study, target: Path, role: str) -> bool:
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    return any(TrialRecord.of(t).role == role and TrialRecord.of(t).target == str(target) for t in waiting)


def _reference_replaced(study: optuna.Study, dead: optuna.trial.FrozenTrial) -> bool:
    """Whether a reference trial of a dead worker was already replaced: a worker that started while it
    still ran enqueued the same reference (role, target, drift check or not) after it, so re-queuing the
    dead one would measure the reference twice."""
    identity = _identity(TrialRecord.of(dead))
    if identity["role"] not in REFERENCE_ROLES:
        return False
    return any(
        t.number > dead.number and t.state != optuna.trial.TrialState.FAIL and _identity(TrialRecord.of(t)) == identity
        for t in study.get_trials(deepcopy=False)
    )
