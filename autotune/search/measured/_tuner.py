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

import time
import warnings
from dataclasses import dataclass

import numpy as np
import optuna

from autotune.engines.base import Engine
from autotune.engines.orphans import this_process
from autotune.errors import (
    AutotuneError,
    ModelFileError,
    SpeculationInactiveError,
    TrialFailure,
    UsageError,
    WorkerDied,
)
from autotune.hardware import hardware_detail, hardware_key
from autotune.measure.device_lock import device_lock
from autotune.measure.lossless import compare_outputs
from autotune.measure.measurement import GenerationResult, Measurement
from autotune.measure.prompts import PromptMix
from autotune.measure.stats import ci95, coefficient_of_variation
from autotune.models.candidates import Candidates, pair_label
from autotune.models.files import file_sha256
from autotune.models.hub import file_revisions
from autotune.search.inputs import SearchReporter, SearchSettings
from autotune.search.measured._references import (
    baseline_prompt_scores,
    drift_corrected_score,
    enqueue_drift_checks,
    enqueue_missing,
    fail_trials_of_dead_runs,
    measures_spec_default,
    reference_config,
    reference_configs,
    search_trials_since_reference,
    wait_for_baseline,
)
from autotune.search.measured._suggest import suggest_config
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.default import SPEC_DEFAULT_FLAG, SPEC_DEFAULT_TYPE
from autotune.spec.sampling import GREEDY, Sampling
from autotune.spec.space import SearchSpace
from autotune.study.catalog import study_name
from autotune.study.objectives import OBJECTIVES
from autotune.study.records import (
    REFERENCE_ROLES,
    WARM_START_ROLE,
    StudyRecord,
    TrialRecord,
    config_attrs,
    store_study,
    store_trial,
    trial_attrs,
)
from autotune.study.trials import baseline_trial, counted_trials, is_counted, is_reference, latest_baseline

