"""Every command has help text with an example and a place in the manual (docs/); every option has help text,
which the manual's CLI reference is generated from; README shows the commands CI runs."""

import re
import shlex
import sys
from importlib import import_module
from pathlib import Path

import click
import pytest

from autotune.cli.main import cli
from autotune.measure.prompts import load_prompt_mix

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PAGES = {path.name: path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}
MANUAL = "\n".join(PAGES.values())
CLI_PAGE = "cli.md"


def commands(group=cli, prefix=()):
    for name, command in group.commands.items():
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from commands(command, prefix + (name,))


def fenced(text: str, language: str = "bash") -> list[str]:
    return [block.strip() for block in re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)]


def mkdocs_click_blocks(page: str) -> list[dict[str, str]]:
    """The `::: mkdocs-click` blocks of a page, as {':module:': ..., ':command:': ...}."""
    blocks = re.findall(r"^::: mkdocs-click\n((?:[ \t]+:\w+:.*\n?)+)", page, re.M)
    return [dict(re.match(r"\s*(:\w+:)\s*(.*)", line).groups() for line in block.splitlines()) for block in blocks]


@pytest.mark.parametrize("path, command", list(commands()), ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_command_has_help_with_example_and_a_manual_entry(path, command):
    assert command.help and "Example" in command.help
    assert f"autotune {' '.join(path)}" in MANUAL, f"no page of docs/ names `autotune {' '.join(path)}`"
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{param.name} of {' '.join(path)} has no help"


def test_cli_reference_is_generated_from_the_root_group():
    """docs/cli.md renders the whole `autotune` group, so the reference holds every command and option."""
    [block] = mkdocs_click_blocks(PAGES[CLI_PAGE])
    assert getattr(import_module(block[":module:"]), block[":command:"]) is cli
    assert block.get(":prog_name:") == "autotune"


def test_cli_reference_renders_every_command_and_option():
    """What mkdocs-click writes into docs/cli.md at build time names every command and every option."""
    from mkdocs_click import _docs as docs  # the test extra has mkdocs-click (not mkdocs): CI runs this before .[docs]
    [block] = mkdocs_click_blocks(PAGES[CLI_PAGE])
    rendered = "\n".join(docs.make_command_docs(prog_name="autotune", command=cli, depth=int(block.get(":depth:", 0)),
                                                style=block.get(":style:", "plain")))
    for path, command in commands():
        assert re.search(rf"^#+ {re.escape(path[-1])}\b", rendered, re.M), f"no heading for {' '.join(path)}"
        for param in command.params:
            if isinstance(param, click.Option):
                for flag in param.opts + param.secondary_opts:
                    assert flag in rendered, f"{flag} of {' '.join(path)} is not in the CLI reference"


def test_every_page_is_in_the_nav():
    """mkdocs build --strict warns (and so fails) on a page left out of the nav; this says which, without mkdocs."""
    nav = (ROOT / "mkdocs.yml").read_text()
    assert [name for name in PAGES if not re.search(rf":\s*{re.escape(name)}\s*$", nav, re.M)] == []


def test_the_manuals_set_up_shows_readmes_test_command():
    """README's test command (which .ci/run runs verbatim: tests/test_ci.py) is the manual's too."""
    [command] = [block for block in fenced(README) if "autotune.install test" in block]
    assert command in fenced(PAGES["getting-started.md"])


def test_readme_demo_command_names_a_real_extra_and_model():
    [command] = [block for block in fenced(README) if "autotune.install demo" in block]
    install, search = command.split(" && ")
    assert install == "python3 -m autotune.install demo"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "demo" in extras and "docs" in extras
    argv = shlex.split(search)
    assert argv[:2] == ["autotune", "search"] and (ROOT / "search_spaces" / f"{argv[argv.index('--model') + 1]}.toml").is_file()
    assert command in fenced(PAGES["getting-started.md"])


def test_readme_is_short_and_its_links_resolve():
    assert len(README.splitlines()) <= 150
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).is_file(), f"README links to {target}, which is not there"


def test_example_prompt_files_load():
    for path in (ROOT / "examples").glob("*.jsonl"):
        assert len(load_prompt_mix(path)) > 0
