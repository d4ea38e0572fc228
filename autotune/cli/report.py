"""`autotune report`: a study as pictures (one offline HTML page and the same figures as PNG files)."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli.options import study_options


@click.command()
@study_options
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder to write index.html and the PNG figures into (created if missing).",
)
def report(model, hardware, engine, objective, concurrency, run, storage, out_dir):
    """Draw MODEL's study: where the speed comes from, as an HTML page and PNG files.

    OUT/index.html works offline (plotly.js is inlined) and shows the optimization history, tok/s by
    spec type and draft length with 95% intervals, the speedup per prompt category, acceptance vs
    tok/s, parameter importances, the pareto front of a two-objective study, and the top
    configurations with their llama-server command lines. Prints the files written.

    \b
    Example:
        autotune report --model gemma3-270m --out report/
    """
    from autotune.report import write_report
    from autotune.study.catalog import open_study_of

    study = open_study_of(
        model,
        hardware=hardware,
        engine=engine,
        storage_url=storage,
        objective=objective,
        concurrency=concurrency,
        run=run,
    )
    for path in write_report(study, out_dir):
        click.echo(str(path))
