"""Combined spec types (`--spec-type a,b`): one canonical name from the search-space file to the
printed command, the trial attributes and both engines."""

from __future__ import annotations

import shlex
import textwrap
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines.python import PythonEngine
from autotune.errors import SearchSpaceError
from autotune.hardware import hardware_key
from autotune.llamacpp.capabilities import parse_capabilities
from autotune.spec.command import server_argv
from autotune.spec.config import SpecConfig
from autotune.spec.space import load_space
from autotune.spec.types import DRAFT_MODEL_TYPES, SPEC_TYPE_PARAMS, combinations_of, combined_spec_type, draft_member
from autotune.study.records import config_attrs, config_from_attrs

T, D = Path("t.gguf"), Path("d.gguf")


def test_a_combination_has_one_spelling_in_llama_cpps_precedence_order():
    assert combined_spec_type("draft-simple,ngram-mod") == "ngram-mod,draft-simple"
    assert (
        combined_spec_type(["ngram-cache", "ngram-simple", "ngram-map-k4v"]) == "ngram-simple,ngram-map-k4v,ngram-cache"
    )
    config = SpecConfig(T, "draft-simple, ngram-mod", D, {"ngram_mod_n_match": 8, "draft_n_max": 4})
    assert config.spec_type == "ngram-mod,draft-simple" and draft_member(config.spec_type) == "draft-simple"
    assert config.value("ngram_mod_n_min") == 48 and config.value("draft_p_min") == 0.0  # each member's defaults
    assert config.describe() == "ngram-mod,draft-simple draft=d.gguf n_max=4 mod_n_match=8"


@pytest.mark.parametrize(
    "spec_type, problem",
    [
        ("draft-simple,draft-mtp", "one draft model"),
        ("none,ngram-mod", "cannot be combined"),
        ("ngram-mod,ngram-mod", "twice"),
        ("ngram-mod,ngram-fancy", "unknown spec type"),
    ],
)
def test_impossible_combinations_are_refused(spec_type, problem):
    with pytest.raises(ValueError, match=problem):
        SpecConfig(T, spec_type)


def test_parameters_and_draft_need_are_the_members():
    params = SPEC_TYPE_PARAMS["ngram-mod,draft-simple"]
    assert set(params) == set(SPEC_TYPE_PARAMS["ngram-mod"]) | set(SPEC_TYPE_PARAMS["draft-simple"])
    assert "ngram-mod,draft-simple" in DRAFT_MODEL_TYPES and "ngram-simple,ngram-mod" not in DRAFT_MODEL_TYPES
    assert "draft-simple,ngram-mod" not in SPEC_TYPE_PARAMS  # lookups take the canonical name only
    assert all("," not in t for t in SPEC_TYPE_PARAMS)  # iterating lists the single types
    with pytest.raises(ValueError, match="no parameter"):
        SpecConfig(T, "ngram-mod,ngram-cache", params={"draft_n_max": 3})
    with pytest.raises(ValueError, match="needs draft model"):
        SpecConfig(T, "ngram-mod,draft-simple")


def test_the_command_has_the_list_and_every_members_flags():
    config = SpecConfig(
        T, "draft-simple,ngram-mod", D, {"ngram_mod_n_match": 8, "ngram_mod_n_max": 16, "draft_n_max": 4}
    )
    argv = server_argv(config, context_size=4096)
    line = shlex.join(argv)
    assert "--spec-type ngram-mod,draft-simple -md d.gguf" in line
    assert (
        "--spec-draft-n-max 4" in line and "--spec-ngram-mod-n-match 8" in line and "--spec-ngram-mod-n-max 16" in line
    )


def test_trial_attributes_round_trip():
    config = SpecConfig(T, "ngram-map-k4v,ngram-simple", params={"ngram_simple_size_n": 3, "ngram_map_k4v_min_hits": 2})
    attrs = config_attrs(config)
    assert attrs["spec_type"] == "ngram-simple,ngram-map-k4v"
    assert config_from_attrs(attrs) == config


