"""tok/s against load: the studies of one model on one machine at each `--concurrency` level.

A report of one study also draws its sibling studies, the same model, hardware, engine family and
objective at other levels, when there are any: per spec type the best trial's aggregate and
per-stream tok/s at each level, the baseline's, and for the best configuration of each level its
figures (raced on llama-server where a race ran). Where the best speculative
configuration's aggregate tok/s stops beating the baseline's, speculation stops paying.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from autotune.study.catalog import parse_kind, study_name
from autotune.study.records import BASELINE_ROLE, WARM_START_ROLE, StudyRecord, TrialRecord
from autotune.study.runs import newest_answer
from autotune.study.verdict import stored_verdict

COMPLETE = optuna.trial.TrialState.COMPLETE


@dataclass(frozen=True)
class LevelPoint:
    """The figures of one configuration (or the best of one spec type) at one level."""

    concurrency: int
    aggregate_tok_s: float
    per_stream_tok_s: float
    label: str
    confirmed: bool = False


@dataclass(frozen=True)
class LoadCurve:
    """What the load panel draws."""

    levels: list[int]
    by_spec_type: dict[str, list[LevelPoint]]  # "none" is the baseline
    best: list[LevelPoint]  # the best speculative configuration of each level
    baseline: list[LevelPoint]  # the baseline measured beside it (confirmed where `best` is)

    def speedups(self) -> dict[int, float]:
        """Aggregate tok/s of each level's best configuration over its baseline's."""
        base = {p.concurrency: p.aggregate_tok_s for p in self.baseline}
        return {p.concurrency: p.aggregate_tok_s / base[p.concurrency] for p in self.best if base.get(p.concurrency)}

    def verdict(self) -> str:
        """Where speculation stops paying, in one sentence."""
        speedups = self.speedups()
        if not speedups:
            return "No level has both a baseline and a speculative configuration measured."
        shown = ", ".join(f"{n} stream{'s' if n > 1 else ''} {s:.2f}x" for n, s in sorted(speedups.items()))
        losing = [n for n, s in sorted(speedups.items()) if s <= 1.0]
        if not losing:
            return f"Speculation pays at every level measured (aggregate tok/s over the baseline: {shown})."
        return (
            f"Speculation stops paying at {losing[0]} concurrent streams: the best configuration there is no "
            f"faster in aggregate than the baseline ({shown})."
        )


def load_curve(study: optuna.Study) -> LoadCurve | None:
    """The load curve of `study` and its siblings at other levels; None when only one level was studied."""
    record = StudyRecord.of(study)
    model, hardware = record.model, record.hardware
    if not model or not hardware:
        return None
    prefix = f"{model}@{hardware}:"
    engine, objective, _ = (
        parse_kind(study.study_name[len(prefix) :]) if study.study_name.startswith(prefix) else ("", "", 1)
    )
    storage = study._storage
    engines: dict[int, set[str]] = {}
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        if summary.study_name.startswith(prefix):
            kind_engine, kind_objective, level = parse_kind(summary.study_name[len(prefix) :])
            if kind_objective == objective:
                engines.setdefault(level, set()).add(kind_engine)
    newest: dict[int, str] = {}
    for level, found in engines.items():
        # this study's engine where it measured that level, else llama-server (every level above 1 runs there)
        chosen = engine if engine in found else ("server" if "server" in found else sorted(found)[0])
        newest[level] = newest_answer(
            storage, study_name(model, hardware, chosen, objective=objective, concurrency=level)
        )
    if len(newest) < 2:
        return None
    by_type: dict[str, list[LevelPoint]] = {}
    best, baseline = [], []
    for level in sorted(newest):
        sibling = (
            study if newest[level] == study.study_name else optuna.load_study(study_name=newest[level], storage=storage)
        )
        complete = [
            t
            for t in sibling.get_trials(deepcopy=False, states=(COMPLETE,))
            if TrialRecord.of(t).lossless is not False and bool(TrialRecord.of(t).figures)
        ]
        for spec_type in sorted({TrialRecord.of(t).config["spec_type"] for t in complete}):
            trials = [t for t in complete if TrialRecord.of(t).config["spec_type"] == spec_type]
            top = max(trials, key=lambda t: _figures(t)[0])
            by_type.setdefault(spec_type, []).append(_point(level, top))
        searched = [t for t in complete if TrialRecord.of(t).role in (None, WARM_START_ROLE)]  # not references
        references = [t for t in complete if TrialRecord.of(t).role == BASELINE_ROLE]
        confirmed = _confirmed_points(sibling, level)
        if confirmed is not None:
            best.append(confirmed[0])
            baseline.append(confirmed[1])
        elif searched and references:
            best.append(_point(level, max(searched, key=lambda t: _figures(t)[0])))
            baseline.append(_point(level, references[-1]))
    return LoadCurve(sorted(newest), by_type, best, baseline)


def _figures(trial: optuna.trial.FrozenTrial) -> tuple[float, float]:
    """(aggregate, per-stream) tok/s of a trial; older trials without them: e2e and decode tok/s."""
    figures = TrialRecord.of(trial).figures
    return (
        float(figures.get("aggregate_tok_s", figures.get("e2e_tok_s", 0.0))),
        float(figures.get("per_stream_tok_s", figures.get("mix_tok_s", 0.0))),
    )


def _point(level: int, trial: optuna.trial.FrozenTrial) -> LevelPoint:
    aggregate, per_stream = _figures(trial)
    return LevelPoint(level, aggregate, per_stream, TrialRecord.of(trial).label)


def _confirmed_points(study: optuna.Study, level: int) -> tuple[LevelPoint, LevelPoint] | None:
    """The confirmed winner of `study` and its baseline, from its race's serving figures."""
    confirmation = stored_verdict(study)
    if confirmation is None or confirmation.winner is None or not confirmation.winner.figures:
        return None
    winner = confirmation.winner
    base = confirmation.baseline_of(winner)
    if not base.figures:
        return None

    def point(row) -> LevelPoint:
        mean = {name: sum(v) / len(v) for name, v in row.figures.items() if v}
        return LevelPoint(
            level, mean.get("aggregate_tok_s", 0.0), mean.get("per_stream_tok_s", 0.0), row.label, confirmed=True
        )

    return point(winner), point(base)


