"""Every command has help text with an example and a place in the manual (docs/); every option has help text,
which the manual's CLI reference is generated from; README shows the commands CI runs; cli.md's hand-written
tables (the commands, search's options with their defaults, the exit codes) say what the code does; and no
page names a path of a developer's machine."""

import re
import shlex
import signal
import sys
from importlib import import_module
from pathlib import Path

import click
import pytest

from autotune.cli.main import cli
from autotune.errors import AutotuneError, LeaseHeld
from autotune.interrupts import STOP_SIGNALS, Interrupted
from autotune.measure.prompts import load_prompt_mix
from autotune.presets.nightly import EXIT_CODES as NIGHTLY_EXIT_CODES

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
    rendered = "\n".join(
        docs.make_command_docs(
            prog_name="autotune", command=cli, depth=int(block.get(":depth:", 0)), style=block.get(":style:", "plain")
        )
    )
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
    assert (
        argv[:2] == ["autotune", "search"]
        and (ROOT / "search_spaces" / f"{argv[argv.index('--model') + 1]}.toml").is_file()
    )
    assert command in fenced(PAGES["getting-started.md"])


def test_readme_is_short_and_its_links_resolve():
    assert len(README.splitlines()) <= 150
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).is_file(), f"README links to {target}, which is not there"


def test_example_prompt_files_load():
    for path in (ROOT / "examples").glob("*.jsonl"):
        assert len(load_prompt_mix(path)) > 0


def table_under(page: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped) of the table in the section under `heading`, its header row left out."""
    section = page.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def exit_codes_of_the_code() -> dict[int, set[str]]:
    """Every code the command line can exit with, each with the words its row of the table must hold:
    0; Click's usage error; each AutotuneError's; nightly's, by status; 128 + each stop signal, by its
    name; and each literal `sys.exit(N)` of a command module, by the command."""
    codes: dict[int, set[str]] = {0: set(), click.UsageError.exit_code: set()}
    errors = [AutotuneError]
    while errors:
        error = errors.pop()
        codes.setdefault(error.exit_code, set())
        errors += error.__subclasses__()
    codes[LeaseHeld.exit_code].add("--no-wait")
    for status, code in NIGHTLY_EXIT_CODES.items():
        codes.setdefault(code, set()).add(status)
    for signum in STOP_SIGNALS:
        codes.setdefault(Interrupted(signum).exit_code, set()).add(signal.Signals(signum).name)
    for module in (ROOT / "autotune" / "cli").glob("*.py"):
        for literal in re.findall(r"sys\.exit\((\d+)\)", module.read_text()):
            codes.setdefault(int(literal), set()).add(f"`{module.stem}`")
    return codes


def test_the_exit_codes_table_holds_every_code_the_command_line_exits_with_and_no_other():
    table = {int(code.strip("`")): meaning for code, meaning in table_under(PAGES[CLI_PAGE], "## Exit codes")}
    codes = exit_codes_of_the_code()
    assert set(table) == set(codes)
    for code, words in codes.items():
        assert all(word in table[code] for word in words), (code, words, table[code])
    assert not [name for name, page in PAGES.items() if name != CLI_PAGE and re.search(r"^\| *code *\|", page, re.M)]


def option_default_text(option: click.Option) -> str | None:
    """An option's default as the hand-written tables spell it; None where it shows none."""
    if isinstance(option.default, bool):
        return "on" if option.default else "off"
    if not option.show_default or option.default is None:
        return None
    if isinstance(option.default, float):
        return f"{option.default:g}"
    if isinstance(option.default, (tuple, list)):
        return ",".join(str(v) for v in option.default)
    return str(option.default)


def test_the_options_table_of_search_names_every_option_and_its_default():
    search = cli.commands["search"]
    options = {flag: p for p in search.params if isinstance(p, click.Option) for flag in p.opts + p.secondary_opts}
    named: set[str] = set()
    for flags_cell, _, default_cell, _ in table_under(PAGES[CLI_PAGE], "## Options of search"):
        flags = [flag for flag in re.findall(r"--[a-z][a-z0-9-]*", flags_cell) if not flag.startswith("--no-")]
        assert set(flags) <= set(options), f"{flags_cell}: no such option of search"
        named.update(flags)
        shown = [option_default_text(options[flag]) for flag in flags]
        if all(shown):
            assert ", ".join(shown) == default_cell, flags_cell
    assert [p.opts[0] for p in search.params if isinstance(p, click.Option) and not set(p.opts) & named] == []


def test_the_commands_table_has_a_row_for_every_command():
    rows = [command for command, _ in table_under(PAGES[CLI_PAGE], "## Commands")]
    named = {re.match(r"`autotune (\w+)", command).group(1) for command in rows}
    assert named == set(cli.commands)


def test_no_page_names_a_path_of_a_developers_machine():
    for name, text in {"README.md": README, **PAGES}.items():
        assert not re.findall(r"(?:/root/|/home/\w|/Users/|/tmp/|/work/)\S*", text), name
