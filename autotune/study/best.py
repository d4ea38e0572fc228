"""Reading finished studies: the best configuration and the list of trials."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import optuna

from autotune.errors import AutotuneError, StudyNotFoundError
from autotune.llamacpp.runnable import CommandCheck
from autotune.spec.command import format_command
from autotune.spec.types import family_of
from autotune.study.objectives import DEFAULT_OBJECTIVE, OBJECTIVES
from autotune.study.records import StudyRecord, TrialRecord
from autotune.study.trials import baseline_trial, decode_tok_s, drift_corrected, is_baseline, spec_default_near
from autotune.study.verdict import RacedConfig, RaceVerdict, stored_verdict, trial_of

COMPLETE = optuna.trial.TrialState.COMPLETE


@dataclass(frozen=True)
class SetAside:
    """A configuration faster than the printed one that the printed command's llama-server cannot run."""

    trial: optuna.trial.FrozenTrial
    lacking: tuple[str, ...]  # the flags (or `--spec-type X`) that binary lacks
    binary: str  # that binary, in words
    needs: str  # `needs X (the PCTree fork of llama.cpp), which <binary> lacks`

    @property
    def speedup(self) -> float | None:
        return TrialRecord.of(self.trial).speedup

    def as_dict(self) -> dict:
        record = TrialRecord.of(self.trial)
        return {
            "trial": self.trial.number,
            "label": record.label,
            "speedup": self.speedup,
            "engine": record.engine,
            "command": format_command(list(record.argv)),
            "lacking": list(self.lacking),
            "binary": self.binary,
        }


