"""The Optuna study: sample a SpecConfig, measure it for real, record everything about the trial.

Trial 0 of every study is the baseline (`none`), enqueued, so every result has a reference measured
on the same engine. The baseline is a reference, not a search point: the sampler only ever picks
speculative types. A configuration that cannot be measured is told to Optuna as FAIL with its
reason, never as a score of 0.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Protocol

import optuna

from autotune.commandline import server_argv
from autotune.engines.base import Engine
from autotune.errors import EngineError, TrialFailure, SpeculationInactiveError, UsageError
from autotune.hardware import hardware_key
from autotune.lossless import compare_outputs
from autotune.measurement import GenerationResult, Measurement
from autotune.models import ModelFiles, file_sha256
from autotune.prompts import PromptMix
from autotune.space import SearchSpace
from autotune.spec import BASELINE, DRAFT_MODEL_TYPES, SpecConfig
from autotune.study import study_name

BASELINE_ROLE = "baseline"


class SearchReporter(Protocol):
    """What the tuner tells whoever shows progress (the CLI prints it; tests may ignore it)."""

    def note(self, text: str) -> None: ...

    def trial_started(self, number: int, index: int, total: int, config: SpecConfig) -> None: ...

    def prompt_done(self, index: int, total: int, result: GenerationResult) -> None: ...

    def trial_finished(self, trial: optuna.trial.FrozenTrial) -> None: ...


@dataclass(frozen=True)
class SearchSettings:
    """What one `autotune search` asks for."""

    model: str
    trials: int
    max_tokens: int
    seed: int | None = None
    threads: int | None = None


@dataclass
class Tuner:
    """Runs one study of one model on one engine."""

    space: SearchSpace
    files: ModelFiles
    mix: PromptMix
    engine: Engine
    settings: SearchSettings
    reporter: SearchReporter

    @property
    def study_name(self) -> str:
        return study_name(self.settings.model, hardware_key(), self.engine.name)

    def baseline_config(self) -> SpecConfig:
        return SpecConfig(target=self.files.target)

    def run(self, storage: optuna.storages.BaseStorage) -> optuna.Study:
        """Run trials until the study holds `settings.trials` finished ones (resuming an earlier run)."""
        with warnings.catch_warnings():
            # multivariate + group TPE models a conditional space best; Optuna still labels it experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=self.settings.seed,
                multivariate=True,
                group=True,
                n_startup_trials=max(3, min(10, self.settings.trials // 3)),
            )
        study = optuna.create_study(
            storage=storage, study_name=self.study_name, direction="maximize", sampler=sampler, load_if_exists=True
        )
        self._check_same_settings(study)
        if _baseline_trial(study) is None and not _baseline_waiting(study):
            study.enqueue_trial({}, user_attrs={"role": BASELINE_ROLE})
        remaining = self.settings.trials - _finished_count(study)
        self._done_before = _finished_count(study)
        if remaining > 0:
            study.optimize(
                self._objective,
                n_trials=remaining,
                catch=(TrialFailure,),
                callbacks=[lambda _study, trial: self.reporter.trial_finished(trial)],
            )
        return study

    def _check_same_settings(self, study: optuna.Study) -> None:
        """Refuse to mix figures from another prompt mix or output length into one study."""
        wanted = {"prompts": [p.id for p in self.mix], "prompt_source": self.mix.source, "max_tokens": self.settings.max_tokens}
        existing = study.user_attrs.get("measurement")
        if existing is None:
            study.set_user_attr("measurement", wanted)
            study.set_user_attr("model", self.settings.model)
            study.set_user_attr("hardware", hardware_key())
            study.set_user_attr("engine", self.engine.name)
            model = self.space.model
            study.set_user_attr("llama_server", {"context_size": model.context_size, "base_flags": list(model.base_flags)})
        elif existing != wanted:
            raise UsageError(
                f"study {study.study_name!r} was measured with --max-tokens {existing['max_tokens']} on "
                f"{len(existing['prompts'])} prompts of {existing['prompt_source']}; rerun with the same settings "
                "or use another --storage"
            )

    def _suggest(self, trial: optuna.Trial) -> SpecConfig:
        if trial.user_attrs.get("role") == BASELINE_ROLE:
            return self.baseline_config()
        choices = [t for t in self.space.spec_types if t != BASELINE]
        spec_type = trial.suggest_categorical("spec_type", choices)
        params: dict[str, int | float | bool] = {}
        for r in self.space.spec_types[spec_type]:
            name = r.param.name
            if r.param.requires and not params.get(r.param.requires):
                continue
            if r.is_fixed:
                params[name] = r.low
            elif r.param.kind is bool:
                params[name] = trial.suggest_categorical(name, [False, True])
            elif r.param.kind is int:
                params[name] = trial.suggest_int(name, r.low, r.high, step=r.step or 1)
            else:
                params[name] = trial.suggest_float(name, r.low, r.high, step=r.step)
        draft = self.files.draft if spec_type in DRAFT_MODEL_TYPES else None
        return SpecConfig(target=self.files.target, spec_type=spec_type, draft=draft, params=params)

    def _objective(self, trial: optuna.Trial) -> float:
        config = self._suggest(trial)
        started = time.perf_counter()
        model = self.space.model
        trial.set_user_attr("config", _config_attrs(config))
        argv = server_argv(
            config, context_size=model.context_size, base_flags=model.base_flags, threads=self.settings.threads
        )
        trial.set_user_attr("argv", argv)
        trial.set_user_attr("engine", self.engine.name)
        trial.set_user_attr("llama_cpp_build", self.engine.build_info)
        trial.set_user_attr("hardware", hardware_key())
        trial.set_user_attr("model_files", {p.name: file_sha256(p) for p in {config.target, config.draft} if p})
        self.reporter.trial_started(trial.number, self._done_before + 1, self.settings.trials, config)
        total = len(self.mix)
        try:
            measurement = self.engine.measure(
                config,
                self.mix,
                max_tokens=self.settings.max_tokens,
                on_prompt=lambda i, result: self.reporter.prompt_done(i, total, result),
            )
            if not config.is_baseline and measurement.n_drafted == 0:
                raise SpeculationInactiveError(config.spec_type)
            self._record(trial, config, measurement)
        except (TrialFailure, EngineError) as exc:
            trial.set_user_attr("fail_reason", str(exc))
            if getattr(exc, "log_tail", ""):
                trial.set_user_attr("server_log_tail", exc.log_tail)
            if isinstance(exc, SpeculationInactiveError) and getattr(self.engine, "last_log_errors", None):
                trial.set_user_attr("server_log_errors", self.engine.last_log_errors)
            raise exc if isinstance(exc, TrialFailure) else TrialFailure(str(exc)) from exc
        finally:
            trial.set_user_attr("wall_s", round(time.perf_counter() - started, 3))
            self._done_before += 1
        return measurement.mix_tok_s

    def _record(self, trial: optuna.Trial, config: SpecConfig, measurement: Measurement) -> None:
        summary = measurement.summary()
        trial.set_user_attr("figures", summary)
        trial.set_user_attr("per_prompt", [r.figures() for r in measurement.results])
        trial.set_user_attr("per_category", measurement.per_category())
        trial.set_user_attr("output_tokens", [r.tokens for r in measurement.results])
        trial.set_user_attr("generation_s", round(measurement.generation_ms / 1000, 3))
        trial.set_user_attr("startup_s", round(measurement.startup_ms / 1000, 3))
        baseline = None if config.is_baseline else _baseline_trial(trial.study)
        if baseline is None:
            return
        trial.set_user_attr("speedup", round(measurement.mix_tok_s / baseline.value, 4) if baseline.value else None)
        verdicts = compare_outputs(
            [p.id for p in self.mix],
            baseline.user_attrs["output_tokens"],
            [r.tokens for r in measurement.results],
            lambda i, generated, a, b: self.engine.tie_evidence(config.target, self.mix.prompts[i], generated, a, b),
        )
        trial.set_user_attr("lossless", all(v.lossless for v in verdicts))
        trial.set_user_attr("output_match", [v.as_dict() for v in verdicts if v.verdict != "same"])
        trial.set_user_attr(
            "output_match_fraction", round(sum(v.verdict == "same" for v in verdicts) / len(verdicts), 4)
        )


def _config_attrs(config: SpecConfig) -> dict:
    return {
        "spec_type": config.spec_type,
        "target": str(config.target),
        "draft": str(config.draft) if config.draft else None,
        "params": dict(config.params),
        "label": config.describe(),
    }


def is_baseline(trial: optuna.trial.FrozenTrial) -> bool:
    return trial.user_attrs.get("role") == BASELINE_ROLE


def _baseline_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The study's completed baseline trial (the first one, should there be several)."""
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if is_baseline(trial):
            return trial
    return None


def _baseline_waiting(study: optuna.Study) -> bool:
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    return any(is_baseline(t) or t.system_attrs.get("fixed_params") == {} for t in waiting)


def _finished_count(study: optuna.Study) -> int:
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))