# -- drawing ------------------------------------------------------------------------------------------


def plotly_load(curve: LoadCurve, colors: dict[str, str]):
    """Aggregate tok/s (solid) and per-stream tok/s (dotted) against concurrency, per spec type, with the
    best configuration of each level and its baseline in black."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for spec_type, points in curve.by_spec_type.items():
        color = colors.get(spec_type, "#7f7f7f")
        xs = [p.concurrency for p in points]
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=[p.aggregate_tok_s for p in points],
                mode="lines+markers",
                name=f"{spec_type}: aggregate",
                line=dict(color=color),
                text=[p.label for p in points],
            )
        )
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=[p.per_stream_tok_s for p in points],
                mode="lines+markers",
                name=f"{spec_type}: per stream",
                line=dict(color=color, dash="dot"),
                text=[p.label for p in points],
            )
        )
    for name, points, dash in (("best of each level", curve.best, "solid"), ("baseline", curve.baseline, "dash")):
        figure.add_trace(
            go.Scatter(
                x=[p.concurrency for p in points],
                y=[p.aggregate_tok_s for p in points],
                mode="lines+markers",
                name=f"{name}: aggregate" + _confirmed_word(points),
                line=dict(color="black", dash=dash, width=3),
                text=[p.label for p in points],
            )
        )
    figure.update_xaxes(title="concurrent streams (-np N)", tickvals=curve.levels, type="log")
    figure.update_yaxes(title="tok/s")
    return figure


def matplotlib_load(curve: LoadCurve, colors: dict[str, str]):
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    for spec_type, points in curve.by_spec_type.items():
        color = colors.get(spec_type, "#7f7f7f")
        xs = [p.concurrency for p in points]
        axes.plot(xs, [p.aggregate_tok_s for p in points], marker="o", color=color, label=f"{spec_type}: aggregate")
        axes.plot(
            xs,
            [p.per_stream_tok_s for p in points],
            marker="o",
            linestyle=":",
            color=color,
            label=f"{spec_type}: per stream",
        )
    for name, points, style in (("best of each level", curve.best, "-"), ("baseline", curve.baseline, "--")):
        axes.plot(
            [p.concurrency for p in points],
            [p.aggregate_tok_s for p in points],
            marker="s",
            color="black",
            linestyle=style,
            linewidth=2.5,
            label=f"{name}: aggregate" + _confirmed_word(points),
        )
    axes.set_xscale("log", base=2)
    axes.set_xticks(curve.levels, [str(n) for n in curve.levels])
    axes.set_xlabel("concurrent streams (-np N)")
    axes.set_ylabel("tok/s")
    axes.legend(fontsize="small")
    return axes


def _confirmed_word(points: list[LevelPoint]) -> str:
    return " (confirmed)" if points and all(p.confirmed for p in points) else ""
