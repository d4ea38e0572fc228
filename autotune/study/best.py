"""Reading finished studies: the best configuration and the list of trials."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna

from autotune.spec.command import format_command
from autotune.study.confirm import Confirmation, ConfirmedConfig, stored_confirmation
from autotune.errors import AutotuneError, StudyNotFoundError
from autotune.study.objectives import OBJECTIVES
from autotune.study.trials import baseline_trial, decode_tok_s, drift_corrected, is_baseline, spec_default_near
from storage.presets import Preset

COMPLETE = optuna.trial.TrialState.COMPLETE


@dataclass(frozen=True)
class BestResult:
    """The fastest lossless configuration of a study, against the study's baseline and llama.cpp's default."""

    study: str
    trial: optuna.trial.FrozenTrial
    baseline: optuna.trial.FrozenTrial | None
    confirmation: Confirmation | None = None
    front: tuple[optuna.trial.FrozenTrial, ...] = ()  # a pareto study's front (lossless members)
    spec_default: optuna.trial.FrozenTrial | None = None  # `--spec-default` measured nearest the trial

    @property
    def confirmed(self) -> ConfirmedConfig | None:
        """The re-measured figures of this trial's configuration, when `autotune confirm` ran."""
        if self.confirmation is None:
            return None
        rows = self.confirmation.configs + self.confirmation.spec_defaults
        return next((c for c in rows if c.trial == self.trial.number), None)

    @property
    def argv(self) -> list[str]:
        return list(self.trial.user_attrs["argv"])

    @property
    def tok_s(self) -> float:
        return decode_tok_s(self.trial)

    @property
    def baseline_tok_s(self) -> float | None:
        return None if self.baseline is None else decode_tok_s(self.baseline)

    @property
    def speedup(self) -> float | None:
        """Against the baseline measured nearest before the trial (drift-corrected), else the first."""
        if "speedup" in self.trial.user_attrs:
            return self.trial.user_attrs["speedup"]
        return 1.0 if is_baseline(self.trial) else None

    @property
    def spec_default_tok_s(self) -> float | None:
        return None if self.spec_default is None else decode_tok_s(self.spec_default)

    @property
    def speedup_vs_spec_default(self) -> float | None:
        """The trial's speedup over llama.cpp's default, each over the baseline nearest before it."""
        reference = None if self.spec_default is None else self.spec_default.user_attrs.get("speedup")
        return round(self.speedup / reference, 4) if self.speedup is not None and reference else None

    def serving(self) -> dict:
        """The load figures: concurrent streams, aggregate tok/s of all streams, per-stream decode tok/s
        (mean and 10th percentile), confirmed ones (means over the rounds) where a confirmation ran."""
        figures = self.trial.user_attrs.get("figures") or {}
        names = ("aggregate_tok_s", "per_stream_tok_s", "per_stream_p10_tok_s")
        values = {name: figures.get(name) for name in names}
        confirmed = self.confirmed
        if confirmed is not None and confirmed.figures:
            values.update({name: round(sum(v) / len(v), 3) for name, v in confirmed.figures.items()
                           if name in names and v})
        return {"concurrency": int(figures.get("concurrency", 1)), **values, "ttft_ms": figures.get("ttft_ms")}

    def as_dict(self) -> dict:
        config = self.trial.user_attrs["config"]
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
            "engine": self.trial.user_attrs.get("engine"),
            "figures": self.trial.user_attrs.get("figures"),
            "llama_cpp_build": self.trial.user_attrs.get("llama_cpp_build"),
            "hardware": self.trial.user_attrs.get("hardware"),
            "pareto_front": [
                {"trial": t.number, "decode_tok_s": t.values[0], "prompt_tok_s": t.values[1],
                 "e2e_tok_s": t.user_attrs["figures"]["e2e_tok_s"], "label": t.user_attrs["config"]["label"]}
                for t in self.front
            ],
            "confirmed": None if self.confirmed is None else {
                "engine": self.confirmation.engine,
                "build": self.confirmation.build,
                "repeats": self.confirmation.repeats,
                "date": self.confirmation.date,
                "tok_s": self.confirmed.mean_tok_s,
                "ci95": list(self.confirmed.ci95),
                "baseline_tok_s": self.confirmation.baseline_of(self.confirmed).mean_tok_s,
                "speedup": self.confirmed.speedup,
                "p_value": self.confirmed.p_value,
                "significantly_faster": self.confirmed.significantly_faster,
                **self._confirmed_vs_spec_default(),
            },
        }


    def _confirmed_vs_spec_default(self) -> dict:
        reference = self.confirmation.spec_default_of(self.confirmed)
        return {
            "spec_default_tok_s": None if reference is None else reference.mean_tok_s,
            "speedup_vs_spec_default": self.confirmation.speedup_vs_spec_default(self.confirmed),
            "p_value_vs_spec_default": None if reference is None else self.confirmation.welch_p(self.confirmed, reference),
        }


