"""`autotune report`: a study as pictures, in one self-contained HTML page and the same figures as PNG.

data.py     what the figures show, read once from the study (groups, intervals, the pick, top rows)
figures.py  which panels a study gets, each as a plotly figure (Optuna's plots where it has one)
png.py      the same panels drawn with matplotlib
html.py     the page: plotly.js inlined once, no network needed to open it
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna

from autotune.errors import UsageError
from autotune.report.data import StudyView
from autotune.report.figures import Panel, plan, plotly_figure

INDEX = "index.html"

__all__ = ["INDEX", "write_report"]


def write_report(study: optuna.Study, out_dir: Path) -> list[Path]:
    """Write `out_dir/index.html` and one PNG per figure; return the paths written, the page first.

    Raises StudyNotFoundError when the study has no completed trial, UsageError when `out_dir` cannot
    be created.
    """
    from autotune.report.html import render_page
    from autotune.report.png import write_png

    view = StudyView(study)
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the report into {out_dir}: {exc.strerror or exc}") from exc
    panels = [_checked(panel, view) for panel in plan(view)]
    pngs = [write_png(panel, view, out_dir / f"{panel.slug}.png") for panel in panels if panel.note is None]
    index = out_dir / INDEX
    index.write_text(render_page(view, panels, {p.stem: p.name for p in pngs}), encoding="utf-8")
    return [index, *pngs]


def _checked(panel: Panel, view: StudyView) -> Panel:
    """The panel, or a note saying why it cannot be drawn (Optuna's importance evaluator refuses some
    studies, e.g. when every trial scored the same)."""
    if panel.note is not None or panel.kind != "importance":
        return panel
    try:
        plotly_figure(panel, view)
    except (ValueError, RuntimeError) as exc:
        return replace(panel, note=f"Optuna could not compute parameter importances: {exc}")
    return panel
