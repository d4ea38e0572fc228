"""The Optuna study: sample a SpecConfig, measure it for real, record everything about the trial.

Trial 0 of every study is the baseline (`none`) of each target, enqueued, so every result has a
reference measured on the same engine; trial 1 is llama.cpp's own default (`--spec-default`,
autotune.spec.default), the second reference a winner is reported against. Every `baseline_every`
search trials both are measured again, and speedups divide by the latest baseline, so drift (heat,
other load) cancels and is recorded. References are not search points: the sampler only picks
speculative types, and a reference is neither pruned nor failed for drafting nothing. A
configuration that cannot be measured is told to Optuna as FAIL with its reason, never as
a score of 0. With one objective, each prompt's score (its decode or end-to-end tok/s) is one instance for
Optuna's WilcoxonPruner, which stops a trial once it is significantly slower, prompt by prompt,
than the best trial.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import optuna

from autotune.models.candidates import Candidates, pair_label
from autotune.spec.command import ServerCommand
from autotune.measure.device_lock import device_lock
from autotune.engines.base import Engine
from autotune.errors import (
    AutotuneError, ModelFileError, SpeculationInactiveError, TrialFailure, UsageError, WorkerDied,
)
from autotune.hardware import hardware_detail, hardware_key
from autotune.measure.lossless import compare_outputs
from autotune.measure.measurement import GenerationResult, Measurement
from autotune.measure.stats import ci95, coefficient_of_variation
from autotune.models.hub import file_revisions
from autotune.models.files import file_sha256
from autotune.study.objectives import DEFAULT_OBJECTIVE, OBJECTIVES
from autotune.measure.prompts import PromptMix
from autotune.spec.sampling import GREEDY, Sampling
from autotune.spec.space import SearchSpace
from autotune.spec.config import SpecConfig
from autotune.spec.types import BASELINE, DRAFT_MODEL_TYPES, SPEC_TYPE_PARAMS
from autotune.spec.default import SPEC_DEFAULT_FLAG, SPEC_DEFAULT_PARAMS, SPEC_DEFAULT_TYPE, spec_default_config
from autotune.study.catalog import study_name
from autotune.study.trials import (
    BASELINE_ROLE, SPEC_DEFAULT_ROLE, WARM_START_ROLE, baseline_trial, baselines_of, config_attrs, counted_trials,
    is_counted, is_reference, latest_baseline,
)

WILCOXON_P_THRESHOLD = 0.1
#: Optuna constraint of --min-stream-tok-s X: X - per-stream p10 decode tok/s (above 0: infeasible)
STREAM_CONSTRAINT = "min_stream_tok_s"


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
    objective: str = DEFAULT_OBJECTIVE
    repeats: int = 1  # measurements of the mix per trial
    baseline_every: int = 0  # re-measure the baselines after this many search trials (0: never)
    pruning: bool = True
    trial_timeout_s: float | None = None
    sampling: Sampling = GREEDY
    concurrency: int = 1  # streams at once on one llama-server (-np N)
    min_stream_tok_s: float | None = None  # per-stream p10 decode tok/s below this is infeasible


@dataclass
class Tuner:
    """Runs one study of one model on one engine."""

    space: SearchSpace
    candidates: Candidates
    mix: PromptMix
    engine: Engine
    settings: SearchSettings
    reporter: SearchReporter
    command: ServerCommand | None = None  # what each printed command carries besides its config (None: the
    #                                       space's context and flags, bare `llama-server`)

    def __post_init__(self) -> None:
        if self.command is None:
            model = self.space.model
            self.command = ServerCommand(model.context_size, tuple(model.base_flags), threads=self.settings.threads,
                                         sampling=self.settings.sampling)

    @property
    def study_name(self) -> str:
        return study_name(self.settings.model, hardware_key(), self.engine.name, self.settings.version,
                          self.settings.objective, self.settings.concurrency)

    @property
    def objective(self):
        return OBJECTIVES[self.settings.objective]

    @property
    def measures_spec_default(self) -> bool:
        """Whether the engine runs llama.cpp's default: ngram-mod, with every parameter it sets."""
        params = SPEC_TYPE_PARAMS[SPEC_DEFAULT_TYPE]
        return SPEC_DEFAULT_TYPE in self.engine.runnable_spec_types and all(
            self.engine.supports_param(params[name]) for name in SPEC_DEFAULT_PARAMS)

    def reference_configs(self) -> list[tuple[str, SpecConfig]]:
        """(role, configuration) of each reference: one baseline per target file (every speedup compares
        against its own target), then llama.cpp's default on each where the engine runs it."""
        targets = self.candidates.targets
        references = [(BASELINE_ROLE, SpecConfig(target=target)) for target in targets]
        if self.measures_spec_default:
            references += [(SPEC_DEFAULT_ROLE, spec_default_config(target)) for target in targets]
        return references

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
            # multivariate + group TPE models a conditional space best, and WilcoxonPruner is built for
            # per-instance scores; Optuna still labels both experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=self.settings.seed,
                multivariate=True,
                group=True,
                n_startup_trials=max(3, min(10, self.settings.trials // 3)),
            )
            pruning = self.settings.pruning and not self.objective.is_multi and self.objective.prunable
            pruner = optuna.pruners.WilcoxonPruner(p_threshold=WILCOXON_P_THRESHOLD) if pruning else optuna.pruners.NopPruner()
        study = optuna.create_study(
            storage=storage, study_name=self.study_name, directions=list(self.objective.directions),
            sampler=sampler, pruner=pruner, load_if_exists=True,
        )
        is_new = "measurement" not in study.user_attrs
        self._check_same_settings(study)
        if is_new:
            for key, value in (study_attrs or {}).items():
                study.set_user_attr(key, value)
        if is_new and not self.measures_spec_default:
            self.reporter.note(f"the {self.engine.name} engine cannot run {SPEC_DEFAULT_TYPE}, what llama.cpp's "
                               f"{SPEC_DEFAULT_FLAG} turns on: this study has no {SPEC_DEFAULT_FLAG} reference")
        for role, config in self.reference_configs():
            if not baselines_of(study, config.target, role) and not _reference_waiting(study, config.target, role):
                study.enqueue_trial({}, user_attrs={"role": role, "target": str(config.target)})
        if is_new and warm_start:
            self.reporter.note(f"warm start: {self.warm_start(study, list(warm_start))} earlier winners measured first")
        self._done_before = counted_trials(study)
        if self._done_before < self.settings.trials:
            study.optimize(
                self._objective,
                catch=(TrialFailure,),
                callbacks=[self._after_trial],
            )
        return study

    def _after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Show the trial, schedule a drift check when due, and stop once --trials trials counted.

        Counting the study's trials (not this process's) lets several workers share one study."""
        self.reporter.trial_finished(trial)
        if counted_trials(study) >= self.settings.trials:
            study.stop()
            return
        every = self.settings.baseline_every
        if every and not is_reference(trial) and self._search_trials_since_reference(study) >= every:
            for role, config in self.reference_configs():
                study.enqueue_trial({}, user_attrs={"role": role, "target": str(config.target), "drift_check": True})

    @staticmethod
    def _search_trials_since_reference(study: optuna.Study) -> int:
        count = 0
        for trial in reversed(study.get_trials(deepcopy=False)):
            if is_reference(trial):
                break
            count += trial.state.is_finished()
        return count

    def _check_same_settings(self, study: optuna.Study) -> None:
        """Refuse to mix figures from another prompt mix or output length into one study."""
        wanted = {"prompts": [p.id for p in self.mix], "prompt_source": self.mix.source,
                  "max_tokens": self.settings.max_tokens, "repeats": self.settings.repeats,
                  "sampling": self.settings.sampling.as_dict()}
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
            study.set_user_attr("objective", self.settings.objective)
            study.set_user_attr("llama_server", self.command.as_dict())
        elif {**existing, "sampling": existing.get("sampling", GREEDY.as_dict())} != wanted:
            sampling = Sampling.from_dict(existing.get("sampling"))
            raise UsageError(
                f"study {study.study_name!r} was measured with --max-tokens {existing['max_tokens']}, "
                f"--repeats {existing.get('repeats', 1)}, sampling {sampling.describe()} on "
                f"{len(existing['prompts'])} prompts of {existing['prompt_source']}; rerun with the same settings "
                "or use another --storage"
            )

    def _suggest(self, trial: optuna.Trial) -> SpecConfig:
        role = trial.user_attrs.get("role")
        if role == BASELINE_ROLE:
            return SpecConfig(target=Path(trial.user_attrs["target"]))
        if role == SPEC_DEFAULT_ROLE:
            return spec_default_config(Path(trial.user_attrs["target"]))
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
            elif r.param.kind is str:
                params[name] = trial.suggest_categorical(name, list(r.choices))
            elif r.param.kind is int:
                params[name] = trial.suggest_int(name, r.low, r.high, step=r.step or 1)
            else:
                params[name] = trial.suggest_float(name, r.low, r.high, step=r.step)
        return SpecConfig(target=target, spec_type=spec_type, draft=draft, params=_feasible(spec_type, params),
                          runtime=suggest_runtime(trial, self.space, has_draft=draft is not None))

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

    def _objective(self, trial: optuna.Trial) -> list[float]:
        config = self._suggest(trial)
        started = time.perf_counter()
        trial.set_user_attr("config", config_attrs(config))
        trial.set_user_attr("argv", self.command.argv(config))
        trial.set_user_attr("engine", self.engine.name)
        trial.set_user_attr("llama_cpp_build", self.engine.build_info)
        trial.set_user_attr("hardware", hardware_key())
        trial.set_user_attr("hardware_detail", hardware_detail())
        trial.set_user_attr("model_files", {p.name: file_sha256(p) for p in {config.target, config.draft} if p})
        trial.set_user_attr("model_revisions", file_revisions([config.target, config.draft]))  # hub files: repo, commit
        self.reporter.trial_started(trial.number, min(self._done_before + 1, self.settings.trials),
                                    self.settings.trials, config)
        try:
            measurements = self._measure(trial, config)
            if not is_reference(trial) and sum(m.n_drafted for m in measurements) == 0:
                raise SpeculationInactiveError(config.spec_type)
            values = self._record(trial, config, measurements)
        except optuna.TrialPruned:
            raise
        except KeyboardInterrupt:
            trial.set_user_attr("fail_reason", "interrupted")
            trial.set_user_attr("interrupted", True)  # not a result: a resumed study measures it again
            raise
        except AutotuneError as exc:
            if isinstance(exc, UsageError) and not isinstance(exc, ModelFileError):
                raise  # bad input is the user's to fix, not a property of this configuration
            if isinstance(exc, WorkerDied):
                trial.set_user_attr("worker_died", True)  # never re-queued: see requeue_stale_trial
            self._fail(trial, exc)
        except Exception as exc:  # a bug or a crash inside llama.cpp's bindings: this trial fails, the study goes on
            self._fail(trial, exc, f"{type(exc).__name__}: {exc}")
        finally:
            trial.set_user_attr("wall_s", round(time.perf_counter() - started, 3))
            if is_counted(trial):
                self._done_before += 1
        return values

    def _fail(self, trial: optuna.Trial, exc: Exception, reason: str | None = None) -> None:
        reason = reason or str(exc)
        trial.set_user_attr("fail_reason", reason)
        if getattr(exc, "log_tail", ""):
            trial.set_user_attr("server_log_tail", exc.log_tail)
        if isinstance(exc, SpeculationInactiveError) and getattr(self.engine, "last_log_errors", None):
            trial.set_user_attr("server_log_errors", self.engine.last_log_errors)
        raise exc if isinstance(exc, TrialFailure) else TrialFailure(reason) from exc

    def _measure(self, trial: optuna.Trial, config: SpecConfig) -> list[Measurement]:
        """`repeats` measurements of the mix; the first one reports each prompt to the pruner.

        --trial-timeout is checked after each prompt here, and passed on as a deadline to an engine
        that can stop in the middle of a prompt (the python engine's worker)."""
        total = len(self.mix)
        deadline = None if self.settings.trial_timeout_s is None else time.monotonic() + self.settings.trial_timeout_s
        reported = not self.objective.is_multi  # references report too: the best trial may be one
        prunable = not is_reference(trial)
        reference = baseline_prompt_scores(trial.study, config.target, self.objective.prompt_score)

        def on_prompt(index: int, result: GenerationResult, first: bool) -> None:
            self.reporter.prompt_done(index, total, result)
            if deadline is not None and time.monotonic() > deadline:
                raise TrialFailure(f"timeout: the trial ran past --trial-timeout {self.settings.trial_timeout_s:g} s")
            if first and reported:
                score = self.objective.prompt_score(result)
                trial.report(drift_corrected_score(score, index, reference, config.is_baseline), step=index)
                if prunable and trial.should_prune():
                    reason = f"significantly slower than the best trial after {index + 1} prompts"
                    trial.set_user_attr("prune_reason", reason)
                    raise optuna.TrialPruned(reason)

        measurements = []
        for repeat in range(self.settings.repeats):
            with device_lock(lambda device: self.reporter.note(f"waiting: another autotune worker is measuring on {device}")):
                measurements.append(self.engine.measure(
                    config, self.mix, max_tokens=self.settings.max_tokens,
                    on_prompt=lambda i, result, first=(repeat == 0): on_prompt(i, result, first),
                    deadline_s=deadline,
                ))
        return measurements

    def _record(self, trial: optuna.Trial, config: SpecConfig, measurements: list[Measurement]) -> list[float]:
        """Store the figures of all repeats; returns the objective values (means over repeats)."""
        first = measurements[0]
        pooled = Measurement.pooled(measurements)
        samples = [m.mix_tok_s for m in measurements]
        trial.set_user_attr("figures", pooled.summary())
        if self.settings.min_stream_tok_s is not None:  # a service level: infeasible below it, never a score of 0
            violation = self.settings.min_stream_tok_s - pooled.per_stream_p10_tok_s
            trial.set_constraint(STREAM_CONSTRAINT, violation)  # TPE models infeasible trials apart
            trial.set_user_attr("feasible", violation <= 0)
        trial.set_user_attr("decode_samples", [round(v, 3) for v in samples])
        trial.set_user_attr("cv", coefficient_of_variation(samples))
        interval = ci95(samples)
        trial.set_user_attr("ci95", None if interval is None else list(interval))
        trial.set_user_attr("per_prompt", [r.figures() for r in first.results])
        trial.set_user_attr("per_category", pooled.per_category())
        trial.set_user_attr("output_tokens", [r.tokens for r in first.results])
        trial.set_user_attr("generation_s", round(pooled.generation_ms / 1000, 3))
        trial.set_user_attr("startup_s", round(pooled.startup_ms / 1000, 3))
        values = [float(np.mean(column)) for column in zip(*(self.objective.values_of(m) for m in measurements))]
        reference = baseline_trial(trial.study, config.target)
        if reference is None:
            return values
        if config.is_baseline:
            trial.set_user_attr("drift", round(pooled.mix_tok_s / reference.user_attrs["figures"]["mix_tok_s"], 4))
            return values
        latest = latest_baseline(trial.study, config.target)
        latest_tok_s = latest.user_attrs["figures"]["mix_tok_s"]
        trial.set_user_attr("speedup", round(pooled.mix_tok_s / latest_tok_s, 4) if latest_tok_s else None)
        trial.set_user_attr("speedup_baseline_trial", latest.number)
        if self.settings.sampling.is_greedy:
            self._record_lossless(trial, config, reference, first)
        else:
            trial.set_user_attr("lossless", None)
            trial.set_user_attr("lossless_reason", f"not checked: sampling at {self.settings.sampling.describe()}")
        return values

    def _record_lossless(self, trial: optuna.Trial, config: SpecConfig, reference: optuna.trial.FrozenTrial,
                         measurement: Measurement) -> None:
        verdicts = compare_outputs(
            [p.id for p in self.mix],
            reference.user_attrs["output_tokens"],
            [r.tokens for r in measurement.results],
            lambda i, generated, a, b: self.engine.tie_evidence(config.target, self.mix.prompts[i], generated, a, b),
        )
        trial.set_user_attr("lossless", all(v.lossless for v in verdicts))
        trial.set_user_attr("output_match", [v.as_dict() for v in verdicts if v.verdict != "same"])
        trial.set_user_attr("output_match_fraction", round(sum(v.verdict == "same" for v in verdicts) / len(verdicts), 4))
        differing = next((v for v in verdicts if not v.lossless), None)
        if differing is not None:
            evidence = differing.evidence
            detail = "" if evidence is None else (
                f" where the target prefers the baseline's token by {evidence.margin_one_by_one:.3f} "
                f"(noise {evidence.noise_rms:.3f})")
            trial.set_user_attr("lossless_reason", f"prompt {differing.prompt_id} differs at token {differing.diverged_at}{detail}")


def suggest_runtime(trial: optuna.Trial, space: SearchSpace, *, has_draft: bool) -> dict:
    """The `[runtime]` values of a trial, searched jointly with its spec parameters (the draft's KV cache
    types, offload and sampling only with a draft model)."""
    runtime: dict = {}
    for r in space.runtime:
        name = r.param.name
        if r.param.draft_only and not has_draft:
            continue
        if r.is_fixed:
            runtime[name] = r.choices[0] if r.choices else r.low
        elif r.param.kind is bool:
            runtime[name] = trial.suggest_categorical(name, [False, True])
        elif r.param.kind is str:
            runtime[name] = trial.suggest_categorical(name, list(r.choices))
        else:
            runtime[name] = trial.suggest_int(name, r.low, r.high, step=r.step or 1)
    return runtime


def baseline_prompt_scores(study: optuna.Study, target: Path, prompt_score) -> list[float] | None:
    """Each prompt's score in the latest baseline of `target` (None before one completed)."""
    latest = latest_baseline(study, target)
    if latest is None:
        return None
    names = {f.name for f in dataclasses.fields(GenerationResult)}
    return [prompt_score(GenerationResult(**{k: v for k, v in row.items() if k in names}))
            for row in latest.user_attrs["per_prompt"]]


def drift_corrected_score(score: float, index: int, reference: list[float] | None, is_baseline: bool) -> float:
    """What the pruner sees for prompt `index`: the score over the nearest baseline's on that prompt, so
    a trial measured while the machine ran slower is not pruned for the machine's sake; a baseline is
    1 by definition. Raw while no baseline completed."""
    if is_baseline:
        return 1.0
    if reference is None or index >= len(reference) or not reference[index]:
        return score
    return score / reference[index]


def _feasible(spec_type: str, params: dict) -> dict:
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


def requeue_stale_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Optuna's heartbeat failed `trial` because its worker died: measure the same configuration again,
    unless that configuration already killed a python engine's worker (a trial with `worker_died`) or
    `trial` was itself a re-queue, i.e. the configuration died twice (its process may have died with
    the worker and recorded nothing). Such a trial stays FAIL, once: a crashing configuration is not
    retried forever. A reference that a worker starting meanwhile enqueued again is not re-queued either."""
    if "requeued_from" in trial.user_attrs or _reference_replaced(study, trial):
        return
    target = trial.user_attrs.get("target")  # what tells baselines apart: they have no params
    if any(t.user_attrs.get("worker_died") and t.params == trial.params and t.user_attrs.get("target") == target
           for t in study.get_trials(deepcopy=False)):
        return
    kept = {key: value for key, value in trial.user_attrs.items() if key in ("role", "target", "drift_check")}
    study.enqueue_trial(trial.params, user_attrs={**kept, "requeued_from": trial.number})


def _reference_waiting(study: optuna.Study, target: Path, role: str) -> bool:
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    return any(t.user_attrs.get("role") == role and t.user_attrs.get("target") == str(target) for t in waiting)


def _reference_replaced(study: optuna.Study, dead: optuna.trial.FrozenTrial) -> bool:
    """Whether a reference trial of a dead worker was already replaced: a worker that started while it
    still ran enqueued the same reference (role, target, drift check or not) after it, so re-queuing the
    dead one would measure the reference twice."""
    role = dead.user_attrs.get("role")
    if role not in (BASELINE_ROLE, SPEC_DEFAULT_ROLE):
        return False
    same = ("role", "target", "drift_check")
    return any(t.number > dead.number and t.state != optuna.trial.TrialState.FAIL
               and all(t.user_attrs.get(key) == dead.user_attrs.get(key) for key in same)
               for t in study.get_trials(deepcopy=False))