def best_result(study: optuna.Study) -> BestResult:
    """The winner: the fastest confirmed configuration when `autotune confirm` ran, else the completed
    trial with the best objective whose output matched the baseline's. In a pareto study (decode and
    prompt tok/s) the pick on the front is the member with the best end-to-end tok/s."""
    complete = study.get_trials(deepcopy=False, states=(COMPLETE,))
    eligible = [t for t in complete if t.user_attrs.get("lossless") is not False]
    if not eligible:
        raise StudyNotFoundError(f"study {study.study_name!r} has no completed trial yet: run `autotune search`")
    feasible = [t for t in eligible if t.user_attrs.get("feasible") is not False]  # --min-stream-tok-s
    if not feasible:
        raise AutotuneError(f"study {study.study_name!r}: no configuration meets its --min-stream-tok-s bound "
                            "(see `autotune trials`)")
    eligible = feasible
    front: tuple[optuna.trial.FrozenTrial, ...] = ()
    if len(study.directions) > 1:
        pick = OBJECTIVES.get(study.user_attrs.get("objective", "pareto"), OBJECTIVES["pareto"]).pick_figure
        numbers = {t.number for t in eligible}
        front = tuple(t for t in study.best_trials if t.number in numbers) or tuple(eligible)
        best = max(front, key=lambda t: t.user_attrs["figures"][pick])
    else:
        best = max(eligible, key=lambda t: drift_corrected(t, complete))
    confirmation = stored_confirmation(study)
    winner = confirmation.winner if confirmation else None
    if winner is not None:
        best = next((t for t in complete if t.number == winner.trial), best)
    reference = best.user_attrs.get("speedup_baseline_trial")  # the baseline its speedup divides by
    baseline = (next(t for t in complete if t.number == reference) if reference is not None
                else baseline_trial(study, Path(best.user_attrs["config"]["target"])))
    return BestResult(study.study_name, best, baseline, confirmation, front, spec_default_near(study, best))


def trial_rows(study: optuna.Study) -> list[dict]:
    """One JSON-ready row per trial, in trial order."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        config = attrs.get("config", {})
        figures = attrs.get("figures", {})
        rows.append(
            {
                "number": trial.number,
                "state": trial.state.name,
                "role": attrs.get("role", "search"),
                "spec_type": config.get("spec_type"),
                "params": config.get("params", {}),
                "label": config.get("label"),
                "tok_s": decode_tok_s(trial) if "figures" in trial.user_attrs else None,
                "ci95": trial.user_attrs.get("ci95"),
                "cv": trial.user_attrs.get("cv"),
                "drift": trial.user_attrs.get("drift"),
                "drift_check": bool(trial.user_attrs.get("drift_check")),
                "e2e_tok_s": figures.get("e2e_tok_s"),
                "lossless_reason": trial.user_attrs.get("lossless_reason"),
                "speedup": attrs.get("speedup"),
                "acceptance": figures.get("acceptance"),
                "mean_accepted_length": figures.get("mean_accepted_length"),
                "prompt_tok_s": figures.get("prompt_tok_s"),
                "lossless": attrs.get("lossless"),
                "fail_reason": attrs.get("fail_reason"),
                "wall_s": attrs.get("wall_s"),
            }
        )
    return rows


@dataclass(frozen=True)
class PresetResult:
    """A stored preset shown where no study of that hardware is at hand (e.g. another machine's)."""

    preset: Preset

    @property
    def argv(self) -> list[str]:
        return list(self.preset.argv)

    def summary(self) -> str:
        p = self.preset
        return (f"# preset for {p.hardware}: {p.tok_s:.1f} tok/s, baseline {p.baseline_tok_s:.1f}, speedup "
                f"{p.speedup:.2f}x (confirmed on {p.engine}, {p.created_at:%Y-%m-%d})")

    def as_dict(self) -> dict:
        p = self.preset
        return {
            "study": p.study_name,
            "command": p.command,
            "argv": self.argv,
            "tok_s": p.tok_s,
            "baseline_tok_s": p.baseline_tok_s,
            "speedup": p.speedup,
            "params": {"spec_type": p.params.get("spec_type"), **p.params.get("params", {})},
            "engine": p.engine,
            "llama_cpp_build": p.llama_cpp_build,
            "hardware": p.hardware,
            "concurrency": p.concurrency,
            "preset": True,
        }
