"""What a report shows, read once from a study: both the HTML and the PNG figures draw from this.

The figures plot the study's objective, its first value: decode tok/s (the default), e2e tok/s, or on
a pareto study (values = [decode tok/s, prompt tok/s]) decode tok/s. Failed and pruned trials are
kept so the figures can show them; only completed trials carry figures. A study re-measures its
baseline now and then (drift checks): every such measurement is a baseline trial.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna

from autotune.errors import StudyNotFoundError
from autotune.measure.stats import ci95
from autotune.spec.command import format_command
from autotune.study.best import best_result
from autotune.study.objectives import DEFAULT_OBJECTIVE
from autotune.study.records import StudyRecord, TrialRecord
from autotune.study.trials import is_baseline
from autotune.study.verdict import RacedConfig, RaceVerdict, stored_verdict

TrialState = optuna.trial.TrialState

#: What the first objective value of a study measures, by its `objective` attribute.
METRICS = {"decode": "decode tok/s", "e2e": "e2e tok/s", "pareto": "decode tok/s"}
#: Parameters whose values get a "tok/s by value" figure, when a study searched them.
GROUPED_PARAMS = ("draft_n_max", "dspark_pctree_k", "dspark_pctree_n")
TOP_CONFIGS = 5


@dataclass(frozen=True)
class Interval:
    """Mean of a group of trials with its 95% confidence interval (Student's t; none for one trial)."""

    n: int
    mean: float
    low: float | None
    high: float | None

    @classmethod
    def of(cls, values: list[float]) -> "Interval":
        low, high = ci95(values) or (None, None)
        return cls(len(values), float(np.mean(values)), low, high)

    @property
    def error_bar(self) -> tuple[float, float] | None:
        """(below, above) the mean, or None where there is no interval or it does not contain the mean
        (the interval is rounded to 3 decimals, the mean is not: equal values can leave the mean a hair
        outside it). A figure draws no bar then and its caption says why (`outside_note`)."""
        if self.low is None or self.high is None or not self.contains_mean:
            return None
        return self.mean - self.low, self.high - self.mean

    @property
    def contains_mean(self) -> bool:
        """Whether the mean lies in its interval; True where there is no interval to disagree."""
        return self.low is None or self.high is None or self.low <= self.mean <= self.high


@dataclass(frozen=True)
class Group:
    """Trials sharing a spec type (or a parameter value): their tok/s, interval and unfinished count."""

    key: str | int | float
    tok_s: list[float]
    numbers: list[int]
    interval: Interval | None
    failed: int = 0
    pruned: int = 0

    @property
    def label(self) -> str:
        extra = [f"n={len(self.tok_s)}"]
        if self.failed:
            extra.append(f"{self.failed} failed")
        if self.pruned:
            extra.append(f"{self.pruned} pruned")
        return f"{self.key} ({', '.join(extra)})"


@dataclass(frozen=True)
class TopConfig:
    """One row of the report's table of best configurations."""

    rank: int | None  # None for a baseline row
    trial: optuna.trial.FrozenTrial
    speedup: float | None
    confirmed: RacedConfig | None
    picked: bool

    @property
    def label(self) -> str:
        return TrialRecord.of(self.trial).label

    @property
    def command(self) -> str:
        return format_command(TrialRecord.of(self.trial).argv)

    def figure(self, name: str) -> float | None:
        """One of the trial's pooled figures (`mix_tok_s`, `prompt_tok_s`, `e2e_tok_s`, `acceptance`)."""
        value = TrialRecord.of(self.trial).figures.get(name)
        return None if value is None else float(value)


@dataclass
class StudyView:
    """The parts of a study a report draws."""

    study: optuna.Study
    trials: list[optuna.trial.FrozenTrial] = field(init=False)
    confirmation: RaceVerdict | None = field(init=False)

    def __post_init__(self) -> None:
        self.trials = self.study.get_trials(deepcopy=False)
        if not self.complete:
            raise StudyNotFoundError(
                f"study {self.study.study_name!r} has no completed trial to report: run `autotune search` first"
            )
        self.confirmation = stored_verdict(self.study)

    # --- what the study is -------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.study.study_name

    @property
    def is_pareto(self) -> bool:
        return len(self.study.directions) == 2

    @property
    def record(self) -> StudyRecord:
        return StudyRecord.of(self.study)

    def _in_state(self, state: TrialState) -> list[optuna.trial.FrozenTrial]:
        return [t for t in self.trials if t.state == state]

    @property
    def complete(self) -> list[optuna.trial.FrozenTrial]:
        return self._in_state(TrialState.COMPLETE)

    @property
    def failed(self) -> list[optuna.trial.FrozenTrial]:
        return self._in_state(TrialState.FAIL)

    @property
    def pruned(self) -> list[optuna.trial.FrozenTrial]:
        return self._in_state(TrialState.PRUNED)

    @property
    def unfinished(self) -> list[optuna.trial.FrozenTrial]:
        """Failed and pruned trials: shown in the figures and listed with their reasons."""
        return [t for t in self.trials if t.state in (TrialState.FAIL, TrialState.PRUNED)]

    @property
    def baselines(self) -> list[optuna.trial.FrozenTrial]:
        return [t for t in self.complete if is_baseline(t)]

    @property
    def speculative(self) -> list[optuna.trial.FrozenTrial]:
        """Completed trials of a speculative configuration."""
        return [t for t in self.complete if not is_baseline(t) and bool(TrialRecord.of(t).config)]

    @property
    def objective(self) -> str:
        return self.record.objective or ("pareto" if self.is_pareto else DEFAULT_OBJECTIVE)

    @property
    def metric(self) -> str:
        """What the figures' tok/s axis measures: the study's (first) objective."""
        return METRICS.get(self.objective, "tok/s")

    # --- figures of one trial ------------------------------------------------------------------
    @staticmethod
    def tok_s(trial: optuna.trial.FrozenTrial) -> float:
        """The completed trial's (first) objective value: the quantity every tok/s axis shows."""
        return float(trial.values[0])

    def baselines_of(self, target: str) -> list[optuna.trial.FrozenTrial]:
        """Every completed measurement of `target`'s baseline, oldest first."""
        return [b for b in self.baselines if TrialRecord.of(b).config["target"] == target]

    def baseline_levels(self) -> list[tuple[str, float, int]]:
        """Per target: (target, mean objective value over its baseline measurements, how many)."""
        levels = []
        for target in dict.fromkeys(TrialRecord.of(b).config["target"] for b in self.baselines):
            values = [self.tok_s(b) for b in self.baselines_of(target)]
            levels.append((target, float(np.mean(values)), len(values)))
        return levels

    def speedup_baseline(self, trial: optuna.trial.FrozenTrial) -> optuna.trial.FrozenTrial | None:
        """The baseline measurement the trial's speedup divides by (the latest before it), else the first."""
        target = TrialRecord.of(trial).config.get("target")
        found = self.baselines_of(target)
        number = TrialRecord.of(trial).speedup_baseline_trial
        return next((b for b in found if b.number == number), found[0] if found else None)

    @staticmethod
    def speedup(trial: optuna.trial.FrozenTrial) -> float | None:
        """The decode speedup the tuner recorded (over the latest baseline: drift cancels)."""
        value = TrialRecord.of(trial).speedup
        return None if value is None else float(value)

    @staticmethod
    def spec_type(trial: optuna.trial.FrozenTrial) -> str:
        spec_type = TrialRecord.of(trial).spec_type
        if spec_type is not None:
            return spec_type
        return "none" if is_baseline(trial) else trial.params.get("spec_type", "?")

    # --- what the figures group and rank ----------------------------------------------------------
    def pick(self) -> optuna.trial.FrozenTrial:
        """The configuration `autotune best` prints (autotune.study.best.best_result: the confirmed winner,
        else the best lossless trial, on a pareto front the member with the best end-to-end tok/s);
        the fastest trial when no trial is lossless."""
        try:
            return best_result(self.study).trial
        except StudyNotFoundError:
            return max(self.complete, key=self.tok_s)

    def rank_value(self, trial: optuna.trial.FrozenTrial) -> float:
        """What ranks configurations: the objective, or on a pareto study end-to-end tok/s (as `best`)."""
        if self.is_pareto:
            return float(TrialRecord.of(trial).figures.get("e2e_tok_s") or self.tok_s(trial))
        return self.tok_s(trial)

    def by_spec_type(self) -> list[Group]:
        return self._groups(lambda t: self.spec_type(t), self.complete + self.unfinished)

    def by_param(self, name: str) -> dict[str, list[Group]]:
        """Per spec type, the groups of trials by the value of parameter `name` (where they set it)."""
        out: dict[str, list[Group]] = {}
        for spec_type in dict.fromkeys(self.spec_type(t) for t in self.complete):
            trials = [
                t for t in self.complete + self.unfinished if self.spec_type(t) == spec_type and name in _params(t)
            ]
            groups = self._groups(lambda t: _params(t)[name], trials)
            if groups:
                out[spec_type] = sorted(groups, key=lambda g: g.key)
        return out

    def grouped_params(self) -> list[str]:
        """The GROUPED_PARAMS that completed trials set to more than one value."""
        return [
            name for name in GROUPED_PARAMS if len({_params(t)[name] for t in self.complete if name in _params(t)}) > 1
        ]

    def top_configs(self, top: int = TOP_CONFIGS) -> list[TopConfig]:
        """The `top` fastest distinct lossless speculative configurations (the pick always among them),
        then the baselines they compare against."""
        picked = self.pick()
        seen: set[str] = set()
        chosen: list[optuna.trial.FrozenTrial] = []
        for trial in sorted(self.speculative, key=self.rank_value, reverse=True):
            label = TrialRecord.of(trial).label
            if TrialRecord.of(trial).lossless is False or label in seen:
                continue
            seen.add(label)
            chosen.append(trial)
        chosen = chosen[:top]
        if picked.number not in {t.number for t in chosen} and not is_baseline(picked):
            chosen = [*chosen[: top - 1], picked]
        rows = [self._row(rank, trial, picked) for rank, trial in enumerate(chosen, start=1)]
        baselines = [
            picked if picked in measured else measured[0]  # the picked measurement when a baseline won
            for measured in (self.baselines_of(target) for target, *_ in self.baseline_levels())
        ]
        return rows + [self._row(None, b, picked) for b in baselines]

    def _row(self, rank: int | None, trial: optuna.trial.FrozenTrial, picked: optuna.trial.FrozenTrial) -> TopConfig:
        confirmed = None
        if self.confirmation is not None:
            rows = self.confirmation.baselines if rank is None else self.confirmation.configs
            target = TrialRecord.of(trial).config["target"]
            confirmed = next(
                (c for c in rows if (c.target == target if rank is None else c.trial == trial.number)), None
            )
        return TopConfig(rank, trial, self.speedup(trial), confirmed, trial.number == picked.number)

    def category_speedups(self, top: int = 3) -> tuple[list[str], dict[str, list[float | None]]]:
        """Categories, and per top configuration (label) its decode speedup over its baseline in each
        (the baseline measurement its overall speedup divides by)."""
        pairs = []
        for row in self.top_configs(top):
            baseline = self.speedup_baseline(row.trial) if row.rank is not None else None
            if baseline is not None:
                pairs.append((row, TrialRecord.of(row.trial).per_category, TrialRecord.of(baseline).per_category))
        categories = sorted({c for _, mine, base in pairs for c in mine if c in base})
        speedups = {
            f"#{row.trial.number} {row.label}": [
                _ratio(mine.get(c, {}).get("mix_tok_s"), base.get(c, {}).get("mix_tok_s")) for c in categories
            ]
            for row, mine, base in pairs
        }
        return categories, speedups

    def acceptance_points(self) -> list[tuple[optuna.trial.FrozenTrial, float, float]]:
        """(trial, acceptance, decode tok/s) of every completed speculative trial that drafted."""
        points = []
        for trial in self.speculative:
            acceptance = TrialRecord.of(trial).figures.get("acceptance")
            if acceptance is not None:
                points.append((trial, float(acceptance), self.tok_s(trial)))
        return points

    def importance_scopes(self) -> list[tuple[str, list[optuna.trial.FrozenTrial], list[str]]]:
        """(title, completed trials, parameters) worth an importance figure: the whole study over every
        parameter, and each spec type over its own parameters; only where >= 2 trials vary them."""
        scopes = [("every trial", self.complete, _varying(self.complete))]
        for spec_type in dict.fromkeys(self.spec_type(t) for t in self.speculative):
            trials = [t for t in self.speculative if self.spec_type(t) == spec_type]
            params = [p for p in _varying(trials) if p != "spec_type"]
            scopes.append((f"{spec_type} trials", trials, params))
        return scopes

    def _groups(self, key, trials: list[optuna.trial.FrozenTrial]) -> list[Group]:
        keys = list(dict.fromkeys(key(t) for t in trials))
        groups = []
        for k in keys:
            members = [t for t in trials if key(t) == k]
            done = [t for t in members if t.state == TrialState.COMPLETE]
            values = [self.tok_s(t) for t in done]
            groups.append(
                Group(
                    k,
                    values,
                    [t.number for t in done],
                    Interval.of(values) if values else None,
                    failed=sum(t.state == TrialState.FAIL for t in members),
                    pruned=sum(t.state == TrialState.PRUNED for t in members),
                )
            )
        return groups


def _params(trial: optuna.trial.FrozenTrial) -> dict:
    config = TrialRecord.of(trial).config
    return dict(config["params"]) if config else dict(trial.params)


def _varying(trials: list[optuna.trial.FrozenTrial]) -> list[str]:
    """Optuna parameters that take more than one value over `trials`."""
    values: dict[str, set] = {}
    for trial in trials:
        for name, value in trial.params.items():
            values.setdefault(name, set()).add(value)
    return sorted(name for name, seen in values.items() if len(seen) > 1)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def model_file_hashes(trial: optuna.trial.FrozenTrial) -> dict[str, str]:
    return dict(TrialRecord.of(trial).model_files)


def short_path(path: str | None) -> str:
    return Path(path).name if path else ""
