"""The study verbs: `search` runs (or resumes) a study and prints its winner, `best` prints the
winner of a stored study (or this hardware's preset), `trials` lists a study's trials, `confirm`
re-measures its best on llama-server and makes the winner a preset."""

from __future__ import annotations

import json
from dataclasses import replace

import click

from autotune.cli.options import (
    ConcurrencyLevels,
    given_flags,
    json_option,
    measurement_options,
    model_hardware_options,
    model_option,
    sampling_options,
    search_models_option,
    server_bin_option,
    storage_option,
    study_engine_option,
    study_objective_option,
    study_options,
    with_options,
)
from autotune.cli.output import best_text, category_table, race_table, trials_table
from autotune.race.race import DEFAULT_BUDGET

#: the flags only the predicted strategy reads
PREDICTED_ONLY_FLAGS = {
    "predict_trials": "--predict-trials",
    "plan": "--plan",
    "plan_tok_s": "--plan-tok-s",
    "budget": "--budget",
    "again": "--again",
}


@click.command()
@search_models_option
@measurement_options
@server_bin_option
@click.option(
    "--strategy",
    type=click.Choice(["predict", "measure"]),
    default="predict",
    show_default=True,
    help="predict: measure the baseline once, predict every configuration from its output and the step "
    "costs, then race the best few on llama-server; measure: a TPE study of --trials measured "
    "trials, then the same race. Prediction needs temperature 0, one stream and the decode "
    "objective; otherwise the search measures and says so.",
)
@click.option(
    "--confirm/--no-confirm",
    "confirm_enabled",
    default=True,
    show_default=True,
    help="[measure] End with the race of the best trials on llama-server (in-process when none resolves).",
)
@click.option(
    "--race-top",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="How many of the best configurations race the baseline and --spec-default.",
)
@click.option(
    "--race-budget",
    default=DEFAULT_BUDGET,
    show_default=True,
    help="The most the race may take: rounds (6) or time (5m, 300s). It stops earlier once a winner is "
    "proven or no entrant can still win.",
)
@click.option(
    "--predict-trials",
    type=click.IntRange(min=1),
    default=400,
    show_default=True,
    help="[predict] Configurations the predicted study samples (TPE) where the grid is larger than it "
    "can replay point by point.",
)
@click.option(
    "--budget",
    default=None,
    help="[predict] The most the whole search may take, its downloads aside (15m, 1h, 900s; none: no cap): "
    "the prediction runs on fewer prompts and tokens where that leaves the race more time, the race "
    "gets the rest, and a budget too small for a verdict is refused with the smallest that works. "
    "Default: the search space's budget_per_target a target (none stated: no cap).",
)
@click.option(
    "--again",
    is_flag=True,
    help="[predict] Measure anew even where this search waited on another of the same model, files, space, "
    "prompts and length, which just finished (by default it answers from that one).",
)
@click.option(
    "--plan",
    is_flag=True,
    help="[predict] Measure one prompt of the baseline, print what the search would download, record and "
    "race with the minutes of each phase on this machine, and stop (nothing is downloaded or stored).",
)
@click.option(
    "--plan-tok-s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="[predict] With --plan: price the plan at this baseline decode tok/s instead of measuring it "
    "(where no target is on disk yet).",
)
def search(
    options,
    queue,
    server_bin,
    strategy,
    confirm_enabled,
    race_top,
    race_budget,
    predict_trials,
    budget,
    again,
    plan,
    plan_tok_s,
):
    """Find the fastest speculative settings for MODEL on this machine and print their command line.

    By default (`--strategy predict`) the baseline is measured once; every configuration of the search
    space is then predicted from the baseline's output (what each drafter would draft and the target
    accept) and from measured step costs, and the best few race the baseline and --spec-default on
    llama-server, round after round, until one is proven faster or none can be. `--strategy measure`
    runs (or resumes) an Optuna study of measured trials instead, trial 0 the baseline, and ends with
    the same race. Either way the printed figures are the race's, and every trial is stored in the
    study database; a predicted search writes a run of its own beside the earlier ones (`autotune
    prune` removes old runs).

    A search holds its model's lease on this hardware in the database while it runs: a second search
    of the same model waits for it, saying whose lease it is and since when (`--no-wait`: exit 3).
    Several `--model`s are a work queue: every worker sharing the database takes the next model
    nobody holds and that has no answer newer than its files, and stops when none is left.

    \b
    Example:
        autotune search --model gemma3-270m --max-tokens 48
        autotune search --model qwen3-8b --max-tokens 512 --per-category 4 --plan
        autotune search --model qwen3-8b --model llama3.1-8b --storage postgresql+psycopg://db/autotune
    """
    from autotune.cli.progress import TerminalReporter
    from autotune.engines import choose_engine
    from autotune.errors import UsageError
    from autotune.race.race import RaceBudget
    from autotune.search.fleet import run_work_queue
    from autotune.search.inputs import RaceOptions
    from autotune.search.measured import run_search
    from autotune.search.plan import SearchBudget
    from autotune.search.predicted import cannot_predict, run_predicted_search
    from autotune.study.records import PREDICTED_ENGINE

    for level in options.levels:  # bad input (no llama-server for N > 1) before anything is measured
        choose_engine(options.engine_name, concurrency=level, server_bin=server_bin)
    predicted_only = given_flags(PREDICTED_ONLY_FLAGS)
    if strategy == "measure" and predicted_only:
        raise UsageError(f"{', '.join(predicted_only)} means nothing under --strategy measure: drop it")
    if strategy == "predict" and not confirm_enabled and options.levels == (1,):
        # refused where the search predicts (its race is the answer), taken where it falls back to measuring
        queue = tuple(replace(o, measured_only=(*o.measured_only, "--no-confirm")) for o in queue)
    race_options = RaceOptions(confirm_enabled, race_top, RaceBudget.parse(race_budget))
    queue = tuple(replace(o, again=again) for o in queue)
    budget = None if budget is None else SearchBudget.parse(budget)  # a bad --budget is refused before anything runs
    if plan_tok_s is not None and not plan:
        raise UsageError("--plan-tok-s prices a plan: add --plan")
    if plan:
        from autotune.search.predicted import plan_search

        for model_options in queue:
            for line in plan_search(
                model_options,
                race_options,
                server_bin=server_bin,
                note=TerminalReporter().note,
                assume_tok_s=plan_tok_s,
                predict_trials=predict_trials,
                budget=budget,
            ):
                click.echo(line)
        return

    def search_one(options, lease=None):
        if strategy == "predict":
            return run_predicted_search(
                options,
                reporter=TerminalReporter(),
                server_bin=server_bin,
                race_options=race_options,
                predict_trials=predict_trials,
                lease=lease,
                budget=budget,
            )
        return run_search(
            options, reporter=TerminalReporter(), server_bin=server_bin, race_options=race_options, lease=lease
        )

    def answer_engine(options):
        if strategy == "predict" and cannot_predict(options.settings) is None:
            return PREDICTED_ENGINE
        return choose_engine(options.engine_name, concurrency=options.settings.concurrency, server_bin=server_bin)

    at_levels = tuple(o.at_level(level) for o in queue for level in o.levels)
    if len(queue) == 1:
        for level_options in at_levels:
            click.echo(best_text(search_one(level_options)))
        return
    for item in run_work_queue(at_levels, search=search_one, reporter=TerminalReporter(), answer_engine=answer_engine):
        click.echo(f"# {item.model}: {item.skipped}" if item.result is None else best_text(item.result))


