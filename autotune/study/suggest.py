"""What a search trial measures: the sampler picks a spec type, a (target, draft) pair, the type's
parameters and the `[runtime]` flags, each within the search space; the values are then made feasible
(n-min up to n-max, an n-gram's m up to its n) so that nothing is measured that cannot draft."""

from __future__ import annotations

import optuna

from autotune.models.candidates import Candidates, pair_label
from autotune.spec.config import SpecConfig
from autotune.spec.space import ParamRange, SearchSpace
from autotune.spec.types import BASELINE, DRAFT_MODEL_TYPES, SPEC_TYPE_PARAMS


def suggest_config(trial: optuna.Trial, space: SearchSpace, candidates: Candidates) -> SpecConfig:
    """The speculative configuration the sampler proposes for `trial`."""
    spec_type = trial.suggest_categorical("spec_type", candidates.spec_types([t for t in space.spec_types if t != BASELINE]))
    target, draft = suggest_files(trial, spec_type, candidates)
    params: dict[str, int | float | bool | str] = {}
    for r in space.spec_types[spec_type]:
        if r.param.requires and not params.get(r.param.requires):
            continue
        params[r.param.name] = suggest_value(trial, r)
    return SpecConfig(target=target, spec_type=spec_type, draft=draft, params=feasible_params(spec_type, params),
                      runtime=suggest_runtime(trial, space, has_draft=draft is not None))


def suggest_files(trial: optuna.Trial, spec_type: str, candidates: Candidates):
    """The (target, draft) pair: among the runnable pairs of a draft type, else among the targets."""
    if spec_type in DRAFT_MODEL_TYPES:
        pairs = candidates.pairs[spec_type]
        if len(pairs) == 1:
            return pairs[0]
        labels = [pair_label(p) for p in pairs]
        chosen = trial.suggest_categorical(f"{spec_type.replace('-', '_')}_files", labels)
        return pairs[labels.index(chosen)]
    targets = candidates.targets
    if len(targets) == 1:
        return targets[0], None
    names = [t.name for t in targets]
    return targets[names.index(trial.suggest_categorical("target", names))], None


def suggest_runtime(trial: optuna.Trial, space: SearchSpace, *, has_draft: bool) -> dict:
    """The `[runtime]` values of a trial, searched jointly with its spec parameters (the draft's KV cache
    types, offload and sampling only with a draft model)."""
    return {r.param.name: suggest_value(trial, r) for r in space.runtime if has_draft or not r.param.draft_only}


def suggest_value(trial: optuna.Trial, r: ParamRange) -> int | float | bool | str:
    """One parameter's value within its range (a fixed one without asking the sampler)."""
    if r.is_fixed:
        return r.choices[0] if r.choices else r.low
    if r.param.kind is bool:
        return trial.suggest_categorical(r.param.name, [False, True])
    if r.param.kind is str:
        return trial.suggest_categorical(r.param.name, list(r.choices))
    if r.param.kind is int:
        return trial.suggest_int(r.param.name, r.low, r.high, step=r.step or 1)
    return trial.suggest_float(r.param.name, r.low, r.high, step=r.step)


def feasible_params(spec_type: str, params: dict) -> dict:
    """`params` with every `at_most`/`at_least` bound met (n-min up to n-max, an n-gram's m up to its n):
    a combination that cannot draft is never measured, and TPE learns from the equivalent one measured.
    The trial's `config` attribute records what was measured."""
    known = SPEC_TYPE_PARAMS[spec_type]
    feasible = dict(params)
    for name, value in params.items():
        param = known[name]
        if param.at_most in feasible:
            feasible[name] = min(value, feasible[param.at_most])
        if param.at_least in feasible:
            feasible[name] = max(value, feasible[param.at_least])
    return feasible
