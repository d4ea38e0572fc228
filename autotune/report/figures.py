"""The report's figures: which ones a study gets (`plan`), and each as a plotly figure for the HTML page.

Optuna's own plots draw the optimization history, the parameter importances and the pareto front; the
figures Optuna has no plot for (groups with 95% intervals, per-category speedup, acceptance) are plain
plotly. `autotune.report.png` draws the same panels with matplotlib.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import optuna
import plotly.graph_objects as go

from autotune.report.data import Group, StudyView, TrialState, short_path
from autotune.report.load import load_curve, plotly_load
from autotune.study.records import TrialRecord

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
FAILED_COLOR = "#d62728"
PRUNED_COLOR = "#7f7f7f"
PICK_COLOR = "#ffbf00"
STATE_WORDS = {TrialState.FAIL: "failed", TrialState.PRUNED: "pruned"}
#: How failed and pruned trials are marked: (state, plotly symbol, color); png.py maps the symbols.
UNFINISHED_MARKS = ((TrialState.FAIL, "x", FAILED_COLOR), (TrialState.PRUNED, "line-ns-open", PRUNED_COLOR))
HEIGHT_PX = 460
DECODE = "decode tok/s"
PROMPT = "prompt tok/s"


@dataclass(frozen=True)
class Panel:
    """One figure of the report: `kind` says how to draw it, `arg` what of (a parameter, a scope);
    a panel with a `note` has too little data and shows the note instead."""

    slug: str
    title: str
    caption: str
    kind: str
    arg: object = None
    note: str | None = None


def plan(view: StudyView) -> list[Panel]:
    """The panels this study gets, in page order."""
    baseline = "dashed: the baseline (no speculation)"
    panels = [
        Panel(
            "history",
            "Optimization history",
            f"{view.metric} of every trial in order, the best so far, the chosen configuration (star) and the "
            "baseline. Failed (✕) and pruned (|) trials have no figure: they are marked in a strip below, "
            "never drawn as a score of 0.",
            "history",
        ),
        Panel(
            "spec-types",
            "tok/s by spec type",
            f"Every completed trial (dots) and each type's mean with its 95% interval (t-distribution); "
            f"{baseline}." + outside_note({str(g.key): g for g in view.by_spec_type()}),
            "spec-types",
        ),
    ]
    for name in view.grouped_params():
        groups = {f"{spec_type} {name}={g.key}": g for spec_type, found in view.by_param(name).items() for g in found}
        panels.append(
            Panel(
                f"by-{name.replace('_', '-')}",
                f"tok/s by {name}",
                f"Trials by {name}, one line per spec type: mean and 95% interval; {baseline}." + outside_note(groups),
                "param",
                name,
            )
        )
    categories, speedups = view.category_speedups()
    panels.append(
        Panel(
            "category-speedup",
            "Speedup over the baseline per prompt category",
            "The best configurations' decode tok/s over their baseline's, category by category (log scale): "
            "above the dashed line at 1× a win, below it a loss.",
            "category-speedup",
            note=None
            if categories and speedups
            else "No completed speculative trial with per-category figures and a baseline to compare with.",
        )
    )
    panels.append(
        Panel(
            "acceptance",
            "Acceptance rate vs tok/s",
            "High acceptance can still be slower: every verify batch costs. Marker size: mean accepted length; "
            f"{baseline}.",
            "acceptance",
            note=None if view.acceptance_points() else "No completed trial drafted a token.",
        )
    )
    for index, (scope, trials, params) in enumerate(view.importance_scopes()):
        slug = "importance" if index == 0 else f"importance-{_slug(scope)}"
        note = None
        if len(trials) < 2 or not params:
            note = (
                f"Parameter importance needs at least two completed trials that vary a parameter; "
                f"{scope}: {len(trials)} completed, {len(params)} varying parameter(s)."
            )
        panels.append(
            Panel(
                slug,
                f"Parameter importance ({scope})",
                f"Optuna's importance (its default evaluator) of each parameter for {view.metric}, over {scope}.",
                "importance",
                index,
                note,
            )
        )
    curve = load_curve(view.study)
    if curve is not None:
        panels.append(
            Panel(
                "concurrency",
                "tok/s against concurrency",
                "Aggregate tok/s of all streams (solid) and per-stream decode tok/s (dotted) of each spec "
                "type's best trial at each --concurrency level studied, and in black the best "
                "configuration of each level and its baseline. " + curve.verdict(),
                "concurrency",
                curve,
            )
        )
    if view.is_pareto:
        panels.append(
            Panel(
                "pareto",
                "Decode vs prompt tok/s: the pareto front",
                "Every completed trial; the front is highlighted, the star is the chosen configuration.",
                "pareto",
            )
        )
    return panels


def plotly_figure(panel: Panel, view: StudyView) -> go.Figure:
    """The panel as a plotly figure."""
    figure = _DRAW[panel.kind](view, panel.arg)
    figure.update_layout(
        title=panel.title, height=HEIGHT_PX, template="plotly_white", margin=dict(l=70, r=30, t=60, b=70)
    )
    return figure


def outside_note(groups: dict[str, Group]) -> str:
    """One sentence for a caption naming the groups drawn without an error bar because their interval
    does not contain their mean; empty where every interval does."""
    outside = [(label, g.interval) for label, g in groups.items() if g.interval and not g.interval.contains_mean]
    if not outside:
        return ""
    shown = ", ".join(f"{label} (mean {i.mean:.3f}, interval {i.low:.3f}-{i.high:.3f})" for label, i in outside)
    return f" Drawn without an error bar, as its interval does not contain its mean: {shown}."


def spec_type_colors(view: StudyView) -> dict[str, str]:
    """One color per spec type, the same in every figure and in both renderings."""
    types = list(dict.fromkeys(view.spec_type(t) for t in view.trials))
    return {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(types)}


def jitter(count: int, width: float = 0.25) -> list[float]:
    """Evenly spread horizontal offsets for `count` dots of one group (deterministic, unlike random)."""
    if count <= 1:
        return [0.0] * count
    return [-width + 2 * width * i / (count - 1) for i in range(count)]


def study_of(view: StudyView, trials: list[optuna.trial.FrozenTrial]) -> optuna.Study:
    """An in-memory study holding `trials`, with the study's directions (for Optuna's plots of a subset)."""
    study = optuna.create_study(directions=view.study.directions)
    study.add_trials(trials)
    return study


def decode_target(view: StudyView):
    """Optuna's `target` for a plot: None (the objective) on a single-objective study."""
    return (lambda t: t.values[0]) if view.is_pareto else None


