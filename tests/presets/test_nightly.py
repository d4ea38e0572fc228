"""Nightly re-tuning: the decision rule, and whole nightly runs on a fixture models dir."""

from __future__ import annotations

import json
import shutil
import textwrap
from dataclasses import replace

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.presets.nightly import decide
from autotune.study.verdict import RaceVerdict
from autotune.testing import tiny_gguf
from autotune.testing.races import raced_row, scaled
from storage.presets import Preset

BASELINE_MS = [[470.0, 520.0, 430.0, 610.0, 480.0, 500.0]] * 3  # 3 rounds x 6 prompts, 47 tokens each: ~100 tok/s


def confirmation(winner_speed, preset_speed, jitter=0.01):
    """A race whose winner ran `winner_speed` times the baseline's speed and the preset `preset_speed` times,
    each unit off by up to +-`jitter`."""
    rows = [
        raced_row(
            "new",
            "trial",
            scaled(BASELINE_MS, winner_speed, jitter, seed=1),
            baseline_ms=BASELINE_MS,
            trial=1,
            significant=True,
        ),
        raced_row("old", "preset", scaled(BASELINE_MS, preset_speed, jitter, seed=2), baseline_ms=BASELINE_MS),
    ]
    return RaceVerdict(
        "server", "b1", 3, "2026-12-02", [raced_row("none", "baseline", BASELINE_MS)], rows, pairing="prompt"
    )


def preset(ci_low=110.0, ci_high=115.0):
    return Preset(
        model="m",
        hardware="h",
        argv=("old",),
        tok_s=112.4,
        baseline_tok_s=93.7,
        speedup=1.2,
        ci95_low=ci_low,
        ci95_high=ci_high,
        p_value=0.01,
        engine="server",
        llama_cpp_build="b1",
        file_hashes={},
        params={},
        study_name="s",
    )


def test_a_winner_proven_faster_than_the_preset_replaces_it():
    outcome = decide("m", confirmation(1.30, 1.20), preset())
    assert outcome.status == "improved" and outcome.exit_code == 0 and outcome.new_winner.label == "new"
    assert "1.08x the preset's speed [95% CI 1.0" in outcome.summary


def test_a_winner_within_noise_or_the_minimum_effect_keeps_the_preset():
    noisy = decide("m", confirmation(1.22, 1.20, jitter=0.15), preset())
    assert noisy.status == "unchanged" and noisy.exit_code == 3 and noisy.new_winner is None
    steady_but_small = decide("m", confirmation(1.21, 1.20, jitter=0.001), preset())  # 1 % faster, proven: too small
    assert (
        steady_but_small.status == "unchanged" and "not proven faster than the preset by 2%" in steady_but_small.summary
    )


def test_a_preset_that_got_slower_than_recorded_is_a_regression():
    outcome = decide("m", confirmation(1.01, 1.00), preset(ci_low=118.0))
    assert outcome.status == "regressed" and outcome.exit_code == 4


def test_a_race_whose_clock_moved_keeps_the_preset_and_calls_nothing_a_regression():
    moved = replace(confirmation(1.01, 1.00), machine_moved="the machine's speed moved during the race: ...")
    for standing in (preset(), preset(ci_low=118.0), None):  # a win, a regression, a first preset: none is believed
        outcome = decide("m", moved, standing)
        assert outcome.status == "unchanged" and outcome.new_winner is None
        assert "the machine's speed moved" in outcome.summary
        assert outcome.summary.endswith("preset kept" if standing else "no preset yet: the next night tunes it again")


def test_a_preset_whose_row_failed_is_kept_where_it_is_the_picks_command_and_is_never_called_gone():
    """A plain-command preset's row can fail a count check by noise; the pick (the plain command) measured
    that very command, so the preset stands. A failed preset of another command is said to have failed."""
    baseline = raced_row("none", "baseline", BASELINE_MS, argv=["llama-server", "-m", "t.gguf"])
    failed = replace(
        raced_row(
            "old",
            "preset",
            scaled(BASELINE_MS, 1.10, seed=2),
            baseline_ms=BASELINE_MS,
            argv=["llama-server", "-m", "t.gguf"],
        ),
        failure="a timing artefact",
    )
    race = RaceVerdict("server", "b1", 3, "2026-12-07", [baseline], [failed], pairing="prompt")
    kept = decide("m", race, preset(ci_low=None))
    assert kept.status == "unchanged" and kept.new_winner is None and kept.summary.endswith("; kept")
    other = replace(race, configs=[replace(failed, argv=["llama-server", "-m", "t.gguf", "--spec-type", "ngram-mod"])])
    replaced = decide("m", other, preset())
    assert (
        replaced.status == "improved" and "the preset failed in tonight's race (a timing artefact)" in replaced.summary
    )
    assert "files are gone" not in replaced.summary


def test_no_preset_yet_makes_the_winner_the_preset():
    outcome = decide("m", confirmation(1.30, 1.20), None)
    assert outcome.status == "improved"


