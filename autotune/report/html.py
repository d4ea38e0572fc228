"""One self-contained HTML page: plotly.js inlined once in the head, every figure a div drawn from inline
data, no script, style or font fetched from anywhere, so the file works offline and can be mailed."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from html import escape

import plotly.io
import plotly.offline

from autotune.report.data import StudyView, TopConfig, model_file_hashes, short_path
from autotune.report.figures import Panel, plotly_figure, unfinished_reason
from autotune.study.records import TrialRecord

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; max-width: 1200px;
       padding: 1rem 2rem 4rem; color: #222; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2.5rem; border-bottom: 1px solid #ddd; }
.meta { color: #555; } .caption { color: #444; margin: .3rem 0 .6rem; }
.note { background: #fff8e1; border-left: 4px solid #ffbf00; padding: .6rem 1rem; }
nav a { margin-right: 1rem; white-space: nowrap; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .35rem .5rem; vertical-align: top; text-align: left; }
th { background: #f5f5f5; } tr.picked { background: #fff3c4; } tr.baseline { color: #555; }
tr.detail td { border-top: none; padding-bottom: .8rem; font-size: .8rem; color: #444; }
code.command { display: block; background: #f6f8fa; padding: .3rem .5rem; margin-bottom: .2rem; color: #111; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .85rem; word-break: break-all; }
.num { text-align: right; white-space: nowrap; }
"""