def _history(view: StudyView, _arg) -> go.Figure:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figure = optuna.visualization.plot_optimization_history(
            view.study, target=decode_target(view), target_name=view.metric
        )
    if view.is_pareto:
        numbers, best = best_so_far(view)
        figure.add_trace(go.Scatter(x=numbers, y=best, mode="lines", name="Best Value"))
    for target, numbers, values in baseline_steps(view):
        figure.add_trace(
            go.Scatter(
                x=numbers,
                y=values,
                mode="lines",
                opacity=0.6,
                name=f"baseline ({short_path(target)})",
                line=dict(dash="dash", color="black", shape="hv"),
            )
        )
    pick = view.pick()
    figure.add_trace(
        go.Scatter(
            x=[pick.number],
            y=[view.tok_s(pick)],
            mode="markers",
            name="chosen",
            marker=dict(symbol="star", size=16, color=PICK_COLOR, line=dict(width=1, color="black")),
        )
    )
    if view.unfinished:  # a strip under the plot: an unfinished trial has no tok/s to draw, not 0 tok/s
        for state, symbol, color in UNFINISHED_MARKS:
            trials = [t for t in view.unfinished if t.state == state]
            if trials:
                figure.add_trace(
                    go.Scatter(
                        x=[t.number for t in trials],
                        y=[0.5] * len(trials),
                        yaxis="y2",
                        mode="markers",
                        name=f"{STATE_WORDS[state]} (no figure)",
                        text=[unfinished_reason(t) for t in trials],
                        marker=dict(symbol=symbol, size=12, color=color, line=dict(width=2, color=color)),
                        hovertemplate="trial %{x}: %{text}<extra></extra>",
                    )
                )
        figure.update_layout(
            yaxis=dict(domain=[0.2, 1]),
            xaxis=dict(anchor="y2"),
            yaxis2=dict(
                domain=[0, 0.1],
                range=[0, 1],
                showticklabels=False,
                showgrid=False,
                zeroline=False,
                title=dict(text="unfinished", font=dict(size=10)),
            ),
        )
    figure.update_layout(xaxis_title="trial", yaxis_title=view.metric)
    return figure


def baseline_steps(view: StudyView) -> list[tuple[str, list[int], list[float]]]:
    """Per target, the baseline as a step line over the trials: each measurement holds until the next
    (drift checks re-measure it), the last one to the end of the study."""
    last = max(t.number for t in view.trials)
    steps = []
    for target, *_ in view.baseline_levels():
        measured = view.baselines_of(target)
        values = [view.tok_s(b) for b in measured]
        steps.append((target, [b.number for b in measured] + [last], values + values[-1:]))
    return steps


