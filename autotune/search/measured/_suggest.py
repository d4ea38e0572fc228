"""What a search trial measures: the sampler picks a spec type, a (target, draft) pair, the type's
parameters and the `[runtime]` flags, each within the search space. A bounded parameter (n-min at most
n-max, an n-gram's m at least its n) is asked for after its bound, within the range the bound leaves
(Optuna's define-by-run ranges), so every point the sampler proposes is what is measured: it never
learns from a combination that cannot draft and was run as another. Where the bound leaves no value
of the space's range, the parameter takes the bound without asking the sampler."""

from __future__ import annotations

from dataclasses import replace

import optuna

from autotune.models.candidates import Candidates, pair_label
from autotune.spec.config import SpecConfig
from autotune.spec.space import ParamRange, SearchSpace
from autotune.spec.types import BASELINE, DRAFT_MODEL_TYPES


def suggest_config(trial: optuna.Trial, space: SearchSpace, candidates: Candidates) -> SpecConfig:
    """The speculative configuration the sampler proposes for `trial`."""
    spec_type = trial.suggest_categorical(
        "spec_type", candidates.spec_types([t for t in space.spec_types if t != BASELINE])
    )
    target, draft = suggest_files(trial, spec_type, candidates)
    params: dict[str, int | float | bool | str] = {}
    for r in sorted(space.spec_types[spec_type], key=lambda r: bool(r.param.at_most or r.param.at_least)):
        if r.param.requires and not params.get(r.param.requires):
            continue
        params[r.param.name] = suggest_value(trial, within_bounds(r, params))
    return SpecConfig(
        target=target,
        spec_type=spec_type,
        draft=draft,
        params=params,
        runtime=suggest_runtime(trial, space, has_draft=draft is not None),
    )


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


def within_bounds(r: ParamRange, chosen: dict) -> ParamRange:
    """`r` narrowed by the values already `chosen` for its `at_most` / `at_least` bound (on its step grid);
    fixed at the bound where nothing of `r` is left."""
    low, high = r.low, r.high
    if r.param.at_most in chosen:
        high = min(high, chosen[r.param.at_most])
        if high < low:
            return replace(r, low=high, high=high)
    if r.param.at_least in chosen:
        low = max(low, chosen[r.param.at_least])
        if low > high:
            return replace(r, low=low, high=low)
    if r.step and (low, high) != (r.low, r.high):
        low = r.low + -(-(low - r.low) // r.step) * r.step  # up to the grid
        high = r.low + (high - r.low) // r.step * r.step  # down to the grid
        if low > high:
            bound = high if r.param.at_most in chosen else low
            return replace(r, low=bound, high=bound)
    return replace(r, low=low, high=high)
