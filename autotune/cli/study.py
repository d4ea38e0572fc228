"""The study verbs: `search` runs (or resumes) a study and prints its winner, `best` prints the
winner of a stored study (or this hardware's preset), `trials` lists a study's trials, `confirm`
re-measures its best on llama-server and makes the winner a preset."""

from __future__ import annotations

import json
from dataclasses import replace

import click

from autotune.cli.options import (
    ConcurrencyLevels, given_flags, json_option, measured_model_option, measurement_options, model_option, sampling_options,
    server_bin_option, storage_option, study_engine_option, study_objective_option, study_options, with_options,
)
from autotune.cli.output import best_text, category_table, confirmation_table, trials_table
from autotune.study.race import DEFAULT_BUDGET


#: the flags only the predicted strategy reads
PREDICTED_ONLY_FLAGS = {"predict_trials": "--predict-trials"}


@click.command()
@measured_model_option
@measurement_options
@server_bin_option
@click.option("--strategy", type=click.Choice(["predict", "measure"]), default="predict", show_default=True,
              help="predict: measure the baseline once, predict every configuration from its output and the step "
                   "costs, then race the best few on llama-server; measure: a TPE study of --trials measured "
                   "trials, then the same race. Prediction needs temperature 0, one stream and the decode "
                   "objective; otherwise the search measures and says so.")
@click.option("--confirm/--no-confirm", "confirm_enabled", default=True, show_default=True,
              help="[measure] End with the race of the best trials on llama-server (in-process when none resolves).")
@click.option("--race-top", type=click.IntRange(min=1), default=4, show_default=True,
              help="How many of the best configurations race the baseline and --spec-default.")
@click.option("--race-budget", default=DEFAULT_BUDGET, show_default=True,
              help="The most the race may take: rounds (6) or time (5m, 300s). It stops earlier once a winner is "
                   "proven or no entrant can still win.")
@click.option("--predict-trials", type=click.IntRange(min=1), default=400, show_default=True,
              help="[predict] Configurations the predicted study samples (TPE) where the grid is larger than it "
                   "can replay point by point.")
def search(options, server_bin, strategy, confirm_enabled, race_top, race_budget, predict_trials):
    """Find the fastest speculative settings for MODEL on this machine and print their command line.

    By default (`--strategy predict`) the baseline is measured once; every configuration of the search
    space is then predicted from the baseline's output (what each drafter would draft and the target
    accept) and from measured step costs, and the best few race the baseline and --spec-default on
    llama-server, round after round, until one is proven faster or none can be. `--strategy measure`
    runs (or resumes) an Optuna study of measured trials instead, trial 0 the baseline, and ends with
    the same race. Either way the printed figures are the race's, and every trial is stored in the
    study database.

    \b
    Example:
        autotune search --model gemma3-270m --max-tokens 48
    """
    from autotune.cli.progress import TerminalReporter
    from autotune.engines import choose_engine
    from autotune.errors import UsageError
    from autotune.study.predicted import run_predicted_search
    from autotune.study.race import RaceBudget
    from autotune.study.search import ConfirmOptions, run_search

    for level in options.levels:  # bad input (no llama-server for N > 1) before anything is measured
        choose_engine(options.engine_name, concurrency=level, server_bin=server_bin)
    predicted_only = given_flags(PREDICTED_ONLY_FLAGS)
    if strategy == "measure" and predicted_only:
        raise UsageError(f"{', '.join(predicted_only)} means nothing under --strategy measure: drop it")
    if strategy == "predict" and not confirm_enabled and options.levels == (1,):
        # refused where the search predicts (its race is the answer), taken where it falls back to measuring
        options = replace(options, measured_only=(*options.measured_only, "--no-confirm"))
    race_options = ConfirmOptions(confirm_enabled, race_top, RaceBudget.parse(race_budget))
    for level in options.levels:
        if strategy == "predict":
            best = run_predicted_search(options.at_level(level), reporter=TerminalReporter(), server_bin=server_bin,
                                        race_options=race_options, predict_trials=predict_trials)
        else:
            best = run_search(options.at_level(level), reporter=TerminalReporter(), server_bin=server_bin,
                              confirm_options=race_options)
        click.echo(best_text(best))