def render_page(view: StudyView, panels: list[Panel], png_names: dict[str, str]) -> str:
    """The whole page: summary, one section per panel, the top configurations and the unfinished trials."""
    sections = [_panel_section(view, panel, png_names.get(panel.slug)) for panel in panels]
    nav = " ".join(f'<a href="#{p.slug}">{escape(p.title)}</a>' for p in panels)
    nav += ' <a href="#top-configs">Top configurations</a>'
    if view.unfinished:
        nav += ' <a href="#unfinished">Failed and pruned trials</a>'
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>autotune report: {escape(view.name)}</title>
<style>{STYLE}</style>
<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>
</head>
<body>
<h1>autotune report</h1>
<p class="meta"><strong>{escape(view.name)}</strong></p>
{_summary(view)}
<nav>{nav}</nav>
{"".join(sections)}
{_top_table(view)}
{_race_categories(view)}
{_unfinished_table(view)}
<p class="meta">Written by autotune {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC.</p>
</body>
</html>
"""


def _panel_section(view: StudyView, panel: Panel, png_name: str | None) -> str:
    head = f'<section id="{panel.slug}"><h2>{escape(panel.title)}</h2><p class="caption">{escape(panel.caption)}</p>'
    if panel.note:
        return f'{head}<p class="note" data-note="{panel.slug}">{escape(panel.note)}</p></section>\n'
    figure = plotly.io.to_html(
        plotly_figure(panel, view),
        full_html=False,
        include_plotlyjs=False,
        div_id=f"figure-{panel.slug}",
        config=PLOTLY_CONFIG,
        default_width="100%",
    )
    link = f' <a href="{escape(png_name)}">PNG</a>' if png_name else ""
    return f'{head}<div class="figure" data-figure="{panel.slug}">{figure}</div><p>{link}</p></section>\n'


def _summary(view: StudyView) -> str:
    record = view.record
    measurement = record.measurement
    counts = {
        state: len(trials)
        for state, trials in (("completed", view.complete), ("failed", view.failed), ("pruned", view.pruned))
    }
    rows = [
        ("model", record.model),
        ("hardware", record.hardware),
        ("engine", record.engine),
        ("objective", "pareto: decode tok/s and prompt tok/s" if view.is_pareto else view.metric),
        ("trials", ", ".join(f"{n} {state}" for state, n in counts.items())),
        (
            "prompts",
            f"{len(measurement.get('prompts', []))} from {short_path(measurement.get('prompt_source'))}, "
            f"{measurement.get('max_tokens')} tokens each"
            if measurement
            else None,
        ),
    ]
    if view.confirmation is not None:
        c = view.confirmation
        rows.append(
            ("raced", f"on {c.engine} ({c.build}), {c.repeats} rounds, {c.pairing} pairing, {c.ended}, {c.date}")
        )
        failed = [r for r in c.rows if r.failure]
        rows.append(("left the race", "; ".join(f"{r.label}: {r.failure}" for r in failed) if failed else None))
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in rows if v is not None)
    return f'<table class="summary" style="width:auto">{body}</table>'


def _top_table(view: StudyView) -> str:
    head = (
        "<tr><th>#</th><th>trial</th><th>configuration</th><th>decode tok/s</th><th>prompt tok/s</th>"
        "<th>e2e tok/s</th><th>speedup</th><th>acceptance</th><th>confirmed</th></tr>"
    )
    rows = "".join(_top_rows(view, row) for row in view.top_configs())
    return (
        f'<section id="top-configs"><h2>Top configurations</h2><p class="caption">The fastest distinct '
        f"configurations whose output matched the baseline's, then the baseline; the highlighted one (★) is "
        f"what `autotune best` prints. Under each: the llama-server command line, the llama.cpp build, the "
        f"hardware and the SHA-256 of the model files it was measured with.</p>"
        f'<table class="top">{head}{rows}</table></section>\n'
    )


def _top_rows(view: StudyView, row: TopConfig) -> str:
    """Two table rows for one configuration: its figures, then its provenance across the whole width."""
    record = TrialRecord.of(row.trial)
    acceptance = row.figure("acceptance")
    classes = " ".join(c for c in ("picked" if row.picked else "", "baseline" if row.rank is None else "") if c)
    cells = [
        ("baseline" if row.rank is None else f"{row.rank}{' ★' if row.picked else ''}", ""),
        (str(row.trial.number), ""),
        (escape(row.label), ""),
        (_num(row.figure("mix_tok_s"), ".1f"), "num"),
        (_num(row.figure("prompt_tok_s"), ".1f"), "num"),
        (_num(row.figure("e2e_tok_s"), ".1f"), "num"),
        ("" if row.speedup is None else f"{row.speedup:.2f}×", "num"),
        ("" if acceptance is None else f"{acceptance:.0%}", "num"),
        (_confirmed(view, row), ""),
    ]
    tds = "".join(f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>" for text, cls in cells)
    hashes = "; ".join(
        f"{escape(name)} <code>{escape(sha)}</code>" for name, sha in model_file_hashes(row.trial).items()
    )
    detail = (
        f'<code class="command">{escape(row.command)}</code><br>'
        f"llama.cpp: {escape(str(record.llama_cpp_build or '?'))}<br>"
        f"hardware: {escape(str(record.hardware or '?'))} &middot; files: {hashes or '?'}"
    )
    number = row.trial.number
    return (
        f'<tr class="{classes}" data-trial="{number}">{tds}</tr>'
        f'<tr class="{classes} detail" data-trial-detail="{number}"><td></td><td colspan="{len(cells) - 1}">{detail}</td></tr>'
    )


def _confirmed(view: StudyView, row: TopConfig) -> str:
    c = row.confirmed
    if c is None:
        return "not confirmed" if view.confirmation is None else "not re-measured"
    if c.failure:
        return f"failed: {escape(c.failure)}"
    text = f"{c.mean_tok_s:.1f} tok/s"
    if c.speedup is not None:
        text += f", {c.speedup:.2f}×"
        if c.speedup_ci is not None and all(map(math.isfinite, c.speedup_ci)):
            text += f" [{c.ci_coverage:.1%} CI {c.speedup_ci[0]:.2f}–{c.speedup_ci[1]:.2f}]"
    if c.p_value is not None:
        text += f", p={c.p_value:.3g}" + (", proven" if c.significant else "")
    return escape(text)


def _race_categories(view: StudyView) -> str:
    """The race's pick (or its fastest entrant) and --spec-default by prompt category: paired speedups with
    their intervals, and the predicted speedups beside them."""
    race = view.confirmation
    if race is None or not race.categories:
        return ""
    rows = [r for r in (race.winner or race.fastest, race.spec_defaults[0] if race.spec_defaults else None) if r]
    predicted = {t.number: TrialRecord.of(t).predicted.get("by_category", {}) for t in view.complete}
    body = ""
    for row in rows:
        for category, speedup in sorted(race.by_category(row).items()):
            low, high = speedup.interval()
            guess = predicted.get(row.trial, {}).get(category)
            body += (
                f'<tr><td>{escape(row.label)}</td><td>{escape(category)}</td><td class="num">{speedup.ratio:.2f}×'
                f'</td><td class="num">{low:.2f}–{high:.2f}</td><td class="num">'
                f"{'' if guess is None else f'{guess:.2f}×'}</td></tr>"
            )
    return (
        f'<section id="race-categories"><h2>The race by prompt category</h2><p class="caption">Each category\'s '
        f"speedup over the plain command, paired on that category's prompts in the race's rounds, with its 95% "
        f"interval and the predicted speedup.</p><table><tr><th>configuration</th><th>category</th>"
        f"<th>speedup</th><th>95% CI</th><th>predicted</th></tr>{body}</table></section>\n"
    )


def _unfinished_table(view: StudyView) -> str:
    if not view.unfinished:
        return ""
    rows = "".join(
        f"<tr><td>{t.number}</td><td>{t.state.name}</td><td>{escape(unfinished_reason(t))}</td>"
        f"<td><code>{escape(json.dumps(t.params))}</code></td></tr>"
        for t in view.unfinished
    )
    return (
        f'<section id="unfinished"><h2>Failed and pruned trials</h2><p class="caption">Trials that gave no '
        f"figure, with their reasons.</p><table><tr><th>trial</th><th>state</th><th>reason</th>"
        f"<th>parameters</th></tr>{rows}</table></section>\n"
    )


def _num(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)
