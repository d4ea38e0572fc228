"""Confirm a study's winners on another engine: re-measure the top configurations and the references
(the baseline and, where the study measured it, llama.cpp's `--spec-default`), interleaved (baseline,
default, A, B, baseline, default, A, B, ...) so drift hits all alike, and test each against the
baseline with Welch's t-test. A row that drafted nothing or whose output is not the baseline's fails
with the reason (autotune.study.checks). The winner is the row with the highest speedup over its own
target's baseline among those significantly faster than it; where none is, there is no winner and
the plain command is the answer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import optuna

from autotune.engines import Engine, choose_engine, create_engine
from autotune.errors import StudyNotFoundError, TrialFailure
from autotune.llamacpp.runnable import CommandCheck, command_check
from autotune.measure.device_lock import device_lock
from autotune.measure.prompts import PromptMix, load_prompt_mix
from autotune.measure.stats import ci95, welch_p
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.default import SPEC_DEFAULT_FLAG
from autotune.study.objectives import DEFAULT_OBJECTIVE, OBJECTIVES
from autotune.study.checks import MeasurementCheck
from autotune.study.records import SPEC_DEFAULT_ROLE, StudyRecord, TrialRecord, store_study
from autotune.study.trials import baselines_of, drift_corrected, is_reference

#: figures every confirmation round keeps besides the one compared (serving load: `--concurrency N`)
SERVING_FIGURES = ("mix_tok_s", "aggregate_tok_s", "per_stream_tok_s", "per_stream_p10_tok_s")


@dataclass(frozen=True)
class ConfirmedConfig:
    """One configuration's repeated measurements on the confirming engine."""

    label: str
    role: str  # "baseline", "spec-default" (llama.cpp's default), "trial" (one of the study's best) or "preset"
    #            (the configuration in use)
    trial: int | None  # the study trial it came from
    target: str
    argv: list[str]
    samples: list[float]
    mean_tok_s: float
    ci95: tuple[float, float]
    p_value: float | None  # Welch's t-test against its target's baseline (two-sided); None for a baseline
    speedup: float | None
    failure: str | None = None
    #: every round's serving figures (aggregate_tok_s, per_stream_tok_s, per_stream_p10_tok_s, mix_tok_s)
    figures: dict[str, list[float]] = field(default_factory=dict)
    concurrency: int = 1
    dropped: str | None = None  # a race entrant that left before the last round, and why

    @property
    def significantly_faster(self) -> bool:
        return self.p_value is not None and self.p_value < 0.05 and (self.speedup or 0) > 1


@dataclass(frozen=True)
class Confirmation:
    engine: str
    build: str
    repeats: int
    date: str
    baselines: list[ConfirmedConfig]
    configs: list[ConfirmedConfig]
    spec_defaults: list[ConfirmedConfig] = field(default_factory=list)  # empty: the study has no such reference

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Confirmation":
        def config(row: dict) -> ConfirmedConfig:
            return ConfirmedConfig(**{**row, "ci95": tuple(row["ci95"])})

        return cls(**{**data, "baselines": [config(c) for c in data["baselines"]],
                      "configs": [config(c) for c in data["configs"]],
                      "spec_defaults": [config(c) for c in data.get("spec_defaults", [])]})

    def baseline_of(self, row: ConfirmedConfig) -> ConfirmedConfig:
        return next(b for b in self.baselines if b.target == row.target)

    def spec_default_of(self, row: ConfirmedConfig) -> ConfirmedConfig | None:
        """llama.cpp's default on `row`'s target, as measured in the same rounds (None: not measured)."""
        return next((d for d in self.spec_defaults if d.target == row.target and d.failure is None), None)

    def speedup_vs_spec_default(self, row: ConfirmedConfig) -> float | None:
        reference = self.spec_default_of(row)
        return round(row.mean_tok_s / reference.mean_tok_s, 4) if reference and reference.mean_tok_s else None

    @property
    def fastest(self) -> ConfirmedConfig | None:
        """The finalist (llama.cpp's default included: the command a user should run is the fastest one,
        whoever found it) with the highest speedup over its own target's baseline, significant or not."""
        return _by_speedup(self._finalists())

    @property
    def winner(self) -> ConfirmedConfig | None:
        """The finalist with the highest speedup among those significantly faster than their baseline;
        None where none is: no speculative configuration earned its flags in these rounds."""
        return _by_speedup([c for c in self._finalists() if c.significantly_faster])

    @property
    def pick(self) -> ConfirmedConfig | None:
        """What to run: the winner, else the baseline row of the fastest finalist's target (the plain
        command: no speculative configuration was significantly faster)."""
        if self.winner is not None:
            return self.winner
        target = self.fastest.target if self.fastest is not None else None
        return next((b for b in self.baselines if target in (None, b.target)), None)

    def runnable_by(self, check: CommandCheck) -> "Confirmation":
        """This confirmation without the rows whose command `check`'s llama-server cannot run."""
        return replace(self, configs=[c for c in self.configs if check.runs(c.argv)],
                       spec_defaults=[c for c in self.spec_defaults if check.runs(c.argv)])

    def _finalists(self) -> list[ConfirmedConfig]:
        return [c for c in self.configs + self.spec_defaults
                if c.failure is None and c.role != "preset" and c.dropped is None and c.speedup is not None]

    @property
    def preset(self) -> ConfirmedConfig | None:
        return next((c for c in self.configs if c.role == "preset" and c.failure is None), None)

    def welch_p(self, a: ConfirmedConfig, b: ConfirmedConfig) -> float | None:
        """Welch's t-test p-value (two-sided) between two rows' samples."""
        return welch_p(a.samples, b.samples)


