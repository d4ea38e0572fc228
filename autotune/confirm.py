"""Confirm a study's winners on another engine: re-measure the top configurations and the baseline,
interleaved (baseline, A, B, baseline, A, B, ...) so drift hits all alike, and test each against the
baseline with Welch's t-test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import optuna
from scipy import stats

from autotune.commandline import server_argv
from autotune.engines.base import Engine
from autotune.errors import StudyNotFoundError, TrialFailure
from autotune.prompts import PromptMix, load_prompt_mix
from autotune.spec import SpecConfig
from autotune.tuner import is_baseline

CONFIRMATION_ATTR = "confirmation"


@dataclass(frozen=True)
class ConfirmedConfig:
    """One configuration's repeated measurements on the confirming engine."""

    label: str
    trial: int | None  # the study trial it came from; None for the baseline
    argv: list[str]
    samples: list[float]
    mean_tok_s: float
    ci95: tuple[float, float]
    p_value: float | None  # Welch's t-test against the baseline (two-sided); None for the baseline
    speedup: float | None
    failure: str | None = None

    @property
    def significantly_faster(self) -> bool:
        return self.p_value is not None and self.p_value < 0.05 and (self.speedup or 0) > 1


@dataclass(frozen=True)
class Confirmation:
    engine: str
    build: str
    repeats: int
    date: str
    baseline: ConfirmedConfig
    configs: list[ConfirmedConfig]

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Confirmation":
        def config(row: dict) -> ConfirmedConfig:
            return ConfirmedConfig(**{**row, "ci95": tuple(row["ci95"])})

        return cls(**{**data, "baseline": config(data["baseline"]), "configs": [config(c) for c in data["configs"]]})

    @property
    def winner(self) -> ConfirmedConfig | None:
        measured = [c for c in self.configs if c.failure is None]
        return max(measured, key=lambda c: c.mean_tok_s) if measured else None


def stored_confirmation(study: optuna.Study) -> Confirmation | None:
    data = study.user_attrs.get(CONFIRMATION_ATTR)
    return None if data is None else Confirmation.from_dict(data)


def top_trials(study: optuna.Study, top: int) -> list[optuna.trial.FrozenTrial]:
    """The `top` fastest completed, lossless, speculative trials with distinct configurations."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    seen: set[str] = set()
    chosen = []
    for trial in sorted(complete, key=lambda t: t.value, reverse=True):
        label = trial.user_attrs["config"]["label"]
        if is_baseline(trial) or trial.user_attrs.get("lossless") is False or label in seen:
            continue
        seen.add(label)
        chosen.append(trial)
    return chosen[:top]


def config_of(trial: optuna.trial.FrozenTrial) -> SpecConfig:
    attrs = trial.user_attrs["config"]
    draft = Path(attrs["draft"]) if attrs["draft"] else None
    return SpecConfig(Path(attrs["target"]), attrs["spec_type"], draft, attrs["params"])


def study_prompt_mix(study: optuna.Study) -> tuple[PromptMix, int]:
    """The prompts and output length the study was measured with."""
    measurement = study.user_attrs["measurement"]
    source = measurement["prompt_source"]
    mix = load_prompt_mix(Path(source))
    wanted = measurement["prompts"]
    by_id = {p.id: p for p in mix}
    return PromptMix(source, tuple(by_id[i] for i in wanted)), int(measurement["max_tokens"])


def confirm(
    study: optuna.Study,
    engine: Engine,
    *,
    top: int,
    repeats: int,
    context_size: int,
    base_flags: tuple[str, ...] = (),
    on_measured: Callable[[int, str, float | None], None] = lambda r, label, tok_s: None,
) -> Confirmation:
    """Measure baseline and the top configurations `repeats` times, interleaved, and store the result."""
    trials = top_trials(study, top)
    if not trials:
        raise StudyNotFoundError(f"study {study.study_name!r} has no completed speculative trial to confirm")
    mix, max_tokens = study_prompt_mix(study)
    baseline_config = SpecConfig(config_of(trials[0]).target)
    entries = [(None, baseline_config)] + [(t.number, config_of(t)) for t in trials]
    engine.prepare(baseline_config, mix, max_tokens=max_tokens)
    samples: dict[int | None, list[float]] = {number: [] for number, _ in entries}
    failures: dict[int | None, str] = {}
    for round_ in range(repeats):
        for number, config in entries:
            if number in failures:
                continue
            try:
                tok_s = engine.measure(config, mix, max_tokens=max_tokens).mix_tok_s
            except TrialFailure as exc:
                failures[number] = str(exc)
                on_measured(round_, config.describe(), None)
                continue
            samples[number].append(tok_s)
            on_measured(round_, config.describe(), tok_s)
    if None in failures:
        raise TrialFailure(f"the baseline could not be measured on the {engine.name} engine: {failures[None]}")

    def summarize(number: int | None, config: SpecConfig) -> ConfirmedConfig:
        values = samples[number]
        argv = server_argv(config, context_size=context_size, base_flags=base_flags)
        if number in failures or not values:
            return ConfirmedConfig(config.describe(), number, argv, values, 0.0, (0.0, 0.0), None, None, failures.get(number))
        base = samples[None]
        mean = float(np.mean(values))
        p_value = None if number is None else _welch_p(values, base)
        return ConfirmedConfig(
            config.describe(), number, argv, values, round(mean, 3), _ci95(values), p_value,
            None if number is None else round(mean / float(np.mean(base)), 4),
        )

    confirmation = Confirmation(
        engine=engine.name,
        build=engine.build_info,
        repeats=repeats,
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        baseline=summarize(None, baseline_config),
        configs=[summarize(number, config) for number, config in entries[1:]],
    )
    study.set_user_attr(CONFIRMATION_ATTR, confirmation.as_dict())
    return confirmation


def _ci95(values: list[float]) -> tuple[float, float]:
    mean = float(np.mean(values))
    if len(values) < 2:
        return (mean, mean)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=mean, scale=stats.sem(values))
    return (round(float(low), 3), round(float(high), 3))


def _welch_p(values: list[float], baseline: list[float]) -> float | None:
    if len(values) < 2 or len(baseline) < 2:
        return None
    p = stats.ttest_ind(values, baseline, equal_var=False).pvalue
    return None if np.isnan(p) else round(float(p), 6)