def best_so_far(view: StudyView) -> tuple[list[int], list[float]]:
    numbers, best, running = [], [], float("-inf")
    for trial in view.complete:
        running = max(running, view.tok_s(trial))
        numbers.append(trial.number)
        best.append(running)
    return numbers, best


def unfinished_reason(trial: optuna.trial.FrozenTrial) -> str:
    label = TrialRecord.of(trial).label or ""
    reason = (
        TrialRecord.of(trial).fail_reason
        or TrialRecord.of(trial).prune_reason
        or ("pruned" if trial.state == TrialState.PRUNED else "no reason recorded")
    )
    return f"{trial.state.name} {label}: {reason}".strip()


def _spec_types(view: StudyView, _arg) -> go.Figure:
    figure = go.Figure()
    colors = spec_type_colors(view)
    groups = view.by_spec_type()
    for x, group in enumerate(groups):
        offsets = jitter(len(group.tok_s))
        figure.add_trace(
            go.Scatter(
                x=[x + o for o in offsets],
                y=group.tok_s,
                mode="markers",
                name=str(group.key),
                marker=dict(color=colors.get(group.key), size=8, opacity=0.6),
                text=[f"trial {n}" for n in group.numbers],
                hovertemplate="%{text}: %{y:.1f} tok/s<extra></extra>",
            )
        )
        _mean_marker(figure, [x], [group])
    figure.update_layout(
        xaxis=dict(tickvals=list(range(len(groups))), ticktext=[g.label for g in groups], title="spec type"),
        yaxis_title=view.metric,
        showlegend=False,
    )
    _baseline_lines(figure, view)
    return figure


def _param(view: StudyView, name: str) -> go.Figure:
    figure = go.Figure()
    colors = spec_type_colors(view)
    for spec_type, groups in view.by_param(name).items():
        xs, ys, texts = [], [], []
        for group in groups:
            for offset, value, number in zip(jitter(len(group.tok_s), 0.15), group.tok_s, group.numbers):
                xs.append(group.key + offset)
                ys.append(value)
                texts.append(f"trial {number}")
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="markers",
                name=f"{spec_type} trials",
                text=texts,
                marker=dict(color=colors.get(spec_type), size=7, opacity=0.45),
                hovertemplate="%{text}: %{y:.1f} tok/s<extra></extra>",
            )
        )
        with_values = [g for g in groups if g.interval is not None]
        _mean_marker(
            figure,
            [g.key for g in with_values],
            with_values,
            name=f"{spec_type} mean",
            color=colors.get(spec_type),
            mode="lines+markers",
        )
    figure.update_layout(xaxis_title=name, yaxis_title=view.metric, xaxis=dict(dtick=1))
    _baseline_lines(figure, view)
    return figure


def _mean_marker(
    figure: go.Figure, xs, groups, *, name: str = "mean, 95% CI", color: str = "black", mode: str = "markers"
) -> None:
    kept = [(x, g.interval) for x, g in zip(xs, groups) if g.interval]
    xs, means, counts = [x for x, _ in kept], [i.mean for _, i in kept], [i.n for _, i in kept]
    bars = [i.error_bar for _, i in kept]  # None: no bar at that point (plotly skips it)
    minus, plus = [b and b[0] for b in bars], [b and b[1] for b in bars]
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=means,
            mode=mode,
            name=name,
            marker=dict(symbol="diamond", size=12, color=color),
            line=dict(color=color),
            error_y=dict(type="data", symmetric=False, array=plus, arrayminus=minus, thickness=2),
            text=[f"n={n}" for n in counts],
            hovertemplate="mean %{y:.1f} tok/s (%{text})<extra></extra>",
        )
    )


def _category_speedup(view: StudyView, _arg) -> go.Figure:
    categories, speedups = view.category_speedups()
    figure = go.Figure()
    for label, values in speedups.items():
        figure.add_trace(
            go.Bar(x=categories, y=values, name=label, hovertemplate="%{x}: %{y:.2f}×<extra>" + label + "</extra>")
        )
    figure.add_hline(y=1.0, line_dash="dash", line_color="black")  # no annotation: on a log axis it lands at 10
    figure.update_layout(
        barmode="group",
        yaxis=dict(type="log", title="speedup over baseline"),
        xaxis_title="prompt category",
        legend=dict(orientation="h", y=-0.2),
    )
    return figure