@click.command()
@study_options
@json_option
@server_bin_option
@click.option(
    "--by-category",
    is_flag=True,
    help="Add each prompt category's raced speedup [95% CI] and predicted one, for the pick and for "
    "--spec-default (the best draft length differs between code and chat).",
)
@click.option(
    "--hf-command",
    is_flag=True,
    help="Print the command with its model files named on the Hugging Face Hub (-hf, -hfd) instead of "
    "local paths, to run on another machine.",
)
def best(model, hardware, engine, objective, concurrency, run, storage, as_json, server_bin, by_category, hf_command):
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
        result = best_result(
            open_study_of(
                model,
                hardware=hardware,
                engine=engine,
                storage_url=storage,
                objective=objective,
                concurrency=concurrency,
                run=run,
            ),
            check=check,
        )
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
def trials(model, hardware, engine, objective, concurrency, run, storage, as_json):
    """List the trials of MODEL's study: state, parameters, tok/s, speedup and acceptance.

    The run shown is the newest whose race finished (`--run N`: an earlier one); where the study has
    several runs, the text output names each on stderr, the one shown marked `*`.

    \b
    Example:
        autotune trials --model gemma3-270m
        autotune trials --model gemma3-270m --run 1
    """
    from autotune.study.best import trial_rows
    from autotune.study.catalog import open_study_of
    from autotune.study.runs import base_name, runs_of

    study = open_study_of(
        model,
        hardware=hardware,
        engine=engine,
        storage_url=storage,
        objective=objective,
        concurrency=concurrency,
        run=run,
    )
    rows = trial_rows(study)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(trials_table(rows))
    stored = runs_of(study._storage, base_name(study.study_name))
    for each in stored if len(stored) > 1 else ():  # on stderr: the table stays the table for a script
        click.echo(f"{'*' if each.name == study.study_name else ' '} {each.describe()}", err=True)


