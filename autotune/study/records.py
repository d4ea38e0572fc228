"""One schema for what a study and its trials store in Optuna's user attributes.

`TrialRecord` and `StudyRecord` are frozen dataclasses whose field names are the stored keys: the
tuner writes through `store_trial` / `trial_attrs` / `store_study`, which refuse any other name, and
every reader (trials, best, confirm, report, the CLI) reads through `TrialRecord.of(trial)` and
`StudyRecord.of(study)`. A key is therefore spelled once, here. A key that was never written (a
trial that failed before it measured has no figures) reads as the field's default.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import optuna

from autotune.spec.config import SpecConfig

#: `role` of a trial the study enqueued; a trial the sampler proposed has none
BASELINE_ROLE = "baseline"
#: llama.cpp's own default (`--spec-default`), measured beside the baseline as a second reference
SPEC_DEFAULT_ROLE = "spec-default"
REFERENCE_ROLES = (BASELINE_ROLE, SPEC_DEFAULT_ROLE)
#: the plain command a second time in a race, on a server of its own: it checks the machine's clock
CONTROL_ROLE = "control"
WARM_START_ROLE = "warm-start"
#: the engine part of a predicted study's name and its trials' `engine` (autotune.search.predicted)
PREDICTED_ENGINE = "predicted"


@dataclass(frozen=True)
class TrialRecord:
    """What the tuner stored on one trial."""

    # -- what the study enqueued: references, drift checks, warm starts, re-queued trials
    role: str | None = None  # one of the roles above; None: proposed by the sampler
    target: str | None = None  # a reference's target file (references have no Optuna params)
    drift_check: bool = False  # a reference re-measured between search trials (not counted)
    requeued_from: int | None = None  # the trial of a dead worker this one measures again
    # -- what ran
    config: dict = field(
        default_factory=dict
    )  # config_attrs(SpecConfig): what was measured (the asked params and the fixed ones)
    argv: list = field(default_factory=list)  # the llama-server command it prints
    engine: str | None = None
    llama_cpp_build: str | None = None
    hardware: str | None = None
    hardware_detail: dict = field(default_factory=dict)
    model_files: dict = field(default_factory=dict)  # file name -> SHA-256
    model_revisions: dict = field(default_factory=dict)  # hub files: file name -> repo and commit
    owner: dict = field(default_factory=dict)  # the process measuring it: host, pid, start time (orphans)
    # -- what it measured
    figures: dict = field(default_factory=dict)  # Measurement.summary() pooled over the repeats
    per_prompt: list = field(default_factory=list)  # GenerationResult.figures() of the first repeat
    per_category: dict = field(default_factory=dict)
    output_tokens: list = field(default_factory=list)  # each prompt's generated ids (first repeat)
    decode_samples: list = field(default_factory=list)  # mix decode tok/s of each repeat
    cv: float | None = None
    ci95: list | None = None
    feasible: bool | None = None  # against --min-stream-tok-s; None: no bound
    generation_s: float | None = None
    startup_s: float | None = None
    wall_s: float | None = None
    predicted: dict = field(default_factory=dict)  # a predicted trial's replayed counts, tok/s and speedup
    # -- against the baseline
    drift: float | None = None  # a baseline's mix tok/s over the first baseline's
    speedup: float | None = None  # over the baseline measured nearest before it
    speedup_baseline_trial: int | None = None  # that baseline's number
    lossless: bool | None = None  # greedy output matches the baseline's up to ties; None: not checked
    lossless_reason: str | None = None
    output_match: list = field(default_factory=list)
    output_match_fraction: float | None = None
    # -- why it did not complete
    fail_reason: str | None = None
    prune_reason: str | None = None
    interrupted: bool = False  # Ctrl-C: not a result, a resumed study measures it again
    worker_died: bool = False  # it killed a python engine's worker: never re-queued
    server_log_tail: str | None = None
    server_log_errors: Any = None

    @classmethod
    def of(cls, trial: optuna.trial.FrozenTrial) -> "TrialRecord":
        attrs = trial.user_attrs
        return cls(**{name: attrs[name] for name in _TRIAL_KEYS if name in attrs})

    @property
    def label(self) -> str | None:
        return self.config.get("label")

    @property
    def spec_type(self) -> str | None:
        return self.config.get("spec_type")

    @property
    def config_target(self) -> str | None:
        """The target file of what was measured (a reference's `target` before it ran)."""
        return self.config.get("target", self.target)

    @property
    def tok_s(self) -> float | None:
        """Mix decode tok/s, whatever the study's objective; None before it measured."""
        value = self.figures.get("mix_tok_s")
        return None if value is None else float(value)

    def figure(self, name: str) -> float | None:
        return self.figures.get(name)

    def spec_config(self) -> SpecConfig:
        return config_from_attrs(self.config)


@dataclass(frozen=True)
class StudyRecord:
    """What a study stores about itself when its first worker creates it."""

    model: str | None = None
    hardware: str | None = None
    engine: str | None = None
    objective: str | None = None  # None: a study older than objectives (decode, or pareto with two directions)
    measurement: dict = field(default_factory=dict)  # prompts, prompt_source, max_tokens, repeats, sampling
    files: dict = field(default_factory=dict)  # the candidate files' fingerprint
    llama_server: dict = field(default_factory=dict)  # ServerCommand.as_dict(): what every argv carries
    file_hashes: dict = field(default_factory=dict)  # a nightly version's files
    confirmation: dict | None = None  # RaceVerdict.as_dict() of the last race (stored under its first name)
    prediction: dict = field(default_factory=dict)  # a predicted study's trajectories, costs and calibration
    cost: dict = field(
        default_factory=dict
    )  # Ledger.as_dict(): what the search cost per phase (autotune.measure.ledger)
    space: str | None = None  # a predicted run's search space, its digest (autotune.search.answered)

    @classmethod
    def of(cls, study: optuna.Study) -> "StudyRecord":
        attrs = study.user_attrs
        return cls(**{name: attrs[name] for name in _STUDY_KEYS if name in attrs})


_TRIAL_KEYS = frozenset(f.name for f in fields(TrialRecord))
_STUDY_KEYS = frozenset(f.name for f in fields(StudyRecord))


def trial_attrs(**values: Any) -> dict:
    """`values` as trial user attributes (for `enqueue_trial`); a name that is not a TrialRecord field is a bug."""
    unknown = sorted(set(values) - _TRIAL_KEYS)
    if unknown:
        raise KeyError(f"not a trial attribute: {', '.join(unknown)}")
    return values


def store_trial(trial: optuna.Trial, **values: Any) -> None:
    """Set trial user attributes, each name checked against TrialRecord."""
    for name, value in trial_attrs(**values).items():
        trial.set_user_attr(name, value)


def store_study(study: optuna.Study, **values: Any) -> None:
    """Set study user attributes, each name checked against StudyRecord."""
    unknown = sorted(set(values) - _STUDY_KEYS)
    if unknown:
        raise KeyError(f"not a study attribute: {', '.join(unknown)}")
    for name, value in values.items():
        study.set_user_attr(name, value)


def config_attrs(config: SpecConfig) -> dict:
    """The `config` attribute of a trial."""
    return {
        "spec_type": config.spec_type,
        "target": str(config.target),
        "draft": str(config.draft) if config.draft else None,
        "params": dict(config.params),
        "runtime": dict(config.runtime),
        "label": config.describe(),
    }


def config_from_attrs(attrs: dict) -> SpecConfig:
    """The SpecConfig a trial's `config` attribute (or a preset's params) describes."""
    draft = Path(attrs["draft"]) if attrs["draft"] else None
    return SpecConfig(
        Path(attrs["target"]), attrs["spec_type"], draft, attrs["params"], runtime=attrs.get("runtime", {})
    )