@dataclass(frozen=True)
class BestResult:
    """The fastest lossless configuration of a study, against the study's baseline and llama.cpp's default."""

    study: str
    trial: optuna.trial.FrozenTrial
    baseline: optuna.trial.FrozenTrial | None
    confirmation: RaceVerdict | None = None
    front: tuple[optuna.trial.FrozenTrial, ...] = ()  # a pareto study's front (lossless members)
    spec_default: optuna.trial.FrozenTrial | None = None  # `--spec-default` measured nearest the trial
    objective: str = DEFAULT_OBJECTIVE  # what the study maximized (autotune.study.objectives)
    #: a faster configuration the printed command's llama-server cannot run
    set_aside: SetAside | None = None
    #: the predicted speedup of each prompt category, by trial number (a predicted study's raced trials)
    predicted_categories: dict = field(default_factory=dict)
    #: what the search cost per phase (autotune.measure.ledger; empty where the search kept no ledger)
    cost: dict = field(default_factory=dict)

    @property
    def record(self) -> TrialRecord:
        return TrialRecord.of(self.trial)

    @property
    def confirmed(self) -> RacedConfig | None:
        """The re-measured figures of this trial's configuration, when `autotune confirm` ran (the
        baseline's row where the baseline is the answer: nothing was significantly faster)."""
        if self.confirmation is None:
            return None
        if is_baseline(self.trial):
            target = self.record.config_target
            return next((b for b in self.confirmation.baselines if b.target == target), None)
        rows = self.confirmation.configs + self.confirmation.spec_defaults
        return next((c for c in rows if c.trial == self.trial.number), None)

    @property
    def predicted_speedup(self) -> float | None:
        """The speedup predicted for this configuration (a predicted study's trials; None when measured)."""
        return self.record.predicted.get("speedup")

    @property
    def prediction_error(self) -> float | None:
        """predicted / raced speedup - 1 of the printed configuration: the prediction's error out of
        sample (the race measured it after it was predicted); None where either is missing."""
        confirmed = self.confirmed
        raced = confirmed.speedup if confirmed is not None else None
        predicted = self.predicted_speedup
        return round(predicted / raced - 1, 4) if predicted and raced else None

    @property
    def argv(self) -> list[str]:
        return list(self.record.argv)

    @property
    def tok_s(self) -> float:
        return decode_tok_s(self.trial)

    @property
    def baseline_tok_s(self) -> float | None:
        return None if self.baseline is None else decode_tok_s(self.baseline)

    @property
    def speedup(self) -> float | None:
        """Against the baseline measured nearest before the trial (drift-corrected), else the first."""
        if self.record.speedup is not None:
            return self.record.speedup
        return 1.0 if is_baseline(self.trial) else None

    @property
    def spec_default_tok_s(self) -> float | None:
        return None if self.spec_default is None else decode_tok_s(self.spec_default)

    @property
    def speedup_vs_spec_default(self) -> float | None:
        """The trial's speedup over llama.cpp's default, each over the baseline nearest before it."""
        reference = None if self.spec_default is None else TrialRecord.of(self.spec_default).speedup
        return round(self.speedup / reference, 4) if self.speedup is not None and reference else None

    def serving(self) -> dict:
        """The load figures: concurrent streams, aggregate tok/s of all streams, per-stream decode tok/s
        (mean and 10th percentile), confirmed ones (means over the rounds) where a confirmation ran."""
        figures = self.record.figures
        names = ("aggregate_tok_s", "per_stream_tok_s", "per_stream_p10_tok_s")
        values = {name: figures.get(name) for name in names}
        confirmed = self.confirmed
        if confirmed is not None and confirmed.figures:
            values.update(
                {name: round(sum(v) / len(v), 3) for name, v in confirmed.figures.items() if name in names and v}
            )
        return {"concurrency": int(figures.get("concurrency", 1)), **values, "ttft_ms": figures.get("ttft_ms")}

    def as_dict(self) -> dict:
        record = self.record
        config = record.config
        return {
            "study": self.study,
            "trial": self.trial.number,
            "command": format_command(self.argv),
            "argv": self.argv,
            "tok_s": round(self.tok_s, 3),
            "baseline_tok_s": None if self.baseline_tok_s is None else round(self.baseline_tok_s, 3),
            "speedup": None if self.speedup is None else round(self.speedup, 4),
            "spec_default_tok_s": None if self.spec_default_tok_s is None else round(self.spec_default_tok_s, 3),
            "speedup_vs_spec_default": self.speedup_vs_spec_default,
            "params": {"spec_type": config["spec_type"], **config["params"]},
            "runtime": dict(config.get("runtime", {})),
            **self.serving(),
            "objective": self.objective,
            "predicted_speedup": self.predicted_speedup,
            "prediction_error": self.prediction_error,
            "set_aside": None if self.set_aside is None else self.set_aside.as_dict(),
            "engine": record.engine,
            "figures": record.figures or None,
            "llama_cpp_build": record.llama_cpp_build,
            "hardware": record.hardware,
            "pareto_front": [
                {
                    "trial": t.number,
                    "decode_tok_s": t.values[0],
                    "prompt_tok_s": t.values[1],
                    "e2e_tok_s": TrialRecord.of(t).figures["e2e_tok_s"],
                    "label": TrialRecord.of(t).label,
                }
                for t in self.front
            ],
            "confirmed": None
            if self.confirmed is None
            else {
                "engine": self.confirmation.engine,
                "build": self.confirmation.build,
                "rounds": self.confirmation.repeats,
                "date": self.confirmation.date,
                "tok_s": self.confirmed.mean_tok_s,
                "baseline_tok_s": self.confirmation.baseline_of(self.confirmed).mean_tok_s,
                **self.confirmed.as_json(),
                "spec_default_tok_s": getattr(self.confirmation.spec_default_of(self.confirmed), "mean_tok_s", None),
                "speedup_vs_spec_default": self.confirmation.speedup_vs_spec_default(self.confirmed),
            },
            "race": None if self.confirmation is None else self.race_summary(),
            "by_category": self.by_category(),
            "cost": self.cost,
        }

    def by_category(self) -> dict:
        """For the pick and for `--spec-default`, each category's raced speedup over the plain command
        (paired on that category's prompts) with its interval, and the predicted one beside it. Where the
        plain command is the pick, the race's fastest entrant stands in its place (key `fastest`): where it
        won and where it lost is what the user then wants to see."""
        confirmation, pick = self.confirmation, self.confirmed
        if confirmation is None or pick is None:
            return {}
        key, shown = ("fastest", confirmation.fastest) if pick.role == "baseline" else ("pick", pick)
        rows = {key: shown, "spec_default": None if shown is None else confirmation.spec_default_of(shown)}
        found = {}
        for name, row in rows.items():
            if row is None or (name == "spec_default" and row is shown):
                continue
            predicted = self.predicted_categories.get(row.trial, {})
            found[name] = {
                "label": row.label,
                "categories": {
                    category: {
                        "speedup": round(speedup.ratio, 4),
                        "speedup_ci": [round(v, 4) for v in speedup.interval()],
                        "predicted_speedup": predicted.get(category),
                    }
                    for category, speedup in confirmation.by_category(row).items()
                },
            }
        return found

    def race_summary(self) -> dict:
        """The race behind the answer: the pick, `--spec-default` and every finalist, each with its paired
        speedup, interval, p-value, significance, rounds and prompts; how it paired and why it ended."""
        confirmation = self.confirmation
        pick = self.confirmed
        spec_default = confirmation.spec_default_of(pick) if pick is not None else None
        return {
            "pick": None if pick is None else pick.as_json(),
            "spec_default": None if spec_default is None else spec_default.as_json(),
            "finalists": [row.as_json() for row in confirmation.configs],
            "spec_defaults": [row.as_json() for row in confirmation.spec_defaults],  # a failed one included
            "pairing": confirmation.pairing,
            "ended": confirmation.ended,
            "rounds": confirmation.repeats,
            "looks": confirmation.looks,
            "decided_round": confirmation.decided_round,
            "after_decision_round": confirmation.after_decision_round,
            "machine_moved": confirmation.machine_moved,
            "control": confirmation.control.as_json() if confirmation.control else None,
            "void_rounds": confirmation.void_rounds,
            "within_reach": confirmation.within_reach,
            "min_effect": confirmation.min_effect,
            "alpha": confirmation.alpha,
        }


