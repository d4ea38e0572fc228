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
from pathlib import Path
from typing import Protocol

import optuna

from autotune.commandline import server_argv
from autotune.engines.base import Engine
from autotune.errors import EngineError, TrialFailure, SpeculationInactiveError, UsageError
from autotune.hardware import hardware_detail, hardware_key
from autotune.lossless import compare_outputs
from autotune.measurement import GenerationResult, Measurement
from autotune.candidates import Candidates, pair_label
from autotune.models import file_sha256
from autotune.prompts import PromptMix
from autotune.space import SearchSpace
from autotune.spec import BASELINE, DRAFT_MODEL_TYPES, SpecConfig
from autotune.study import study_name

BASELINE_ROLE = "baseline"
WARM_START_ROLE = "warm-start"


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
    version: int | None = None  # a nightly run's study version


@dataclass
class Tuner:
    """Runs one study of one model on one engine."""

    space: SearchSpace
    candidates: Candidates
    mix: PromptMix
    engine: Engine
    settings: SearchSettings
    reporter: SearchReporter

    @property
    def study_name(self) -> str:
        return study_name(self.settings.model, hardware_key(), self.engine.name, self.settings.version)

    def baseline_configs(self) -> list[SpecConfig]:
        """One baseline per target file: every speedup compares against its own target."""
        return [SpecConfig(target=target) for target in self.candidates.targets]

    def warm_start(self, study: optuna.Study, earlier: list[optuna.trial.FrozenTrial]) -> int:
        """Enqueue earlier winners' parameters so a new study version measures them first and its
        sampler learns from them; a winner whose files are gone is skipped. Returns how many."""
        choices = {"spec_type": self.candidates.spec_types(list(self.space.spec_types)),
                   "target": [t.name for t in self.candidates.targets]}
        for spec_type, pairs in self.candidates.pairs.items():
            choices[f"{spec_type.replace('-', '_')}_files"] = [pair_label(p) for p in pairs]
        enqueued = 0
        for trial in earlier:
            if all(value in choices[name] for name, value in trial.params.items() if name in choices):
                study.enqueue_trial(trial.params, user_attrs={"role": WARM_START_ROLE}, skip_if_exists=True)
                enqueued += 1
        return enqueued

    def run(
        self,
        storage: optuna.storages.BaseStorage,
        *,
        warm_start: list[optuna.trial.FrozenTrial] = (),
        study_attrs: dict | None = None,
    ) -> optuna.Study:
        """Run trials until the study holds `settings.trials` finished ones (resuming an earlier run).

        A new study first measures the baselines, then the `warm_start` trials' parameters (earlier
        winners), then what the sampler proposes; `study_attrs` are stored with a new study.
        """
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
        is_new = "measurement" not in study.user_attrs
        self._check_same_settings(study)
        if is_new:
            for key, value in (study_attrs or {}).items():
                study.set_user_attr(key, value)
        for config in self.baseline_configs():
            if baseline_trial(study, config.target) is None and not _baseline_waiting(study, config.target):
                study.enqueue_trial({}, user_attrs={"role": BASELINE_ROLE, "target": str(config.target)})
        if is_new and warm_start:
            self.warm_start(study, list(warm_start))
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
        files = self.candidates.fingerprint()
        existing = study.user_attrs.get("measurement")
        if existing is not None and study.user_attrs.get("files", files) != files:
            raise UsageError(
                f"the model files changed since study {study.study_name!r} began; run `autotune nightly --model "
                f"{self.settings.model}` to start a new study version with them"
            )
        if existing is None:
            study.set_user_attr("files", files)
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
        role = trial.user_attrs.get("role")
        if role == BASELINE_ROLE:
            return SpecConfig(target=Path(trial.user_attrs["target"]))
        choices = self.candidates.spec_types([t for t in self.space.spec_types if t != BASELINE])
        spec_type = trial.suggest_categorical("spec_type", choices)
        target, draft = self._suggest_files(trial, spec_type)
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
        return SpecConfig(target=target, spec_type=spec_type, draft=draft, params=params)

    def _suggest_files(self, trial: optuna.Trial, spec_type: str) -> tuple[Path, Path | None]:
        """The (target, draft) pair: among the runnable pairs of a draft type, else among the targets."""
        if spec_type in DRAFT_MODEL_TYPES:
            pairs = self.candidates.pairs[spec_type]
            if len(pairs) == 1:
                return pairs[0]
            labels = [pair_label(p) for p in pairs]
            chosen = trial.suggest_categorical(f"{spec_type.replace('-', '_')}_files", labels)
            return pairs[labels.index(chosen)]
        targets = self.candidates.targets
        if len(targets) == 1:
            return targets[0], None
        names = [t.name for t in targets]
        return targets[names.index(trial.suggest_categorical("target", names))], None

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
        trial.set_user_attr("hardware_detail", hardware_detail())
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
        baseline = None if config.is_baseline else baseline_trial(trial.study, config.target)
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


def config_from_attrs(attrs: dict) -> SpecConfig:
    """The SpecConfig a trial's `config` user attribute describes."""
    draft = Path(attrs["draft"]) if attrs["draft"] else None
    return SpecConfig(Path(attrs["target"]), attrs["spec_type"], draft, attrs["params"])


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


def baseline_trial(study: optuna.Study, target: Path) -> optuna.trial.FrozenTrial | None:
    """The study's completed baseline trial of `target` (the first one, should there be several)."""
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if is_baseline(trial) and trial.user_attrs["config"]["target"] == str(target):
            return trial
    return None


def _baseline_waiting(study: optuna.Study, target: Path) -> bool:
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    return any(is_baseline(t) and t.user_attrs.get("target") == str(target) for t in waiting)


def _finished_count(study: optuna.Study) -> int:
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))