@click.command()
@model_hardware_options(
    "Hardware key of the studies (default: this machine's).",
    click.option(
        "--keep",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="Runs whose race finished to keep of each study.",
    ),
)
def prune(model, hardware, keep, storage):
    """Delete MODEL's old runs: of each of its studies on this hardware, every run older than the newest
    KEEP whose race finished. Runs newer than those stay (a search may be writing one), and a study
    with no finished race keeps every run.

    \b
    Example:
        autotune prune --model gemma3-270m --keep 2
    """
    from autotune.study.catalog import prune_model_runs

    deleted = prune_model_runs(model, hardware=hardware, storage_url=storage, keep=keep)
    for run in deleted:
        click.echo(f"deleted {run.describe()}")
    if not deleted:
        click.echo(f"nothing to prune: {model} has no run older than its newest {keep} finished")


@click.command()
@model_option
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="How many of the best configurations to re-measure.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=None,
    help="The most rounds the race may take, instead of a time: give --repeats or --budget, not both (a race "
    f"holds one cap) [default: --budget's time; {DEFAULT_BUDGET} rounds where none applies].",
)
@click.option(
    "--budget",
    default=None,
    help="The most time the race may take (15m, 1h, 900s), instead of rounds: give --budget or --repeats, not "
    f"both (a race holds one cap); none: at most {DEFAULT_BUDGET} rounds. Default: MODEL's search space's "
    f"budget_per_target for each target the race runs (none stated, or no bundled space: {DEFAULT_BUDGET} "
    "rounds). Either way the race stops earlier once a winner is proven or none can win.",
)
@study_engine_option
@study_objective_option
@click.option(
    "--concurrency",
    type=ConcurrencyLevels(),
    default=None,
    help="The studies of these loads (N[,N...] concurrent streams), each confirmed with its own -np N "
    "[default: the model's only study].",
)
@storage_option
@server_bin_option
@with_options(sampling_options(defaults=False))
@click.option("--seed", type=click.IntRange(min=0), help="Seed of token sampling [default: the study's].")
def confirm(
    model,
    top,
    repeats,
    budget,
    engine,
    objective,
    concurrency,
    storage,
    server_bin,
    temperature,
    top_k,
    top_p,
    min_p,
    seed,
):
    """Race the study's best configurations against the baseline on a real llama-server.

    The same race as `search`'s: round after round, each prompt paired with the baseline's, until one
    configuration is proven faster than the plain command by the minimum effect or none can be, at
    most --budget's time (by default the search space's budget_per_target a target) or --repeats'
    rounds. Each gets its speedup with a 95% interval and p-value, stored with the study, and the pick
    becomes this machine's preset. A predicted study's race finalists race again. Sampling follows the
    study unless given here.

    \b
    Example:
        autotune confirm --model gemma3-270m --top 3 --repeats 3
        autotune confirm --model qwen3-8b --budget 20m
    """
    from autotune.cli.progress import TerminalReporter
    from autotune.presets.confirmed import run_confirm
    from autotune.race.race import round_line
    from autotune.search.plan import SearchBudget

    budget = None if budget is None else SearchBudget.parse(budget)  # a bad --budget is refused before anything runs

    def on_measured(round_: int, entrant, speedup) -> None:
        click.echo(f"autotune: {round_line(round_, entrant, speedup)}", err=True)

    sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p, "seed": seed}
    for level in concurrency or (None,):
        result = run_confirm(
            model=model,
            engine_name=engine,
            objective=objective,
            top=top,
            repeats=repeats,
            budget=budget,
            storage_url=storage,
            server_bin=server_bin,
            sampling=sampling,
            on_measured=on_measured,
            note=TerminalReporter().note,
            concurrency=level,
        )
        click.echo(race_table(result))
