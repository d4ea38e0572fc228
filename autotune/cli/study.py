"""The study verbs: `search` runs (or resumes) a study and prints its winner, `best` prints the
winner of a stored study (or this hardware's preset), `trials` lists a study's trials, `confirm`
re-measures its best on llama-server and makes the winner a preset."""

from __future__ import annotations

import json

import click

from autotune.cli.options import (
    ConcurrencyLevels, json_option, measured_model_option, measurement_options, model_option, sampling_options,
    server_bin_option, storage_option, study_engine_option, study_objective_option, study_options, with_options,
)
from autotune.cli.output import best_text, confirmation_table, trials_table


@click.command()
@measured_model_option
@measurement_options
@server_bin_option
@click.option("--confirm/--no-confirm", "confirm_enabled", default=True, show_default=True,
              help="End by re-measuring the top configurations with the baseline, interleaved, on llama-server "
                   "(in-process when no llama-server resolves).")
@click.option("--confirm-top", type=click.IntRange(min=1), default=3, show_default=True,
              help="How many of the best configurations the final confirmation re-measures.")
@click.option("--confirm-repeats", type=click.IntRange(min=2), default=3, show_default=True,
              help="Interleaved rounds of the final confirmation.")
def search(options, server_bin, confirm_enabled, confirm_top, confirm_repeats):
    """Run (or resume) an Optuna study of speculative settings for MODEL on this machine.

    Trial 0 is the baseline without speculation; every trial generates the prompt mix for real and
    is stored in the study database. The top configurations are then re-measured with the baseline,
    interleaved (on llama-server when one resolves), and the winner's llama-server command line is
    printed with those figures.

    \b
    Example:
        autotune search --model gemma3-270m --trials 12 --max-tokens 48
    """
    from autotune.cli.progress import TerminalReporter
    from autotune.engines import choose_engine
    from autotune.study.search import ConfirmOptions, run_search

    for level in options.levels:  # bad input (no llama-server for N > 1) before anything is measured
        choose_engine(options.engine_name, concurrency=level, server_bin=server_bin)
    for level in options.levels:
        best = run_search(options.at_level(level), reporter=TerminalReporter(), server_bin=server_bin,
                          confirm_options=ConfirmOptions(confirm_enabled, confirm_top, confirm_repeats))
        click.echo(best_text(best))


@click.command()
@study_options
@json_option
def best(model, hardware, engine, objective, concurrency, storage, as_json):
    """Print the fastest configuration found for MODEL as a llama-server command line.

    The first line is the command; then its mix tok/s, the baseline's and the speedup. Without a
    study for that hardware, the hardware's preset (from `confirm` or `nightly`) is printed.

    \b
    Example:
        autotune best --model gemma3-270m --json
    """
    from autotune.errors import StudyNotFoundError
    from autotune.presets.confirmed import PresetResult, stored_preset
    from autotune.study.best import best_result
    from autotune.study.catalog import open_study_of

    try:
        result = best_result(open_study_of(model, hardware=hardware, engine=engine, storage_url=storage,
                                           objective=objective, concurrency=concurrency))
    except StudyNotFoundError:
        preset = stored_preset(model, hardware=hardware, storage_url=storage, concurrency=concurrency or 1)
        if preset is None:
            raise
        result = PresetResult(preset)
    click.echo(json.dumps(result.as_dict(), indent=2) if as_json else best_text(result))


@click.command()
@study_options
@json_option
def trials(model, hardware, engine, objective, concurrency, storage, as_json):
    """List the trials of MODEL's study: state, parameters, tok/s, speedup and acceptance.

    \b
    Example:
        autotune trials --model gemma3-270m
    """
    from autotune.study.catalog import open_study_of
    from autotune.study.best import trial_rows

    rows = trial_rows(open_study_of(model, hardware=hardware, engine=engine, storage_url=storage, objective=objective,
                                    concurrency=concurrency))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(trials_table(rows))


@click.command()
@model_option
@click.option("--top", type=click.IntRange(min=1), default=3, show_default=True, help="How many of the best configurations to re-measure.")
@click.option("--repeats", type=click.IntRange(min=2), default=3, show_default=True, help="Rounds of interleaved measurements.")
@study_engine_option
@study_objective_option
@click.option("--concurrency", type=ConcurrencyLevels(), default=None,
              help="The studies of these loads (N[,N...] concurrent streams), each confirmed with its own -np N "
                   "[default: the model's only study].")
@storage_option
@server_bin_option
@with_options(sampling_options(defaults=False))
@click.option("--seed", type=click.IntRange(min=0), help="Seed of token sampling [default: the study's].")
def confirm(model, top, repeats, engine, objective, concurrency, storage, server_bin, temperature, top_k, top_p, min_p,
            seed):
    """Re-measure the study's best configurations and the baseline on a real llama-server.

    Measurements interleave (baseline, A, B, baseline, A, B, ...) REPEATS times; each configuration
    gets its mean tok/s, a 95% confidence interval and Welch's t-test p-value against the baseline,
    stored with the study. `autotune best` then shows the confirmed figures. Sampling follows the
    study unless given here.

    \b
    Example:
        autotune confirm --model gemma3-270m --top 3 --repeats 3
    """
    from autotune.presets.confirmed import run_confirm

    def on_measured(round_: int, label: str, tok_s: float | None) -> None:
        figure = "FAILED" if tok_s is None else f"{tok_s:.1f} tok/s"
        click.echo(f"[round {round_ + 1}/{repeats}] {label}: {figure}", err=True)

    sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p, "seed": seed}
    for level in concurrency or (None,):
        result = run_confirm(model=model, engine_name=engine, objective=objective, top=top, repeats=repeats,
                             storage_url=storage, server_bin=server_bin, sampling=sampling, on_measured=on_measured,
                             concurrency=level)
        click.echo(confirmation_table(result))
