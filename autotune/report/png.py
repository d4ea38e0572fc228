"""The report's panels as PNG files, drawn with matplotlib: Optuna's matplotlib plots for the history,
the importances and the pareto front, plain matplotlib for the rest (same data, same colors as the HTML)."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import matplotlib

if "matplotlib.pyplot" not in sys.modules:  # a CLI run draws off-screen; a notebook keeps its own backend
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import optuna.visualization.matplotlib as optuna_mpl  # noqa: E402
from mpl_toolkits.axes_grid1 import make_axes_locatable  # noqa: E402

from autotune.report import figures as f  # noqa: E402
from autotune.report.data import StudyView, short_path  # noqa: E402
from autotune.report.load import matplotlib_load  # noqa: E402

SIZE_IN = (9.0, 5.0)
DPI = 120
_MARKERS = {"x": "x", "line-ns-open": "|"}  # plotly symbol -> matplotlib marker


def write_png(panel: f.Panel, view: StudyView, path: Path) -> Path:
    """Draw `panel` into `path`. Optuna's matplotlib plots set a global style: rc_context undoes it."""
    with plt.rc_context(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        axes = _DRAW[panel.kind](view, panel.arg)
        figure = axes.figure
        try:
            figure.set_size_inches(*SIZE_IN)
            for loc in ("left", "right"):  # Optuna's plots title themselves on the left
                axes.set_title("", loc=loc)
            axes.set_title(panel.title)
            figure.savefig(path, dpi=DPI, bbox_inches="tight")
        finally:
            plt.close(figure)
    return path


def _history(view: StudyView, _arg):
    axes = optuna_mpl.plot_optimization_history(view.study, target=f.decode_target(view), target_name=view.metric)
    if view.is_pareto:
        numbers, best = f.best_so_far(view)
        axes.plot(numbers, best, color="tab:red", label="Best Value")
    for target, numbers, values in f.baseline_steps(view):
        axes.plot(
            numbers,
            values,
            drawstyle="steps-post",
            color="black",
            linestyle="--",
            linewidth=1,
            alpha=0.6,
            label=f"baseline ({short_path(target)})",
        )
    pick = view.pick()
    axes.scatter(
        [pick.number],
        [view.tok_s(pick)],
        marker="*",
        s=260,
        color=f.PICK_COLOR,
        edgecolors="black",
        zorder=5,
        label="chosen",
    )
    axes.set_ylabel(view.metric)
    axes.set_xlabel("trial")
    if view.unfinished:  # a strip under the plot: an unfinished trial has no tok/s to draw, not 0 tok/s
        strip = make_axes_locatable(axes).append_axes("bottom", size="12%", pad=0.1, sharex=axes)
        for state, symbol, color in f.UNFINISHED_MARKS:
            numbers = [t.number for t in view.unfinished if t.state == state]
            if numbers:
                strip.scatter(
                    numbers,
                    [0.5] * len(numbers),
                    marker=_MARKERS[symbol],
                    s=90,
                    color=color,
                    linewidths=2,
                    label=f"{f.STATE_WORDS[state]} (no figure)",
                )
        strip.set_ylim(0, 1)
        strip.set_yticks([])
        strip.set_ylabel("unfinished", fontsize="small", rotation=0, ha="right", va="center")
        strip.set_xlabel("trial")
        axes.set_xlabel("")
        axes.tick_params(labelbottom=False)
        handles, labels = axes.get_legend_handles_labels()
        more = strip.get_legend_handles_labels()
        axes.legend(handles + more[0], labels + more[1], loc="best", fontsize="small")
    else:
        axes.legend(loc="best", fontsize="small")
    return axes


def _spec_types(view: StudyView, _arg):
    _, axes = plt.subplots()
    colors = f.spec_type_colors(view)
    groups = view.by_spec_type()
    for x, group in enumerate(groups):
        axes.scatter([x + o for o in f.jitter(len(group.tok_s))], group.tok_s, color=colors.get(group.key), alpha=0.6)
        _mean_marker(axes, [x], [group])
    axes.set_xticks(range(len(groups)), [g.label for g in groups], rotation=10)
    axes.set_xlim(-0.5, len(groups) - 0.5)
    axes.set_xlabel("spec type")
    axes.set_ylabel(view.metric)
    _baseline_lines(axes, view)
    axes.legend(loc="best", fontsize="small")
    return axes


def _param(view: StudyView, name: str):
    _, axes = plt.subplots()
    colors = f.spec_type_colors(view)
    for spec_type, groups in view.by_param(name).items():
        for group in groups:
            offsets = f.jitter(len(group.tok_s), 0.15)
            axes.scatter([group.key + o for o in offsets], group.tok_s, color=colors.get(spec_type), alpha=0.45)
        with_values = [g for g in groups if g.interval is not None]
        _mean_marker(
            axes,
            [g.key for g in with_values],
            with_values,
            label=f"{spec_type} mean, 95% CI",
            color=colors.get(spec_type),
            line=True,
        )
    axes.set_xlabel(name)
    axes.set_ylabel(view.metric)
    _baseline_lines(axes, view)
    axes.legend(loc="best", fontsize="small")
    return axes


def _mean_marker(axes, xs, groups, *, label="mean, 95% CI", color="black", line=False) -> None:
    kept = [(x, g.interval) for x, g in zip(xs, groups) if g.interval]
    if not kept:
        return
    means = [i.mean for _, i in kept]
    bars = [i.error_bar or (math.nan, math.nan) for _, i in kept]  # NaN: no bar at that point
    below, above = [b[0] for b in bars], [b[1] for b in bars]
    axes.errorbar(
        [x for x, _ in kept],
        means,
        yerr=[below, above],
        fmt="D-" if line else "D",
        color=color,
        capsize=5,
        markersize=8,
        label=label if not axes.get_legend_handles_labels()[1].count(label) else None,
    )


def _category_speedup(view: StudyView, _arg):
    categories, speedups = view.category_speedups()
    _, axes = plt.subplots()
    width = 0.8 / max(len(speedups), 1)
    for index, (label, values) in enumerate(speedups.items()):
        xs = [c + (index - (len(speedups) - 1) / 2) * width for c in range(len(categories))]
        kept = [(x, v) for x, v in zip(xs, values) if v]
        axes.bar(
            [x for x, _ in kept],
            [v for _, v in kept],
            width=width,
            label=label,
            color=f.PALETTE[index % len(f.PALETTE)],
        )
    axes.axhline(1.0, color="black", linestyle="--", linewidth=1, label="baseline (1×)")
    axes.set_yscale("log")
    axes.set_xticks(range(len(categories)), categories, rotation=30, ha="right")
    axes.set_xlabel("prompt category")
    axes.set_ylabel("speedup over baseline")
    axes.legend(loc="best", fontsize="small")
    return axes


def _acceptance(view: StudyView, _arg):
    _, axes = plt.subplots()
    colors = f.spec_type_colors(view)
    points = view.acceptance_points()
    for spec_type in dict.fromkeys(view.spec_type(t) for t, *_ in points):
        mine = [(t, a, v) for t, a, v in points if view.spec_type(t) == spec_type]
        axes.scatter(
            [a for _, a, _ in mine],
            [v for *_, v in mine],
            color=colors[spec_type],
            alpha=0.75,
            s=[f.marker_size(t) ** 2 for t, *_ in mine],
            edgecolors="white",
            label=spec_type,
        )
    pick = view.pick()
    chosen = [(a, v) for t, a, v in points if t.number == pick.number]
    if chosen:
        axes.scatter(
            [chosen[0][0]],
            [chosen[0][1]],
            marker="*",
            s=260,
            color=f.PICK_COLOR,
            edgecolors="black",
            zorder=5,
            label="chosen",
        )
    axes.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    axes.set_xlim(-0.05, 1.05)
    axes.set_xlabel("acceptance (accepted / drafted tokens)")
    axes.set_ylabel(view.metric)
    _baseline_lines(axes, view)
    axes.legend(loc="best", fontsize="small")
    return axes


def _importance(view: StudyView, index: int):
    study, params = f.importance_input(view, index)
    return optuna_mpl.plot_param_importances(
        study, params=params, target=f.decode_target(view), target_name=view.metric
    )


def _pareto(view: StudyView, _arg):
    axes = optuna_mpl.plot_pareto_front(view.study, target_names=[f.DECODE, f.PROMPT])
    pick = view.pick()
    axes.scatter(
        [pick.values[0]],
        [pick.values[1]],
        marker="*",
        s=320,
        color=f.PICK_COLOR,
        edgecolors="black",
        zorder=5,
        label=f"chosen (trial {pick.number})",
    )
    axes.legend(loc="best", fontsize="small")
    return axes


def _baseline_lines(axes, view: StudyView) -> None:
    for target, value, count in view.baseline_levels():
        axes.axhline(
            value, color="black", linestyle="--", linewidth=1, alpha=0.6, label=f.baseline_label(target, value, count)
        )


def _concurrency(view: StudyView, curve):
    return matplotlib_load(curve, f.spec_type_colors(view))


_DRAW = f.drawers(globals())