def best_result(study: optuna.Study, *, check: CommandCheck | None = None) -> BestResult:
    """The winner: when a confirmation (or race) ran, its winner, or the baseline where no configuration
    was significantly faster than it there; else the completed trial with the best objective whose
    output matched the baseline's. In a pareto study (decode and
    prompt tok/s) the pick on the front is the member with the best end-to-end tok/s.

    With `check` (the llama-server the printed command names) the winner is the best configuration that
    binary runs; the fastest one it cannot run (a fork's flags) is kept aside to be named beside it."""
    complete = study.get_trials(deepcopy=False, states=(COMPLETE,))
    eligible = [t for t in complete if TrialRecord.of(t).lossless is not False]
    if not eligible:
        raise StudyNotFoundError(f"study {study.study_name!r} has no completed trial yet: run `autotune search`")
    feasible = [t for t in eligible if TrialRecord.of(t).feasible is not False]  # --min-stream-tok-s
    if not feasible:
        raise AutotuneError(
            f"study {study.study_name!r}: no configuration meets its --min-stream-tok-s bound (see `autotune trials`)"
        )
    objective = StudyRecord.of(study).objective or DEFAULT_OBJECTIVE
    confirmation = stored_verdict(study)
    best, front = _choose(study, complete, feasible, confirmation, objective)
    set_aside = None
    if check is not None:
        runnable = [t for t in feasible if check.runs(TrialRecord.of(t).argv)]
        fastest = best if not check.runs(TrialRecord.of(best).argv) else _fastest_speculative(complete, feasible)
        if runnable:
            best, front = _choose(
                study, complete, runnable, confirmation and confirmation.runnable_by(check), objective
            )
        lacking = check.lacking(TrialRecord.of(fastest).argv) if fastest not in (None, best) else ()
        if lacking:
            set_aside = SetAside(fastest, lacking, check.label, check.needs(lacking))
    reference = TrialRecord.of(best).speedup_baseline_trial  # the baseline its speedup divides by
    baseline = (
        next(t for t in complete if t.number == reference)
        if reference is not None
        else baseline_trial(study, Path(TrialRecord.of(best).config["target"]))
    )
    return BestResult(
        study.study_name,
        best,
        baseline,
        confirmation=confirmation,
        front=front,
        spec_default=spec_default_near(study, best),
        objective=objective,
        set_aside=set_aside,
        predicted_categories={
            t.number: TrialRecord.of(t).predicted["by_category"]
            for t in complete
            if "by_category" in TrialRecord.of(t).predicted
        },
        cost=StudyRecord.of(study).cost,
    )