NIGHTLY_SPACE = """
[model]
name = "tiny"
target = "tiny-target.gguf"
context_size = 512
[drafts.draft-simple]
file = "draft-{quant}.gguf"
quants = ["A", "B"]
[spec_types.draft-simple]
draft_n_max = [1, 4]
[spec_types.ngram-simple]
ngram_simple_size_n = [1, 3]
ngram_simple_size_m = [2, 8]
"""


#: the status each exit code of `autotune nightly` stands for, as docs/cli.md ("Exit codes") documents it; the
#: one line a night prints starts with it
NIGHT_STATUS = {0: "improved", 3: "unchanged", 4: "regressed"}


def nightly(space, models, allowed: tuple[int, ...]):
    """A measured night (the e2e objective cannot be predicted): a study version per set of files. Its exit
    code is one of `allowed`, and its one line on stdout says the status that code stands for."""
    result = CliRunner().invoke(
        cli,
        [
            "nightly",
            "--model",
            "tiny",
            "--space",
            str(space),
            "--models-dir",
            str(models),
            "--objective",
            "e2e",
            "--trials",
            "4",
            "--top",
            "2",
            "--race-budget",
            "2",
            "--max-tokens",
            "10",
            "--seed",
            "0",
            "--no-pruning",
        ],
    )
    assert result.exit_code in allowed, result.output
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"{NIGHT_STATUS[result.exit_code]}: tiny: "), result.output
    return result


@pytest.mark.slow
def test_new_draft_file_starts_a_warm_started_study_version(tmp_path, tiny_dir, autotune_home):
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_dir / "tiny-target.gguf", models)
    shutil.copy(tiny_dir / "tiny-draft.gguf", models / "draft-A.gguf")
    space = tmp_path / "tiny.toml"
    space.write_text(textwrap.dedent(NIGHTLY_SPACE))
    storage = f"sqlite:///{autotune_home / 'autotune.db'}"
    base = f"tiny@{hardware_key()}:python+e2e"

    first = nightly(space, models, (0,))
    assert first.stdout.startswith("improved: tiny: first preset")
    presets = json.loads(CliRunner().invoke(cli, ["presets", "list", "--json"]).stdout)
    assert [(p["model"], p["hardware"]) for p in presets] == [("tiny", hardware_key())]

    second = nightly(space, models, (3,))
    assert "no new or changed model files" in second.stdout

    tiny_gguf.write_qwen3_target(models / "draft-B.gguf", seed=2)  # a new draft is released
    # Which of two real configurations wins is a race, so 0 and 3 are both right. 4 is too: nothing the preset
    # runs changed, but "regressed" compares tonight's tok/s with the first night's interval, absolute
    # figures that a neighbour's load on the box moves between the two nights. Each is checked below by
    # what it must leave behind.
    third = nightly(space, models, (0, 3, 4))
    names = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    assert names == {base, f"{base}/v2"}
    v2 = optuna.load_study(study_name=f"{base}/v2", storage=storage)
    roles = [t.user_attrs.get("role") for t in v2.trials]
    assert roles[0] == "baseline" and "warm-start" in roles
    # the new version was started by the new file and samples from it; the first version never saw it
    new_pair = "draft-simple:tiny-target.gguf + draft-B.gguf"
    assert new_pair in v2.user_attrs["files"] and "draft-B.gguf" in v2.user_attrs["file_hashes"]
    v1 = optuna.load_study(study_name=base, storage=storage)
    assert new_pair not in v1.user_attrs["files"] and "draft-B.gguf" not in v1.user_attrs["file_hashes"]
    after = json.loads(CliRunner().invoke(cli, ["presets", "list", "--json"]).stdout)[0]
    confirmed = v2.user_attrs["confirmation"]
    current = next(c for c in confirmed["configs"] if c["role"] == "preset")
    if third.exit_code == 0:  # replaced only on a significant win over the preset measured alongside
        winner = max((c for c in confirmed["configs"] if c["role"] == "trial"), key=lambda c: c["mean_tok_s"])
        assert winner["mean_tok_s"] > current["mean_tok_s"] and after["study_name"] == f"{base}/v2"
    else:  # kept; a regression is the preset's own configuration measured below its recorded interval
        assert after == presets[0]
        assert third.exit_code == 3 or current["ci95"][1] < presets[0]["ci95_low"]


def test_a_night_where_nothing_speculative_completes_keeps_what_there_is(tmp_path, tiny_dir):
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_dir / "tiny-target.gguf", models)
    space = tmp_path / "tiny.toml"
    space.write_text(
        textwrap.dedent("""
        [model]
        name = "tiny"
        target = "tiny-target.gguf"
        context_size = 512
        [spec_types.ngram-simple]
        ngram_simple_size_n = 12
        ngram_simple_size_m = 48
    """)
    )
    result = nightly(space, models, (3,))
    assert "no speculative configuration completed" in result.stdout