@click.command()
@study_options
@json_option
@server_bin_option
@click.option("--by-category", is_flag=True,
              help="Add each prompt category's raced speedup [95% CI] and predicted one, for the pick and for "
                   "--spec-default (the best draft length differs between code and chat).")
@click.option("--hf-command", is_flag=True,
              help="Print the command with its model files named on the Hugging Face Hub (-hf, -hfd) instead of "
                   "local paths, to run on another machine.")
def best(model, hardware, engine, objective, concurrency, storage, as_json, server_bin, by_category, hf_command):
    """Print the fastest configuration found for MODEL as a llama-server command line.

    The first line is the command; then its mix tok/s, the baseline's and the speedup. Without a
    study for that hardware, the hardware's preset (from `confirm` or `nightly`) is printed. The
    command uses only flags the llama-server it names has (--server-bin, else the one that resolves);
    a faster configuration that needs others (a fork's) is named in one line.

    With --hf-command the command names its model files on the Hugging Face Hub (`-hf REPO -hff FILE`,
    `-hfd REPO:QUANT`), for files that came from the hub, so it runs where they are not on disk.

    \b
    Example:
        autotune best --model gemma3-270m --json
        autotune best --model qwen3-8b --hf-command
    """
    from autotune.errors import StudyNotFoundError
    from autotune.llamacpp.runnable import command_check
    from autotune.models.hub_command import hub_command
    from autotune.presets.confirmed import PresetResult, stored_preset
    from autotune.spec.command import format_command
    from autotune.study.best import best_result
    from autotune.study.catalog import open_study_of
    from autotune.study.records import config_from_attrs

    check = command_check(server_bin)
    try:
        result = best_result(open_study_of(model, hardware=hardware, engine=engine, storage_url=storage,
                                           objective=objective, concurrency=concurrency), check=check)
    except StudyNotFoundError:
        preset = stored_preset(model, hardware=hardware, storage_url=storage, concurrency=concurrency or 1)
        if preset is None:
            raise
        result = PresetResult(preset)
    hub = None
    if hf_command:
        config = result.preset.params if isinstance(result, PresetResult) else result.record.config
        hub = hub_command(result.argv, config_from_attrs(config), check)
    if as_json:
        click.echo(json.dumps({**result.as_dict(), **({"hf_argv": hub.argv} if hub else {})}, indent=2))
        return
    text = best_text(result)
    if hub is not None:
        text = "\n".join([format_command(hub.argv), hub.note(), *text.splitlines()[1:]])
    click.echo(text)
    if by_category and not isinstance(result, PresetResult):
        click.echo(category_table(result))


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
@click.option("--repeats", type=click.IntRange(min=1), default=int(DEFAULT_BUDGET), show_default=True,
              help="The most rounds the race may take; it stops earlier once a winner is proven or none can win.")
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
    """Race the study's best configurations against the baseline on a real llama-server.

    The same race as `search`'s: round after round, each prompt paired with the baseline's, until one
    configuration is proven faster than the plain command by the minimum effect or none can be, at
    most REPEATS rounds. Each gets its speedup with a 95% interval and p-value, stored with the study,
    and the pick becomes this machine's preset. A predicted study's race finalists race again.
    Sampling follows the study unless given here.

    \b
    Example:
        autotune confirm --model gemma3-270m --top 3 --repeats 3
    """
    from autotune.presets.confirmed import run_confirm

    from autotune.study.race import RaceBudget, round_line

    def on_measured(round_: int, entrant, speedup) -> None:
        click.echo(f"autotune: {round_line(round_, entrant, speedup)}", err=True)

    sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p, "seed": seed}
    for level in concurrency or (None,):
        result = run_confirm(model=model, engine_name=engine, objective=objective, top=top,
                             budget=RaceBudget(rounds=repeats),
                             storage_url=storage, server_bin=server_bin, sampling=sampling, on_measured=on_measured,
                             concurrency=level)
        click.echo(confirmation_table(result))
