"""`--engine server` and `autotune confirm` end to end, on a real llama-server and real SQLite."""

from __future__ import annotations

import json
import shlex
import shutil
import textwrap
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.spec.command import format_command


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def write_space(tmp_path, draft: str, spec_tables: str, base_flags: str = "[]"):
    path = tmp_path / "tiny.toml"
    path.write_text(
        textwrap.dedent(f"""
        [model]
        name = "tiny"
        target = "tiny-target.gguf"
        draft = "{draft}"
        context_size = 512
        base_flags = {base_flags}
    """)
        + textwrap.dedent(spec_tables)
    )
    return path


def study_of(home, engine: str) -> optuna.Study:
    return optuna.load_study(study_name=f"tiny@{hardware_key()}:{engine}", storage=f"sqlite:///{home / 'autotune.db'}")


def trials_of(home, engine: str) -> list[optuna.trial.FrozenTrial]:
    return study_of(home, engine).trials


def searched(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The trials the sampler proposed: not the references (the baseline, llama.cpp's --spec-default)."""
    return [t for t in trials if t.user_attrs.get("role") not in ("baseline", "spec-default")]


def search(space, models_dir, *extra, ok: bool = True):
    return run(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(space),
        "--models-dir",
        str(models_dir),
        "--max-tokens",
        "12",
        "--per-category",
        "1",
        "--no-pruning",
        *extra,
        ok=ok,
    )


@pytest.mark.slow
def test_server_search_on_dspark_measures_and_prints_the_launched_command(
    tmp_path, models_dir, autotune_home, confirmed_pick
):
    space = write_space(
        tmp_path,
        "tiny-dspark.gguf",
        """
        [spec_types.draft-dspark]
        draft_n_max = [1, 4]
    """,
    )
    result = search(space, models_dir, "--engine", "server", "--trials", "3", "--seed", "0")
    trials = trials_of(autotune_home, "server")
    assert [t.user_attrs.get("role") for t in trials[:2]] == ["baseline", "spec-default"]
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4  # 3 counted and the uncounted --spec-default
    for trial in searched(trials):
        assert trial.user_attrs["figures"]["n_drafted"] > 0
        assert trial.user_attrs["lossless"] is True
    # search confirms its speculative winners with --spec-default and prints the command that launched the
    # fastest one's server (random weights accept little: --spec-default, drafting nothing, may be it)
    confirmation = study_of(autotune_home, "server").user_attrs["confirmation"]
    (spec_default,) = confirmation["spec_defaults"]
    if trials[1].user_attrs["figures"]["n_drafted"] == 0:  # drafted nothing in the search: nor in the confirmation
        assert spec_default["failure"].startswith("drafted nothing: speculation was inactive")
    confirmed = [
        c
        for c in confirmation["configs"] + confirmation["spec_defaults"]
        if c["role"] in ("trial", "spec-default") and not c["failure"]
    ]
    assert {trials[c["trial"]].user_attrs["config"]["spec_type"] for c in confirmed} >= {"draft-dspark"}
    # the printed command: the confirmation's pick, else the plain command with the reason
    pick = confirmed_pick(confirmation)
    command = result.stdout.splitlines()[0]
    if pick is not None:
        assert command == format_command(trials[pick["trial"]].user_attrs["argv"])
    else:
        assert command == format_command(trials[0].user_attrs["argv"])
        assert (
            "# the plain command: no configuration was proven faster than it by 2% on llama-server (" in result.stdout
        )
    argv = shlex.split(command)
    assert shutil.which(argv[0])
    assert Path(argv[argv.index("-m") + 1]).samefile(models_dir / "tiny-target.gguf")
    for trial in searched(trials):  # each DSpark trial's server ran the draft as the printed command would
        argv = trial.user_attrs["argv"]
        assert Path(argv[argv.index("-md") + 1]).samefile(models_dir / "tiny-dspark.gguf")
        assert argv[argv.index("--spec-type") + 1] == "draft-dspark"


@pytest.mark.slow
def test_pctree_is_left_out_when_the_binary_lacks_the_fork_flags(tmp_path, models_dir, autotune_home):
    space = write_space(
        tmp_path,
        "tiny-dspark.gguf",
        """
        [spec_types.draft-dspark]
        draft_n_max = [1, 4]
        dspark_pctree = [false, true]
        dspark_pctree_k = [2, 4]
        dspark_pctree_n = [8, 32]
    """,
    )
    result = search(space, models_dir, "--engine", "server", "--trials", "2")
    assert "has no --spec-dspark-pctree" in result.stderr
    (trial,) = searched(trials_of(autotune_home, "server"))
    assert not any(arg.startswith("--spec-dspark-pctree") for arg in trial.user_attrs["argv"])
    assert "dspark_pctree" not in trial.params


@pytest.mark.slow
def test_a_config_that_never_drafts_fails_as_speculation_inactive(tmp_path, models_dir, autotune_home):
    space = write_space(
        tmp_path,
        "tiny-draft.gguf",
        """
        [spec_types.ngram-simple]
        ngram_simple_size_n = 12
        ngram_simple_size_m = 48
    """,
    )
    search(space, models_dir, "--engine", "server", "--trials", "2")
    baseline, spec_default, ngram = trials_of(autotune_home, "server")
    assert baseline.state.name == "COMPLETE"
    assert spec_default.state.name == "COMPLETE"  # a reference that drafts nothing is still measured
    assert ngram.state.name == "FAIL"
    assert ngram.user_attrs["fail_reason"].startswith("speculation inactive")


def test_a_vocab_mismatched_draft_never_reaches_a_trial(tmp_path, models_dir, autotune_home):
    space = write_space(
        tmp_path,
        "tiny-otherwords.gguf",
        """
        [spec_types.draft-simple]
        draft_n_max = [2, 4]
    """,
    )
    result = search(space, models_dir, "--engine", "server", "--trials", "2", ok=False)
    assert result.exit_code == 2
    assert "draft-simple: tiny-target.gguf + tiny-otherwords.gguf" in result.stderr
    assert "fix the drafts of draft-simple" in result.stderr
    assert not (autotune_home / "autotune.db").exists()


def test_a_server_that_will_not_start_fails_every_trial_and_the_study_goes_on(tmp_path, models_dir, autotune_home):
    space = write_space(
        tmp_path,
        "tiny-draft.gguf",
        """
        [spec_types.ngram-simple]
        ngram_simple_size_n = [1, 3]
    """,
        base_flags='["--no-such-flag"]',
    )
    result = search(space, models_dir, "--engine", "server", "--trials", "2", ok=False)
    assert result.exit_code == 1 and "every trial failed" in result.output and "invalid argument" in result.output
    trials = trials_of(autotune_home, "server")
    assert [t.state.name for t in trials] == ["FAIL"] * 3  # baseline, --spec-default, one search trial
    assert all(t.user_attrs["server_log_tail"] for t in trials)


@pytest.mark.slow
def test_confirm_remeasures_the_winners_and_best_shows_it(tiny_space, models_dir):
    search(tiny_space, models_dir, "--trials", "4", "--seed", "1")
    table = run("confirm", "--model", "tiny", "--top", "2", "--repeats", "2")
    assert "# intervals: anytime-valid" in table.stdout and "# pick: " in table.stdout
    best = json.loads(run("best", "--model", "tiny", "--json").stdout)
    confirmed = best["confirmed"]
    assert confirmed["engine"] == "server" and 1 <= confirmed["rounds"] <= 2
    if confirmed["speedup"] is not None:  # proven faster: the interval that decided holds the point it decided at
        low, high = confirmed["speedup_ci"]
        point = confirmed["speedup_at_decision"] if confirmed.get("decided_by") else confirmed["speedup"]
        assert low <= point <= high and confirmed["significant"]
    assert confirmed["baseline_tok_s"] > 0
    figures = run("best", "--model", "tiny").stdout.splitlines()[1]
    assert "x the plain command's speed [95% CI " in figures or (
        figures.startswith("# the plain command: ") and " on llama-server (" in figures
    )