def _choose(
    study: optuna.Study,
    complete: list[optuna.trial.FrozenTrial],
    eligible: list[optuna.trial.FrozenTrial],
    confirmation: RaceVerdict | None,
    objective: str,
) -> tuple[optuna.trial.FrozenTrial, tuple[optuna.trial.FrozenTrial, ...]]:
    """The winner among `eligible` (and the pareto front it was picked on)."""
    front: tuple[optuna.trial.FrozenTrial, ...] = ()
    if len(study.directions) > 1:
        pick = OBJECTIVES.get(objective, OBJECTIVES["pareto"]).pick_figure
        numbers = {t.number for t in eligible}
        front = tuple(t for t in study.best_trials if t.number in numbers) or tuple(eligible)
        best = max(front, key=lambda t: TrialRecord.of(t).figures[pick])
    else:
        ranked = [t for t in eligible if drift_corrected(t, complete) is not None]
        if not ranked:
            raise StudyNotFoundError(
                f"study {study.study_name!r} has no trial measured against a baseline yet: run `autotune search`"
            )
        best = max(ranked, key=lambda t: drift_corrected(t, complete))
    pick = confirmation.pick if confirmation is not None else None
    if pick is not None:  # the winner, or the plain command where nothing earned its flags there
        best = trial_of(study, pick) or best
    return best, front


def _fastest_speculative(
    complete: list[optuna.trial.FrozenTrial], eligible: list[optuna.trial.FrozenTrial]
) -> optuna.trial.FrozenTrial | None:
    """The eligible speculative trial with the highest drift-corrected speedup in the study."""
    ranked = [t for t in eligible if not is_baseline(t) and drift_corrected(t, complete) is not None]
    return max(ranked, key=lambda t: drift_corrected(t, complete), default=None)


def trial_rows(study: optuna.Study) -> list[dict]:
    """One JSON-ready row per trial, in trial order; a prediction with the band its family's error gives
    it (autotune.search.prediction_error), so a reader sees how far apart two predictions must be to differ."""
    rows = []
    confirmation = stored_verdict(study)
    raced = {c.trial: c for c in (confirmation.configs if confirmation else []) if c.failure is None}
    for trial in study.get_trials(deepcopy=False):
        record = TrialRecord.of(trial)
        measured = {"tok_s": record.tok_s, "speedup": record.speedup}
        if record.predicted and record.role is None:  # a predicted trial: measured only if it raced
            row = raced.get(trial.number)
            measured = {"tok_s": row.mean_tok_s if row else None, "speedup": row.speedup if row else None}
        rows.append(
            {
                "number": trial.number,
                "state": trial.state.name,
                "role": record.role or "search",
                "spec_type": record.spec_type,
                "params": record.config.get("params", {}),
                "label": record.label,
                "tok_s": measured["tok_s"],
                "ci95": record.ci95,
                "cv": record.cv,
                "drift": record.drift,
                "drift_check": record.drift_check,
                "e2e_tok_s": record.figure("e2e_tok_s"),
                "lossless_reason": record.lossless_reason,
                "speedup": measured["speedup"],
                "acceptance": record.figure("acceptance"),
                "mean_accepted_length": record.figure("mean_accepted_length"),
                "prompt_tok_s": record.figure("prompt_tok_s"),
                "lossless": record.lossless,
                "predicted_speedup": record.predicted.get("speedup"),
                # where the raced speedup should fall, under the family's error sd (90 %, both sides)
                "predicted_band": record.predicted.get("speedup_band"),
                "prediction_error": _error(record.predicted.get("speedup"), measured["speedup"])
                if record.predicted and record.role is None
                else None,
                "family": family_of(record.spec_type),
                "fail_reason": record.fail_reason,
                "wall_s": record.wall_s,
            }
        )
    return rows


def _error(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured - 1, out of sample where the measurement came after the prediction."""
    return round(predicted / measured - 1, 4) if predicted and measured else None