WILCOXON_P_THRESHOLD = 0.1
#: Optuna constraint of --min-stream-tok-s X: X - per-stream p10 decode tok/s (above 0: infeasible)
STREAM_CONSTRAINT = "min_stream_tok_s"


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
            self.command = ServerCommand(
                model.context_size,
                tuple(model.base_flags),
                threads=self.settings.threads,
                sampling=self.settings.sampling,
            )

    @property
    def study_name(self) -> str:
        return study_name(
            self.settings.model,
            hardware_key(),
            self.engine.name,
            version=self.settings.version,
            objective=self.settings.objective,
            concurrency=self.settings.concurrency,
        )

    @property
    def objective(self):
        return OBJECTIVES[self.settings.objective]

    @property
    def references(self) -> list[tuple[str, SpecConfig]]:
        """(role, configuration) of each reference this study measures (autotune.search.references)."""
        return reference_configs(self.candidates.targets, with_spec_default=measures_spec_default(self.engine))

    def warm_start(self, study: optuna.Study, earlier: list[optuna.trial.FrozenTrial]) -> int:
        """Enqueue earlier winners' parameters so a new study version measures them first and its
        sampler learns from them; a winner whose files are gone is skipped. Returns how many."""
        choices = {
            "spec_type": self.candidates.spec_types(list(self.space.spec_types)),
            "target": [t.name for t in self.candidates.targets],
        }
        for spec_type, pairs in self.candidates.pairs.items():
            choices[f"{spec_type.replace('-', '_')}_files"] = [pair_label(p) for p in pairs]
        enqueued = 0
        for trial in earlier:
            if all(value in choices[name] for name, value in trial.params.items() if name in choices):
                study.enqueue_trial(trial.params, user_attrs=trial_attrs(role=WARM_START_ROLE), skip_if_exists=True)
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
            pruner = (
                optuna.pruners.WilcoxonPruner(p_threshold=WILCOXON_P_THRESHOLD)
                if pruning
                else optuna.pruners.NopPruner()
            )
        study = optuna.create_study(
            storage=storage,
            study_name=self.study_name,
            directions=list(self.objective.directions),
            sampler=sampler,
            pruner=pruner,
            load_if_exists=True,
        )
        is_new = not StudyRecord.of(study).measurement
        self._check_same_settings(study)
        if is_new:
            store_study(study, **(study_attrs or {}))
        if is_new and not measures_spec_default(self.engine):
            self.reporter.note(
                f"the {self.engine.name} engine cannot run {SPEC_DEFAULT_TYPE}, what llama.cpp's "
                f"{SPEC_DEFAULT_FLAG} turns on: this study has no {SPEC_DEFAULT_FLAG} reference"
            )
        dead = fail_trials_of_dead_runs(study)
        if dead:
            self.reporter.note(
                f"{dead} trial(s) left running by an autotune process that died were failed and re-queued"
            )
        enqueue_missing(study, self.references)
        if is_new and warm_start:
            self.reporter.note(f"warm start: {self.warm_start(study, list(warm_start))} earlier winners measured first")
        self._done_before = counted_trials(study)
        if self._done_before < self.settings.trials:
            try:
                study.optimize(self._objective, catch=(TrialFailure,), callbacks=[self._after_trial])
            except UnboundLocalError as exc:
                # A stop signal held through a storage call of optuna's tell is raised as that call returns;
                # optuna's clean-up then trips on the state its tell never returned (`_run_trial`, optuna
                # 5.1). The trial it was telling is closed here, and the signal ends the run.
                if not isinstance(exc.__context__, KeyboardInterrupt):
                    raise
                self._close_interrupted_tell(study)
                raise exc.__context__ from None
        return study

    def _close_interrupted_tell(self, study: optuna.Study) -> None:
        """Fail, as interrupted, this process's trial that a stop signal left RUNNING inside optuna's tell."""
        for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if TrialRecord.of(frozen).owner == this_process():
                store_trial(optuna.trial.Trial(study, frozen._trial_id), fail_reason="interrupted", interrupted=True)
                study._storage.set_trial_state_values(frozen._trial_id, optuna.trial.TrialState.FAIL)

    def _after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Show the trial, schedule a drift check when due, and stop once --trials trials counted.

        Counting the study's trials (not this process's) lets several workers share one study."""
        self.reporter.trial_finished(trial)
        if counted_trials(study) >= self.settings.trials:
            study.stop()
            return
        every = self.settings.baseline_every
        if every and not is_reference(trial) and search_trials_since_reference(study) >= every:
            enqueue_drift_checks(study, self.references)

    def _check_same_settings(self, study: optuna.Study) -> None:
        """Refuse to mix figures from another prompt mix or output length into one study."""
        wanted = {
            "prompts": [p.id for p in self.mix],
            "prompt_source": self.mix.source,
            "max_tokens": self.settings.max_tokens,
            "repeats": self.settings.repeats,
            "sampling": self.settings.sampling.as_dict(),
        }
        files = self.candidates.fingerprint()
        stored = StudyRecord.of(study)
        existing = stored.measurement or None
        if existing is not None and (stored.files or files) != files:
            raise UsageError(
                f"the model files changed since study {study.study_name!r} began; run `autotune nightly --model "
                f"{self.settings.model}` to start a new study version with them"
            )
        if existing is None:
            store_study(
                study,
                files=files,
                measurement=wanted,
                model=self.settings.model,
                hardware=hardware_key(),
                engine=self.engine.name,
                objective=self.settings.objective,
                llama_server=self.command.as_dict(),
            )
        elif {**existing, "sampling": existing.get("sampling", GREEDY.as_dict())} != wanted:
            sampling = Sampling.from_dict(existing.get("sampling"))
            raise UsageError(
                f"study {study.study_name!r} was measured with --max-tokens {existing['max_tokens']}, "
                f"--repeats {existing.get('repeats', 1)}, sampling {sampling.describe()} on "
                f"{len(existing['prompts'])} prompts of {existing['prompt_source']}; rerun with the same settings "
                "or use another --storage"
            )

    def _suggest(self, trial: optuna.Trial) -> SpecConfig:
        record = TrialRecord.of(trial)
        if record.role in REFERENCE_ROLES:
            return reference_config(record)
        return suggest_config(trial, self.space, self.candidates)

    def _objective(self, trial: optuna.Trial) -> list[float]:
        config = self._suggest(trial)
        started = time.perf_counter()
        store_trial(trial, owner=this_process())
        store_trial(trial, config=config_attrs(config))
        store_trial(trial, argv=self.command.argv(config))
        store_trial(trial, engine=self.engine.name)
        store_trial(trial, llama_cpp_build=self.engine.build_info)
        store_trial(trial, hardware=hardware_key())
        store_trial(trial, hardware_detail=hardware_detail())
        store_trial(trial, model_files={p.name: file_sha256(p) for p in {config.target, config.draft} if p})
        store_trial(trial, model_revisions=file_revisions([config.target, config.draft]))  # hub files: repo, commit
        self.reporter.trial_started(
            trial.number, min(self._done_before + 1, self.settings.trials), self.settings.trials, config
        )
        try:
            measurements = self._measure(trial, config)
            if not is_reference(trial) and sum(m.n_drafted for m in measurements) == 0:
                raise SpeculationInactiveError(config.spec_type)
            values = self._record(trial, config, measurements)
        except optuna.TrialPruned:
            raise
        except KeyboardInterrupt:
            store_trial(trial, fail_reason="interrupted")
            store_trial(trial, interrupted=True)  # not a result: a resumed study measures it again
            raise
        except AutotuneError as exc:
            if isinstance(exc, UsageError) and not isinstance(exc, ModelFileError):
                raise  # bad input is the user's to fix, not a property of this configuration
            if isinstance(exc, WorkerDied):
                store_trial(trial, worker_died=True)  # never re-queued: see requeue_stale_trial
            self._fail(trial, exc)
        except Exception as exc:  # a bug or a crash inside llama.cpp's bindings: this trial fails, the study goes on
            self._fail(trial, exc, f"{type(exc).__name__}: {exc}")
        finally:
            store_trial(trial, wall_s=round(time.perf_counter() - started, 3))
            if is_counted(trial):
                self._done_before += 1
        return values

    def _fail(self, trial: optuna.Trial, exc: Exception, reason: str | None = None) -> None:
        reason = reason or str(exc)
        store_trial(trial, fail_reason=reason)
        if getattr(exc, "log_tail", ""):
            store_trial(trial, server_log_tail=exc.log_tail)
        if isinstance(exc, SpeculationInactiveError) and getattr(self.engine, "last_log_errors", None):
            store_trial(trial, server_log_errors=self.engine.last_log_errors)
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
            if first and reported and (config.is_baseline or reference is not None):  # ratios only
                score = self.objective.prompt_score(result)
                trial.report(drift_corrected_score(score, index, reference, config.is_baseline), step=index)
                if prunable and trial.should_prune():
                    reason = f"significantly slower than the best trial after {index + 1} prompts"
                    store_trial(trial, prune_reason=reason)
                    raise optuna.TrialPruned(reason)

        measurements = []
        for repeat in range(self.settings.repeats):
            with device_lock(
                lambda device: self.reporter.note(f"waiting: another autotune worker is measuring on {device}")
            ):
                measurements.append(
                    self.engine.measure(
                        config,
                        self.mix,
                        max_tokens=self.settings.max_tokens,
                        on_prompt=lambda i, result, first=(repeat == 0): on_prompt(i, result, first),
                        deadline_s=deadline,
                    )
                )
        return measurements

    def _record(self, trial: optuna.Trial, config: SpecConfig, measurements: list[Measurement]) -> list[float]:
        """Store the figures of all repeats; returns the objective values (means over repeats)."""
        first = measurements[0]
        pooled = Measurement.pooled(measurements)
        samples = [m.mix_tok_s for m in measurements]
        store_trial(trial, figures=pooled.summary())
        if self.settings.min_stream_tok_s is not None:  # a service level: infeasible below it, never a score of 0
            violation = self.settings.min_stream_tok_s - pooled.per_stream_p10_tok_s
            trial.set_constraint(STREAM_CONSTRAINT, violation)  # TPE models infeasible trials apart
            store_trial(trial, feasible=violation <= 0)
        store_trial(trial, decode_samples=[round(v, 3) for v in samples])
        store_trial(trial, cv=coefficient_of_variation(samples))
        interval = ci95(samples)
        store_trial(trial, ci95=None if interval is None else list(interval))
        store_trial(trial, per_prompt=[r.figures() for r in first.results])
        store_trial(trial, per_category=pooled.per_category())
        store_trial(trial, output_tokens=[r.tokens for r in first.results])
        store_trial(trial, generation_s=round(pooled.generation_ms / 1000, 3))
        store_trial(trial, startup_s=round(pooled.startup_ms / 1000, 3))
        values = [float(np.mean(column)) for column in zip(*(self.objective.values_of(m) for m in measurements))]
        if config.is_baseline:
            reference = baseline_trial(trial.study, config.target)
            if reference is not None:
                store_trial(trial, drift=round(pooled.mix_tok_s / TrialRecord.of(reference).tok_s, 4))
            return values
        reference = wait_for_baseline(trial.study, config.target)
        if reference is None:  # raw tok/s never ranks against speedups: this trial is not a result
            raise TrialFailure(
                f"no baseline of {config.target.name} completed (it failed or is still queued), so "
                "this trial's speedup and output cannot be checked and it is not ranked (the next run measures "
                "the baseline again)"
            )
        latest = latest_baseline(trial.study, config.target)
        latest_tok_s = TrialRecord.of(latest).tok_s
        store_trial(trial, speedup=round(pooled.mix_tok_s / latest_tok_s, 4) if latest_tok_s else None)
        store_trial(trial, speedup_baseline_trial=latest.number)
        if self.settings.sampling.is_greedy:
            self._record_lossless(trial, config, reference, first)
        else:
            store_trial(trial, lossless=None)
            store_trial(trial, lossless_reason=f"not checked: sampling at {self.settings.sampling.describe()}")
        return values

    def _record_lossless(
        self, trial: optuna.Trial, config: SpecConfig, reference: optuna.trial.FrozenTrial, measurement: Measurement
    ) -> None:
        verdicts = compare_outputs(
            [p.id for p in self.mix],
            TrialRecord.of(reference).output_tokens,
            [r.tokens for r in measurement.results],
            lambda i, generated, a, b: self.engine.tie_evidence(config.target, self.mix.prompts[i], generated, a, b),
        )
        store_trial(trial, lossless=all(v.lossless for v in verdicts))
        store_trial(trial, output_match=[v.as_dict() for v in verdicts if v.verdict != "same"])
        store_trial(trial, output_match_fraction=round(sum(v.verdict == "same" for v in verdicts) / len(verdicts), 4))
        differing = next((v for v in verdicts if not v.lossless), None)
        if differing is not None:
            evidence = differing.evidence
            detail = (
                ""
                if evidence is None
                else (
                    f" where the target prefers the baseline's token by {evidence.margin_one_by_one:.3f} "
                    f"(noise {evidence.noise_rms:.3f})"
                )
            )
            store_trial(
                trial, lossless_reason=f"prompt {differing.prompt_id} differs at token {differing.diverged_at}{detail}"
            )
