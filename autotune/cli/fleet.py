"""Commands about what is kept per machine: `presets` and the unattended `nightly` re-tuning."""

from __future__ import annotations

import json
import sys

import click

from autotune.cli.options import (
    measured_model_option,
    measurement_options,
    model_hardware_options,
    server_bin_option,
    storage_option,
)
from autotune.race.race import DEFAULT_BUDGET


@click.command()
@measured_model_option
@measurement_options
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Configurations that race the preset in use and the references on llama-server.",
)
@click.option(
    "--race-budget",
    default=DEFAULT_BUDGET,
    show_default=True,
    help="The most the race may take: rounds (6) or time (5m, 300s), within --budget.",
)
@click.option(
    "--budget",
    default=None,
    help="The most a night's re-tuning may take, its downloads aside (15m, 1h, 900s; none: no cap), as search's "
    "--budget: a predicted re-tune fits its prediction and race to it (a budget too small for a verdict is "
    "refused with the smallest that works); a measured one runs its --trials uncapped and races within it "
    "(in place of --race-budget, unless that is a shorter time). With --all, each preset's night. Default: the "
    "search space's budget_per_target a target (none stated: no cap).",
)
@server_bin_option
@click.option(
    "--all",
    "all_presets",
    is_flag=True,
    help="Instead of one model: re-tune each preset of this machine whose hub source moved (a new "
    "revision of a repo its files came from, with other files: `.src_sha`).",
)
def nightly(options, top, race_budget, budget, server_bin, all_presets):
    """Re-tune MODEL when its files are new or changed; replace the preset only on a proven win.

    With --all, every preset of this machine whose files came from a hub repo that has since moved is
    re-tuned the same way, one after the other (one summary line each; none moved: exit 3).

    Files the search space names on the Hugging Face Hub (`hf = "org/repo"`) are first brought up to
    the hub's current revision (offline: one line, and the files on disk are used). Prints one summary line. Exit codes: 0 improved (preset replaced), 3 unchanged (preset kept),
    4 regressed (the preset's configuration now runs slower than recorded), 1 failed, 2 bad input.

    A night keeps to --budget as `search` does (default: the search space's budget_per_target a target), its
    downloads aside; the `budget:` line says how it is spent.

    \b
    Example:
        autotune nightly --model gemma3-270m
        autotune nightly --model qwen3-8b --max-tokens 512 --per-category 4 --budget 1h
        autotune nightly --all
    """
    from autotune.cli.progress import TerminalReporter
    from autotune.engines import choose_engine
    from autotune.presets.nightly import combined_exit_code, run_nightly
    from autotune.race.race import RaceBudget
    from autotune.search.plan import SearchBudget

    budget = None if budget is None else SearchBudget.parse(budget)  # a bad --budget is refused before anything runs
    race_budget = RaceBudget.parse(race_budget)
    for level in options.levels:  # bad input (no llama-server for N > 1) before anything is measured
        choose_engine(options.engine_name, concurrency=level, server_bin=server_bin)
    if all_presets:
        from autotune.presets.nightly_all import run_nightly_all

        done = run_nightly_all(
            options,
            top=top,
            race_budget=race_budget,
            budget=budget,
            server_bin=server_bin,
            reporter=TerminalReporter(),
        )
        for entry, outcome in done:
            click.echo(f"{entry.label}: {outcome.status}: {outcome.summary}")
        if not done:
            click.echo("unchanged: no preset of this machine has a hub source that moved")
        sys.exit(combined_exit_code([outcome for _, outcome in done]))
    outcomes = []
    for level in options.levels:
        outcome = run_nightly(
            options.at_level(level),
            top=top,
            race_budget=race_budget,
            budget=budget,
            server_bin=server_bin,
            reporter=TerminalReporter(),
        )
        prefix = "" if options.levels == (1,) else f"--concurrency {level}: "
        click.echo(f"{prefix}{outcome.status}: {outcome.summary}")
        outcomes.append(outcome)
    sys.exit(combined_exit_code(outcomes))


@click.group()
def presets() -> None:
    """The best confirmed configuration per (model, hardware), kept in the study database.

    \b
    Example:
        autotune presets list
    """


@presets.command("list")
@storage_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def presets_list(storage, as_json):
    """List every (model, hardware, concurrency) preset with its tok/s and speedup (`np N`: tuned for N
    concurrent streams).

    \b
    Example:
        autotune presets list --json
    """
    from autotune.presets.export import preset_record

    rows = _store(storage).list()
    if as_json:
        click.echo(json.dumps([preset_record(p) for p in rows], indent=2, default=str))
        return
    if not rows:
        click.echo("no presets yet: `autotune confirm` or `autotune nightly` make them")
    for p in rows:
        click.echo(
            f"{p.model:<16} {p.hardware:<40} np {p.concurrency:<3} {p.tok_s:8.1f} tok/s {p.speedup:5.2f}x  "
            f"{p.created_at:%Y-%m-%d}"
        )


@presets.command("show")
@model_hardware_options(
    "Hardware key (default: this machine's).",
    click.option(
        "--concurrency",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="The preset tuned for this many concurrent streams.",
    ),
)
def presets_show(model, hardware, concurrency, storage):
    """Show one preset: its command line first, then its figures.

    \b
    Example:
        autotune presets show --model gemma3-270m
    """
    preset = _get_preset(storage, model, hardware, concurrency)
    click.echo(preset.command)
    click.echo(
        f"# {preset.tok_s:.1f} tok/s [95% CI {preset.ci95_low}-{preset.ci95_high}], baseline "
        f"{preset.baseline_tok_s:.1f}, speedup {preset.speedup:.2f}x, p={preset.p_value}"
    )
    click.echo(
        f"# measured by {preset.engine} ({preset.llama_cpp_build}) on {preset.hardware}, {preset.created_at:%Y-%m-%d %H:%M} UTC"
    )
    for name, sha in preset.file_hashes.items():
        rev = preset.file_revisions.get(name)
        click.echo(f"# {name} sha256 {sha}" + (f", {rev['repo']} at {rev['revision']}" if rev else ""))


@presets.command("export")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "toml", "sh", "llama-swap", "ini"]),
    default="json",
    show_default=True,
    help="json or toml data; sh: a launcher script that runs this machine's preset; llama-swap: a "
    "llama-swap config.yaml, one model per preset; ini: a llama-server --models-preset file.",
)
@storage_option
def presets_export(fmt, storage):
    """Export every preset; `--format sh` writes a runnable launcher script, `llama-swap` and `ini` the
    files llama-swap and llama-server's router mode (`--models-preset`) read.

    \b
    Example:
        autotune presets export --format sh > llama-launch.sh
        autotune presets export --format llama-swap > config.yaml
    """
    from autotune.presets.export import export_presets

    click.echo(export_presets(_store(storage).list(), fmt), nl=False)


def _store(storage):
    from storage import resolve_storage_url
    from storage.presets import PresetStore

    return PresetStore(resolve_storage_url(storage))


def _get_preset(storage, model, hardware, concurrency=1):
    from autotune.errors import StudyNotFoundError
    from autotune.hardware import hardware_key

    key = hardware or hardware_key()
    preset = _store(storage).get(model, key, concurrency)
    if preset is None:
        level = "" if concurrency == 1 else f" at --concurrency {concurrency}"
        raise StudyNotFoundError(f"no preset for {model} on {key}{level}: run `autotune confirm --model {model}` first")
    return preset
