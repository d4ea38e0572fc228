"""The `autotune` command line: thin commands that parse options, call the library and print.

Library errors (autotune.errors) become one-line messages with exit code 2 for bad input and 1 for
run-time failures. Set AUTOTUNE_DEBUG=1 to see the traceback of an unexpected error instead.
"""

from __future__ import annotations

import json
import os
import sys

import click

from autotune import __version__
from autotune.cli.options import (
    ConcurrencyLevels, json_option, measured_model_option, measurement_options, model_option, sampling_options, server_bin_option, storage_option,
    study_engine_option, study_objective_option, study_options, with_options,
)
from autotune.errors import AutotuneError

DEBUG_ENV = "AUTOTUNE_DEBUG"


class AutotuneGroup(click.Group):
    """Turns AutotuneError into `autotune: error: ...` and its exit code, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AutotuneError as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            click.echo(f"autotune: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("autotune: interrupted", err=True)
            sys.exit(130)


@click.group(cls=AutotuneGroup)
@click.version_option(__version__, prog_name="autotune")
def cli() -> None:
    """Find the fastest llama.cpp speculative-decoding settings for this machine and a model.

    \b
    Example:
        autotune search --model gemma3-270m
        autotune best --model gemma3-270m
    """


@cli.command()
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
def search(model, options, server_bin, confirm_enabled, confirm_top, confirm_repeats):
    """Run (or resume) an Optuna study of speculative settings for MODEL on this machine.

    Trial 0 is the baseline without speculation; every trial generates the prompt mix for real and
    is stored in the study database. The top configurations are then re-measured with the baseline,
    interleaved (on llama-server when one resolves), and the winner's llama-server command line is
    printed with those figures.

    \b
    Example:
        autotune search --model gemma3-270m --trials 12 --max-tokens 48
    """
    from autotune.study.search import ConfirmOptions, level_engine, run_search
    from autotune.cli.progress import TerminalReporter

    for level in options.concurrency:  # bad input (no llama-server for N > 1) before anything is measured
        level_engine(options.engine_name, level, server_bin, None)
    for level in options.concurrency:
        best = run_search(model, options, reporter=TerminalReporter(), server_bin=server_bin,
                          confirm_options=ConfirmOptions(confirm_enabled, confirm_top, confirm_repeats),
                          concurrency=level)
        click.echo(_best_text(best))


@cli.command()
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
    from autotune.study.best import PresetResult, best_result
    from autotune.study.search import open_study_of, stored_preset

    try:
        result = best_result(open_study_of(model, hardware, engine, storage, objective, concurrency))
    except StudyNotFoundError:
        preset = stored_preset(model, hardware, storage, concurrency or 1)
        if preset is None:
            raise
        result = PresetResult(preset)
    click.echo(json.dumps(result.as_dict(), indent=2) if as_json else _best_text(result))


@cli.command()
@study_options
@json_option
def trials(model, hardware, engine, objective, concurrency, storage, as_json):
    """List the trials of MODEL's study: state, parameters, tok/s, speedup and acceptance.

    \b
    Example:
        autotune trials --model gemma3-270m
    """
    from autotune.study.search import open_study_of
    from autotune.study.best import trial_rows

    rows = trial_rows(open_study_of(model, hardware, engine, storage, objective, concurrency))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'#':>3}  {'state':<8} {'tok/s':>7} {'95% CI':>13} {'speedup':>7} {'accept':>6}  configuration")
    for row in rows:
        tok_s = f"{row['tok_s']:.1f}" if row["tok_s"] is not None else "-"
        ci95 = f"{row['ci95'][0]:.1f}-{row['ci95'][1]:.1f}" if row["ci95"] else "-"
        speedup = f"{row['speedup']:.2f}x" if row["speedup"] is not None else "-"
        accept = f"{row['acceptance']:.0%}" if row["acceptance"] is not None else "-"
        label = row["label"] or "-"
        if row["role"] == "baseline":
            label += " (baseline" + (f", drift {row['drift']:.3f})" if row["drift"] is not None else ")")
        elif row["role"] == "spec-default":
            label += " (llama.cpp's --spec-default" + (", drift check)" if row.get("drift_check") else ")")
        if row["lossless"] is False:
            label += f" [output differs, excluded: {row['lossless_reason']}]"
        if row["fail_reason"]:
            label += f" [{row['fail_reason']}]"
        click.echo(f"{row['number']:>3}  {row['state']:<8} {tok_s:>7} {ci95:>13} {speedup:>7} {accept:>6}  {label}")


@cli.command()
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
    from autotune.study.search import run_confirm

    def on_measured(round_: int, label: str, tok_s: float | None) -> None:
        figure = "FAILED" if tok_s is None else f"{tok_s:.1f} tok/s"
        click.echo(f"[round {round_ + 1}/{repeats}] {label}: {figure}", err=True)

    sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p, "seed": seed}
    for level in concurrency or (None,):
        result = run_confirm(model=model, engine_name=engine, objective=objective, top=top, repeats=repeats,
                             storage_url=storage, server_bin=server_bin, sampling=sampling, on_measured=on_measured,
                             concurrency=level)
        _confirmation_table(result)


def _confirmation_table(result) -> None:
    rows = [*result.baselines, *result.configs]
    level = rows[0].concurrency if rows else 1
    if level > 1:
        click.echo(f"# --concurrency {level} (-np {level}): after each configuration, its aggregate tok/s of all "
                   "streams and per-stream decode tok/s (mean, 10th percentile)")
    click.echo(f"{'tok/s':>8} {'95% CI':>17} {'speedup':>7} {'p':>8}  configuration ({result.engine} engine, {result.repeats} repeats)")
    for row in [*result.baselines, *result.configs]:
        if row.failure:
            click.echo(f"{'-':>8} {'':>17} {'':>7} {'':>8}  {row.label} [{row.failure}]")
            continue
        speedup = f"{row.speedup:.2f}x" if row.speedup is not None else "-"
        p_value = f"{row.p_value:.3g}" if row.p_value is not None else "-"
        ci = f"[{row.ci95[0]:.1f}, {row.ci95[1]:.1f}]"
        serving = ""
        if level > 1 and row.figures:
            mean = {name: sum(values) / len(values) for name, values in row.figures.items() if values}
            serving = (f"  [aggregate {mean.get('aggregate_tok_s', 0):.1f}, per stream {mean.get('per_stream_tok_s', 0):.1f}"
                       f", p10 {mean.get('per_stream_p10_tok_s', 0):.1f}]")
        click.echo(f"{row.mean_tok_s:>8.1f} {ci:>17} {speedup:>7} {p_value:>8}  {row.label}{serving}")


_ENGINE_LABELS = {"server": "llama-server", "python": "the in-process engine"}


def _best_text(result) -> str:
    """The command line, then its figures: the confirmed ones first, each naming the engine that measured it."""
    from autotune.spec.command import format_command
    from autotune.study.best import PresetResult
    from autotune.spec.default import SPEC_DEFAULT_FLAG
    from autotune.study.records import SPEC_DEFAULT_ROLE
    from autotune.study.trials import is_spec_default

    lines = [format_command(result.argv)]
    if isinstance(result, PresetResult):
        return "\n".join(lines + [result.summary()])
    confirmed = result.confirmed
    if confirmed is not None:
        confirmation = result.confirmation
        baseline = confirmation.baseline_of(confirmed)
        verdict = "significantly faster" if confirmed.significantly_faster else "NOT significantly faster"
        lines.append(
            f"# {confirmed.mean_tok_s:.1f} tok/s [95% CI {confirmed.ci95[0]:.1f}-{confirmed.ci95[1]:.1f}] on "
            f"{_ENGINE_LABELS.get(confirmation.engine, confirmation.engine)}, baseline {baseline.mean_tok_s:.1f} "
            f"[{baseline.ci95[0]:.1f}-{baseline.ci95[1]:.1f}], speedup {confirmed.speedup:.2f}x, "
            f"p={confirmed.p_value if confirmed.p_value is not None else float('nan'):.3g} ({verdict}; "
            f"{confirmation.repeats} interleaved rounds)"
        )
        reference = confirmation.spec_default_of(confirmed)
        if confirmed.role == SPEC_DEFAULT_ROLE:  # llama.cpp's default won: the searched best beside it
            finalists = [c for c in confirmation.configs if c.role == "trial" and c.failure is None]
            if finalists:
                fastest = max(finalists, key=lambda c: c.mean_tok_s)
                lines.append(f"# this is llama.cpp's --spec-default: the fastest searched configuration ({fastest.label}) "
                             f"ran {fastest.mean_tok_s:.1f} tok/s [{fastest.ci95[0]:.1f}-{fastest.ci95[1]:.1f}] in the "
                             f"same rounds, {fastest.mean_tok_s / confirmed.mean_tok_s:.2f}x of it")
        elif reference is not None:
            lines.append(f"# over llama.cpp's --spec-default ({reference.mean_tok_s:.1f} tok/s "
                         f"[{reference.ci95[0]:.1f}-{reference.ci95[1]:.1f}], same rounds): "
                         f"{confirmation.speedup_vs_spec_default(confirmed):.2f}x")
    serving = result.serving()
    if serving["concurrency"] > 1 and serving["aggregate_tok_s"] is not None:
        source = "confirmed" if confirmed is not None and confirmed.figures else "in the search"
        lines.append(f"# {serving['concurrency']} concurrent streams ({source}): aggregate {serving['aggregate_tok_s']:.1f} "
                     f"tok/s, per stream {serving['per_stream_tok_s']:.1f} tok/s (10th percentile "
                     f"{serving['per_stream_p10_tok_s']:.1f})")
    if result.front and "+pareto-throughput" in result.study:
        lines.append("# pareto front (aggregate tok/s, per-stream tok/s); the pick (*) has the best aggregate tok/s:")
        for member in sorted(result.front, key=lambda t: -t.values[0]):
            mark = "*" if member.number == result.trial.number else " "
            lines.append(f"# {mark} trial {member.number:>3}: {member.values[0]:7.1f} aggregate, {member.values[1]:7.1f} "
                         f"per stream  {member.user_attrs['config']['label']}")
    elif result.front:
        lines.append("# pareto front (decode tok/s, prompt tok/s); the pick (*) has the best end-to-end tok/s:")
        for member in sorted(result.front, key=lambda t: -t.values[0]):
            mark = "*" if member.number == result.trial.number else " "
            lines.append(f"# {mark} trial {member.number:>3}: {member.values[0]:7.1f} decode, {member.values[1]:7.1f} prompt, "
                         f"{member.user_attrs['figures']['e2e_tok_s']:7.1f} e2e  {member.user_attrs['config']['label']}")
    engine = result.trial.user_attrs.get("engine")
    which = f"trial {result.trial.number}" + (f" ({SPEC_DEFAULT_FLAG})" if is_spec_default(result.trial) else "")
    measured = f"{result.tok_s:.1f} tok/s decode in the search ({which}, {_ENGINE_LABELS.get(engine, engine)}, " \
               "one measurement)"
    if result.baseline_tok_s:
        measured += f", baseline {result.baseline_tok_s:.1f}, speedup {result.speedup:.2f}x"
    if result.speedup_vs_spec_default is not None and not is_spec_default(result.trial):
        measured += f", {result.speedup_vs_spec_default:.2f}x over --spec-default ({result.spec_default_tok_s:.1f})"
    lines.append("# " + measured if confirmed is not None else "# " + measured + " — not confirmed")
    return "\n".join(lines)


def main() -> None:
    """The console script: Click's own usage errors also become one line with exit code 2."""
    try:
        cli.main(prog_name="autotune", standalone_mode=False)
    except click.ClickException as exc:
        click.echo(f"autotune: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("autotune: interrupted", err=True)
        sys.exit(130)


def _register() -> None:
    from autotune.cli.fleet import nightly, presets
    from autotune.cli.models import models, quantize
    from autotune.cli.pull import pull
    from autotune.cli.report import report

    for command in (nightly, presets, models, quantize):
        cli.add_command(command)
    cli.add_command(report)
    cli.add_command(pull)


_register()