def test_engines_list_the_combinations_they_run():
    python = PythonEngine().runnable_spec_types
    assert {"ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache"} <= python
    assert (
        "ngram-mod,draft-simple" in python and "ngram-simple,ngram-map-k,ngram-mod,ngram-cache,draft-simple" in python
    )
    assert (
        "ngram-mod,draft-dspark" not in python and "ngram-mod,draft-dflash" not in python
    )  # their own loop: server-only
    listing = (
        "--spec-type none,draft-simple,ngram-simple,ngram-mod\n   comma-separated list of types of speculative decoding"
    )
    server = parse_capabilities(listing, "version: 1")
    assert server.combines_spec_types
    older = parse_capabilities("--spec-type none,ngram-mod   type of speculative decoding", "")
    assert not older.combines_spec_types and older.runs("ngram-mod") and not older.runs("ngram-mod,ngram-mod")
    assert server.runs("ngram-mod,draft-simple") and not server.runs("ngram-cache,draft-simple")
    assert combinations_of(server.spec_types) == {
        "ngram-simple,ngram-mod",
        "ngram-simple,draft-simple",
        "ngram-mod,draft-simple",
        "ngram-simple,ngram-mod,draft-simple",
    }


SPACE = """
[model]
name = "tiny"
target = "tiny-target.gguf"
context_size = 512

[drafts.draft-simple]
file = "tiny-draft.gguf"

[spec_types.draft-simple]
draft_n_max = [1, 6]

[spec_types.ngram-mod]
ngram_mod_n_match = [2, 8]
ngram_mod_n_max = [4, 16]

[spec_types."draft-simple,ngram-mod"]
ngram_mod_n_max = [2, 8]
"""


def space_file(tmp_path, text: str) -> Path:
    path = tmp_path / "space.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_combination_table_inherits_its_members_ranges(tmp_path):
    space = load_space(space_file(tmp_path, SPACE))
    ranges = {r.param.name: (r.low, r.high) for r in space.spec_types["ngram-mod,draft-simple"]}
    assert ranges == {"draft_n_max": (1, 6), "ngram_mod_n_match": (2, 8), "ngram_mod_n_max": (2, 8)}  # its own n_max
    assert [p.pattern for p in space.draft_files("ngram-mod,draft-simple")] == ["tiny-draft.gguf"]


@pytest.mark.parametrize(
    "table, problem",
    [
        ('[spec_types."ngram-mod,draft-mtp,draft-simple"]\n', "one draft model"),
        ('[spec_types."ngram-mod,ngram-cache"]\ndraft_n_max = 3\n', "unknown parameter"),
        ('[spec_types."ngram-mod,draft-simple"]\n', "listed twice"),
        ('[spec_types."ngram-cache,ngram-fancy"]\n', "unknown spec type"),
        ('[spec_types."ngram-mod,ngram-cache"]\nngram_mod_n_match = [0, 4]\n', "accepts 1 or more"),
        ('[drafts."ngram-mod,draft-simple"]\nfile = "x.gguf"\n', "per draft type"),
    ],
)
def test_bad_combination_tables_are_refused(tmp_path, table, problem):
    with pytest.raises(SearchSpaceError, match=problem):
        load_space(space_file(tmp_path, SPACE + table))


@pytest.mark.slow
def test_a_search_measures_a_combination_in_process(tmp_path, models_dir, autotune_home):
    path = space_file(
        tmp_path,
        SPACE.split("[spec_types.draft-simple]")[0]
        + '[spec_types."draft-simple,ngram-mod"]\ndraft_n_max = [2, 4]\nngram_mod_n_match = [1, 3]\n'
        "ngram_mod_n_min = 0\n",
    )
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--strategy",
            "measure",
            "--model",
            "tiny",
            "--space",
            str(path),
            "--models-dir",
            str(models_dir),
            "--max-tokens",
            "12",
            "--per-category",
            "1",
            "--trials",
            "3",
            "--seed",
            "2",
            "--no-confirm",
            "--no-pruning",
        ],
    )
    assert result.exit_code == 0, result.output
    study = optuna.load_study(
        study_name=f"tiny@{hardware_key()}:python", storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    )
    searched = [
        t
        for t in study.trials
        if t.user_attrs.get("config", {}).get("spec_type", "none") != "none" and t.user_attrs.get("role") is None
    ]
    assert searched and all(t.state == optuna.trial.TrialState.COMPLETE for t in searched), [
        t.user_attrs for t in searched
    ]
    for trial in searched:
        assert trial.user_attrs["config"]["spec_type"] == "ngram-mod,draft-simple"
        argv = trial.user_attrs["argv"]
        assert argv[argv.index("--spec-type") + 1] == "ngram-mod,draft-simple" and "--spec-ngram-mod-n-match" in argv
        assert trial.user_attrs["figures"]["n_drafted"] > 0