def _acceptance(view: StudyView, _arg) -> go.Figure:
    figure = go.Figure()
    colors = spec_type_colors(view)
    points = view.acceptance_points()
    pick = view.pick()
    for spec_type in dict.fromkeys(view.spec_type(t) for t, *_ in points):
        mine = [(t, a, v) for t, a, v in points if view.spec_type(t) == spec_type]
        figure.add_trace(
            go.Scatter(
                x=[a for _, a, _ in mine],
                y=[v for *_, v in mine],
                mode="markers",
                name=spec_type,
                marker=dict(
                    color=colors[spec_type],
                    opacity=0.75,
                    line=dict(width=1, color="white"),
                    size=[marker_size(t) for t, *_ in mine],
                ),
                text=[f"trial {t.number}: {TrialRecord.of(t).label}" for t, *_ in mine],
                hovertemplate="%{text}<br>acceptance %{x:.0%}, %{y:.1f} tok/s<extra></extra>",
            )
        )
    chosen = [(a, v) for t, a, v in points if t.number == pick.number]
    if chosen:
        figure.add_trace(
            go.Scatter(
                x=[chosen[0][0]],
                y=[chosen[0][1]],
                mode="markers",
                name="chosen",
                marker=dict(symbol="star", size=16, color=PICK_COLOR, line=dict(width=1, color="black")),
            )
        )
    figure.update_layout(
        xaxis=dict(title="acceptance (accepted / drafted tokens)", tickformat=".0%", range=[-0.05, 1.05]),
        yaxis_title=view.metric,
    )
    _baseline_lines(figure, view)
    return figure


def marker_size(trial: optuna.trial.FrozenTrial) -> float:
    """Marker size (points) from the trial's mean accepted length."""
    length = TrialRecord.of(trial).figures.get("mean_accepted_length") or 1.0
    return 6 + 4 * min(float(length), 8.0)


def importance_input(view: StudyView, index: int) -> tuple[optuna.Study, list[str]]:
    """The study (the real one, or an in-memory subset) and parameters of importance scope `index`."""
    _scope, trials, params = view.importance_scopes()[index]
    return (view.study if index == 0 else study_of(view, trials)), params


def _importance(view: StudyView, index: int) -> go.Figure:
    study, params = importance_input(view, index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optuna.visualization.plot_param_importances(
            study, params=params, target=decode_target(view), target_name=view.metric
        )


def _pareto(view: StudyView, _arg) -> go.Figure:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figure = optuna.visualization.plot_pareto_front(view.study, target_names=[DECODE, PROMPT])
    pick = view.pick()
    figure.add_trace(
        go.Scatter(
            x=[pick.values[0]],
            y=[pick.values[1]],
            mode="markers",
            name="chosen",
            marker=dict(symbol="star", size=18, color=PICK_COLOR, line=dict(width=1, color="black")),
            hovertemplate=f"chosen: trial {pick.number}<extra></extra>",
        )
    )
    figure.update_layout(legend=dict(orientation="h", y=-0.25))  # Optuna's colorbars take the right side
    return figure


def _baseline_lines(figure: go.Figure, view: StudyView) -> None:
    for target, value, count in view.baseline_levels():
        figure.add_hline(
            y=value,
            line_dash="dash",
            line_color="black",
            opacity=0.6,
            annotation_text=baseline_label(target, value, count),
            annotation_position="top left",
        )


def baseline_label(target: str, value: float, count: int) -> str:
    """Legend text of a target's baseline level (the mean when drift checks measured it again)."""
    mean = f", mean of {count}" if count > 1 else ""
    return f"baseline {value:.1f} tok/s ({short_path(target)}{mean})"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-").replace("--", "-")


def _concurrency(view: StudyView, curve) -> go.Figure:
    return plotly_load(curve, spec_type_colors(view))


#: The eight kinds of figure (Panel.kind), the one registry both renderers read: each module draws a kind
#: with its function named after it (`_history`, `_spec_types`, ...): plotly here, matplotlib in png.py.
KINDS = ("history", "spec-types", "param", "category-speedup", "acceptance", "importance", "pareto", "concurrency")


def drawers(namespace: dict[str, object]) -> dict[str, Callable]:
    """A renderer's kind -> draw function table, from its module's `globals()`: `_<kind>` (dashes as
    underscores) for each of KINDS; a missing one fails at import."""
    return {kind: namespace["_" + kind.replace("-", "_")] for kind in KINDS}


_DRAW = drawers(globals())
