"""Every command has help text with an example, and the README documents it."""

from pathlib import Path

import click
import pytest

from autotune.cli.main import cli
from autotune.measure.prompts import load_prompt_mix

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def commands(group=cli, prefix=()):
    for name, command in group.commands.items():
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from commands(command, prefix + (name,))


@pytest.mark.parametrize("path, command", list(commands()), ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_command_has_help_with_example_and_readme_entry(path, command):
    assert command.help and "Example" in command.help
    assert f"autotune {' '.join(path)}" in README
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{param.name} of {' '.join(path)} has no help"


def test_example_prompt_files_load():
    for path in (Path(__file__).resolve().parents[2] / "examples").glob("*.jsonl"):
        assert len(load_prompt_mix(path)) > 0