def _by_speedup(rows: list[ConfirmedConfig]) -> ConfirmedConfig | None:
    return max(rows, key=lambda c: c.speedup) if rows else None


def trial_of(study: optuna.Study, row: ConfirmedConfig) -> optuna.trial.FrozenTrial | None:
    """The study trial a confirmed row measured again (a baseline row: its target's first baseline)."""
    if row.role == "baseline" and row.trial is None:
        found = baselines_of(study, Path(row.target))
        return found[0] if found else None
    return next((t for t in study.get_trials(deepcopy=False) if t.number == row.trial), None)


def stored_confirmation(study: optuna.Study) -> Confirmation | None:
    data = StudyRecord.of(study).confirmation
    return None if data is None else Confirmation.from_dict(data)


def top_trials(study: optuna.Study, top: int, check: CommandCheck | None = None) -> list[optuna.trial.FrozenTrial]:
    """The `top` fastest completed, lossless, speculative trials with distinct configurations, ranked by
    their speedup over the baseline measured nearest before each (drift cancels); with `check`, only
    those whose command that llama-server runs."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    seen: set[str] = set()
    chosen = []
    ranked = [t for t in complete if drift_corrected(t, complete) is not None]
    for trial in sorted(ranked, key=lambda t: drift_corrected(t, complete), reverse=True):
        record = TrialRecord.of(trial)
        label = record.label
        if (is_reference(trial) or record.lossless is False or label in seen
                or record.feasible is False  # below --min-stream-tok-s
                or (check is not None and not check.runs(record.argv))):
            continue
        seen.add(label)
        chosen.append(trial)
    return chosen[:top]


def study_prompt_mix(study: optuna.Study) -> tuple[PromptMix, int]:
    """The prompts and output length the study was measured with."""
    measurement = StudyRecord.of(study).measurement
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
    command: ServerCommand,
    preset: SpecConfig | None = None,
    on_measured: Callable[[int, str, float | None], None] = lambda r, label, tok_s: None,
    figure: str = "mix_tok_s",
    check: CommandCheck | None = None,
) -> Confirmation:
    """Measure the references (the baseline and, where the study has it, llama.cpp's default, one each per
    target involved) and the top configurations `repeats` times, interleaved, and store the result with
    the study. `preset`, the configuration in use, is measured alongside so a new winner can be tested
    against it; `command` spells each one's printed argv, and with `check` only configurations whose
    command that llama-server runs are finalists."""
    trials = top_trials(study, top, check)
    if not trials:
        raise StudyNotFoundError(f"study {study.study_name!r} has no completed speculative trial to confirm")
    mix, max_tokens = study_prompt_mix(study)
    configs = [("trial", t.number, TrialRecord.of(t).spec_config()) for t in trials]
    if preset is not None:
        configs.append(("preset", None, preset))
    targets = list(dict.fromkeys(c.target for *_, c in configs))
    baselines = [("baseline", None, SpecConfig(target)) for target in targets]
    defaults = [(SPEC_DEFAULT_ROLE, measured[-1].number, TrialRecord.of(measured[-1]).spec_config())
                for measured in (baselines_of(study, target, SPEC_DEFAULT_ROLE) for target in targets) if measured]
    entries = baselines + defaults + configs
    for *_, baseline in baselines:
        engine.prepare(baseline, mix, max_tokens=max_tokens)
    samples: dict[int, list[float]] = {index: [] for index in range(len(entries))}
    serving: dict[int, dict[str, list[float]]] = {index: {} for index in range(len(entries))}
    concurrency = command.parallel
    measurement_check = MeasurementCheck.for_command(engine, mix, command)
    failures: dict[int, str] = {}
    for round_ in range(repeats):
        for index, (role, _, config) in enumerate(entries):
            if index in failures:
                continue
            try:
                with device_lock():
                    measurement = engine.measure(config, mix, max_tokens=max_tokens)
                reason = measurement_check.failure(config, measurement)
                if reason is not None:
                    raise TrialFailure(reason)
                tok_s = getattr(measurement, figure)  # what is compared: the study's objective's figure
                for name in SERVING_FIGURES:
                    serving[index].setdefault(name, []).append(round(getattr(measurement, name), 3))
            except TrialFailure as exc:
                failures[index] = str(exc)
                on_measured(round_, _label(role, config), None)
                continue
            samples[index].append(tok_s)
            on_measured(round_, _label(role, config), tok_s)
    for index in range(len(baselines)):
        if index in failures:
            raise TrialFailure(f"the baseline could not be measured on the {engine.name} engine: {failures[index]}")
    baseline_samples = {config.target: samples[i] for i, (*_, config) in enumerate(baselines)}

    def summarize(index: int) -> ConfirmedConfig:
        role, number, config = entries[index]
        values = samples[index]
        argv = command.argv(config)
        if index in failures or not values:
            return ConfirmedConfig(label=_label(role, config), role=role, trial=number, target=str(config.target),
                                   argv=argv, samples=values, mean_tok_s=0.0, ci95=(0.0, 0.0), p_value=None,
                                   speedup=None, failure=failures.get(index), figures=serving[index],
                                   concurrency=concurrency)
        base = baseline_samples[config.target]
        mean = float(np.mean(values))
        p_value = None if config.is_baseline else welch_p(values, base)
        speedup = None if config.is_baseline else round(mean / float(np.mean(base)), 4)
        return ConfirmedConfig(label=_label(role, config), role=role, trial=number, target=str(config.target),
                               argv=argv, samples=values, mean_tok_s=round(mean, 3), ci95=ci95(values) or (mean, mean),
                               p_value=p_value, speedup=speedup, figures=serving[index], concurrency=concurrency)

    confirmation = Confirmation(
        engine=engine.name,
        build=engine.build_info,
        repeats=repeats,
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        baselines=[summarize(i) for i in range(len(baselines))],
        spec_defaults=[summarize(i) for i in range(len(baselines), len(baselines) + len(defaults))],
        configs=[summarize(i) for i in range(len(baselines) + len(defaults), len(entries))],
    )
    store_study(study, confirmation=confirmation.as_dict())
    return confirmation


def _label(role: str, config: SpecConfig) -> str:
    return f"{SPEC_DEFAULT_FLAG} ({config.describe()})" if role == SPEC_DEFAULT_ROLE else config.describe()


def confirm_study(study: optuna.Study, *, top: int, repeats: int, engine_name: str, server_bin: str | None,
                  on_measured: Callable[[int, str, float | None], None], preset: SpecConfig | None = None,
                  sampling: dict | None = None) -> Confirmation:
    """Confirm `study` on `engine_name` with the study's threads, flags and sampling (`sampling`
    overrides the latter field by field); the printed argv names the binary that confirmed it."""
    stored = StudyRecord.of(study)
    command = ServerCommand.from_dict(stored.llama_server or {"context_size": 4096})
    overrides = {k: v for k, v in (sampling or {}).items() if v is not None}
    if overrides:
        command = replace(command, sampling=replace(command.sampling, **overrides))
    engine_name = choose_engine(engine_name, concurrency=command.parallel, server_bin=server_bin)
    check = command_check(server_bin)
    if engine_name == "server":
        command = replace(command, binary=check.binary)
    figure = OBJECTIVES[stored.objective or DEFAULT_OBJECTIVE].confirm_figure
    with create_engine(engine_name, context_size=command.context_size, threads=command.threads, server_bin=server_bin,
                       base_flags=command.base_flags, sampling=command.sampling,
                       concurrency=command.parallel) as engine:
        return confirm(study, engine, top=top, repeats=repeats, command=command, preset=preset, on_measured=on_measured,
                       figure=figure, check=check)
