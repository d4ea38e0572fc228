"""llama.cpp's `--spec-default` is the second reference of every study: measured beside the baseline,
re-measured at each drift check, confirmed with the finalists, and reported against by `best`."""

from __future__ import annotations

import json
import re

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines.python import PythonEngine
from autotune.hardware import hardware_key
from autotune.search.inputs import SearchOptions, SearchSettings, check_inputs, runnable_space
from autotune.search.measured import Tuner
from autotune.study.best import best_result
from autotune.study.verdict import RacedConfig, RaceVerdict
from autotune.testing.races import raced_row, scaled
from autotune.testing.reporter import KeptNotes
from storage import open_storage, resolve_storage_url

#: llama.cpp's --spec-default (common/arg.cpp): ngram-mod, n-match 24, n-max 64, n-min 48, spelled out
SPEC_DEFAULT_FLAGS = [
    "--spec-type",
    "ngram-mod",
    "--spec-ngram-mod-n-match",
    "24",
    "--spec-ngram-mod-n-max",
    "64",
    "--spec-ngram-mod-n-min",
    "48",
]
SPEC_DEFAULT_STORED = {"ngram_mod_n_match": 24, "ngram_mod_n_min": 48, "ngram_mod_n_max": 64}

#: a passage given twice, the second copy begun: ngram-mod's 24-token match finds the first copy, so
#: --spec-default drafts (its 48-token minimum is there to copy) and Gemma, which continues the copy, accepts
PASSAGE = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a can of oil, a box of "
    "matches and a small notebook in which he wrote the colour of the sky, the height of the waves and the "
    "names of the ships that passed the point. In forty years he never missed a night, and the notebooks, "
    "stacked in the cellar of the tower, became the only record of the harbour's traffic that survived the "
    "fire which destroyed the town hall and its archives."
)
COPY_PROMPT = f"Passage:\n\n{PASSAGE}\n\nThe same passage, copied word for word:\n\n{PASSAGE[:160]}"

GEMMA_SPACE = """
[model]
name = "gemma-copy"
target = "{target}"
context_size = 1024

[spec_types.ngram-simple]
ngram_simple_size_n = [1, 3]
ngram_simple_size_m = [2, 8]
"""


def run(*args: str):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result


def server_study(tiny_space, models_dir, autotune_home, *extra) -> optuna.Study:
    run(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--engine",
        "server",
        "--max-tokens",
        "8",
        "--per-category",
        "1",
        "--no-confirm",
        *extra,
    )
    storage = f"sqlite:///{autotune_home / 'autotune.db'}"
    return optuna.load_study(study_name=f"tiny@{hardware_key()}:server", storage=storage)


@pytest.fixture
def gemma_copy_study(gemma_path, tmp_path, autotune_home) -> optuna.Study:
    """A server-engine study of the real Gemma 3 270M on the copy prompt: 3 trials, a drift check after each
    searched one (so --spec-default is measured twice)."""
    models = tmp_path / "gemma-models"
    models.mkdir()
    (models / gemma_path.name).symlink_to(gemma_path)
    space = tmp_path / "gemma-copy.toml"
    space.write_text(GEMMA_SPACE.format(target=gemma_path.name))
    prompts = tmp_path / "copy.jsonl"
    prompts.write_text(json.dumps({"id": "copy", "category": "copy", "prompt": COPY_PROMPT}) + "\n")
    run(
        "search",
        "--strategy",
        "measure",
        "--model",
        "gemma-copy",
        "--space",
        str(space),
        "--models-dir",
        str(models),
        "--engine",
        "server",
        "--prompts",
        str(prompts),
        "--max-tokens",
        "8",
        "--no-confirm",
        "--trials",
        "3",
        "--baseline-every",
        "1",
        "--seed",
        "1",
    )
    storage = f"sqlite:///{autotune_home / 'autotune.db'}"
    return optuna.load_study(study_name=f"gemma-copy@{hardware_key()}:server", storage=storage)


@pytest.mark.slow
def test_spec_default_is_measured_after_the_baseline_again_at_each_drift_check_and_reported_by_best(gemma_copy_study):
    trials = gemma_copy_study.get_trials()
    roles = [t.user_attrs.get("role") for t in trials]
    assert roles[:2] == ["baseline", "spec-default"]
    spec_defaults = [t for t in trials if t.user_attrs.get("role") == "spec-default"]
    assert len(spec_defaults) >= 2 and all(t.user_attrs.get("drift_check") for t in spec_defaults[1:])
    for trial in spec_defaults:
        assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs.get("fail_reason")
        assert trial.user_attrs["argv"][-len(SPEC_DEFAULT_FLAGS) :] == SPEC_DEFAULT_FLAGS
        config = trial.user_attrs["config"]
        assert (config["spec_type"], config["params"]) == ("ngram-mod", SPEC_DEFAULT_STORED)
        # llama-server's own counts: the reference really ran llama.cpp's default, and Gemma kept copying
        figures = trial.user_attrs["figures"]
        assert figures["n_drafted"] > 0 and figures["n_accepted"] > 0, figures
        # its speedup is over the baseline measured last before it (the drift check's own, after the first)
        baseline = [t for t in trials if t.user_attrs.get("role") == "baseline" and t.number < trial.number][-1]
        assert trial.user_attrs["speedup"] == pytest.approx(
            figures["mix_tok_s"] / baseline.user_attrs["figures"]["mix_tok_s"], rel=1e-3
        )
    # neither drift checks nor the --spec-default reference count against --trials
    counted = [t for t in trials if not t.user_attrs.get("drift_check") and t.user_attrs.get("role") != "spec-default"]
    assert len(counted) == 3 and counted[0].user_attrs["role"] == "baseline"

    best = json.loads(run("best", "--model", "gemma-copy", "--json").stdout)
    chosen = next(t for t in trials if t.number == best["trial"])
    nearest = [t for t in spec_defaults if t.number <= chosen.number] or spec_defaults[:1]  # else the first after
    assert best["spec_default_tok_s"] == pytest.approx(nearest[-1].user_attrs["figures"]["mix_tok_s"], abs=1e-3)
    assert best["speedup_vs_spec_default"] == pytest.approx(
        best["speedup"] / nearest[-1].user_attrs["speedup"], rel=1e-3
    )
    assert "--spec-default" in run("best", "--model", "gemma-copy").stdout


@pytest.mark.slow
def test_the_confirmation_measures_spec_default_in_the_same_rounds(tiny_space, models_dir, autotune_home):
    study = server_study(tiny_space, models_dir, autotune_home, "--trials", "4", "--seed", "2", "--no-pruning")
    # the tiny model's random output has no 24-token repeat, so --spec-default drafts nothing here: a reference
    # is kept all the same in the study, never failed as inactive speculation (a searched configuration would be)
    reference = next(t for t in study.trials if t.user_attrs.get("role") == "spec-default")
    assert reference.state == optuna.trial.TrialState.COMPLETE, reference.user_attrs.get("fail_reason")
    assert reference.user_attrs["figures"]["n_drafted"] == 0
    result = run("confirm", "--model", "tiny", "--top", "1", "--repeats", "2")
    assert "--spec-default" in result.output
    # measured in the first round with the others; drafting nothing there too, it cannot be the winner
    (row,) = optuna.load_study(
        study_name=study.study_name, storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    ).user_attrs["confirmation"]["spec_defaults"]
    assert row["trial"] == reference.number
    assert row["failure"].startswith("drafted nothing: speculation was inactive")
    best = json.loads(run("best", "--model", "tiny", "--json").stdout)
    assert best["confirmed"]["spec_default_tok_s"] is None and best["trial"] != reference.number


BASELINE_MS = [[900.0, 1100.0, 1000.0, 950.0]] * 2  # 2 rounds x 4 prompts, 47 tokens each: 47 tok/s


def _row(role: str, trial: int | None, speed: float, *, proven: bool, jitter: float = 0.0) -> RacedConfig:
    """A race row `speed` times as fast as the baseline, `proven` by the race's rule or not."""
    if role == "baseline":
        return raced_row(role, role, BASELINE_MS, trial=trial, target="/m/t.gguf", argv=["llama-server"])
    return raced_row(
        role,
        role,
        scaled(BASELINE_MS, speed, jitter, seed=trial or 0),
        baseline_ms=BASELINE_MS,
        trial=trial,
        target="/m/t.gguf",
        argv=["llama-server"],
        significant=proven,
    )


def test_spec_default_is_the_winner_when_it_is_proven_fastest():
    confirmation = RaceVerdict(
        "server",
        "b1",
        2,
        "2026-12-03",
        [_row("baseline", None, 1.0, proven=False)],
        [_row("trial", 5, 1.2, proven=True)],
        [_row("spec-default", 1, 1.4, proven=True)],
        pairing="prompt",
    )
    assert confirmation.winner.role == "spec-default" and confirmation.pick is confirmation.winner
    assert confirmation.speedup_vs_spec_default(confirmation.configs[0]) == pytest.approx(1.2 / 1.4, rel=1e-3)
    restored = RaceVerdict.from_dict(confirmation.as_dict())
    assert restored == confirmation
    older = {k: v for k, v in confirmation.as_dict().items() if k != "spec_defaults"}  # stored before this reference
    assert RaceVerdict.from_dict(older).spec_defaults == []


def test_a_faster_row_the_race_did_not_prove_never_wins_and_with_none_the_plain_command_does():
    baseline = _row("baseline", None, 1.0, proven=False)
    noisy = _row("trial", 5, 1.4, proven=False, jitter=0.4)
    steady = _row("trial", 6, 1.2, proven=True)
    confirmation = RaceVerdict("server", "b1", 3, "2026-12-03", [baseline], [noisy, steady])
    assert confirmation.fastest is noisy and confirmation.winner is steady
    alone = RaceVerdict("server", "b1", 3, "2026-12-03", [baseline], [noisy])
    assert alone.winner is None and alone.pick is baseline


class _EngineWithoutNgramMod(PythonEngine):
    """The real in-process engine, told it cannot run ngram-mod (as an engine or binary without it)."""

    @property
    def runnable_spec_types(self) -> frozenset[str]:
        return super().runnable_spec_types - {"ngram-mod"}


@pytest.mark.slow
def test_an_engine_without_ngram_mod_says_once_that_the_study_has_no_spec_default(tiny_space, models_dir):
    options = SearchOptions(
        SearchSettings("tiny", trials=2, max_tokens=4, seed=0),
        engine_name="python",
        models_dir=models_dir,
        space_file=tiny_space,
    )
    notes = KeptNotes()
    inputs = check_inputs(options, notes.note)
    storage = open_storage(resolve_storage_url(None))
    with _EngineWithoutNgramMod(context_size=512) as engine:
        space = runnable_space(inputs.space, engine, inputs.candidates, notes)
        for _ in range(2):  # a resumed study does not say it again
            study = Tuner(
                space, inputs.candidates, inputs.mix.take(per_category=1), engine, options.settings, notes
            ).run(storage)
    assert [line for line in notes.lines if "--spec-default" in line] == [
        "the python engine cannot run ngram-mod, what llama.cpp's --spec-default turns on: this study has no "
        "--spec-default reference"
    ]
    assert not [t for t in study.trials if t.user_attrs.get("role") == "spec-default"]
    assert best_result(study).spec_default is None


def _stored_trial(role: str | None, label: str, tok_s: float, speedup: float) -> optuna.trial.FrozenTrial:
    config = {
        "target": "/m/t.gguf",
        "label": label,
        "spec_type": "ngram-mod" if role != "baseline" else "none",
        "params": {},
    }
    attrs = {
        "config": config,
        "argv": ["llama-server", "-m", "/m/t.gguf", label],
        "figures": {"mix_tok_s": tok_s},
        "engine": "python",
        "speedup": speedup,
        "lossless": True,
        **({"role": role} if role else {}),
    }
    return optuna.trial.create_trial(value=tok_s, user_attrs=attrs)


def test_a_winning_spec_default_is_named_as_such_with_the_best_searched_configuration_beside_it():
    from autotune.cli.output import best_text

    study = optuna.create_study(direction="maximize")
    for trial in (
        _stored_trial("baseline", "none", 50.0, 1.0),
        _stored_trial("spec-default", "--spec-default", 66.0, 1.32),
        _stored_trial(None, "ngram-map-k", 63.0, 1.26),
    ):
        study.add_trial(trial)
    confirmation = RaceVerdict(
        "server",
        "b1",
        2,
        "2026-12-03",
        [_row("baseline", 0, 1.0, proven=False)],
        [_row("trial", 2, 1.2, proven=True)],
        [_row("spec-default", 1, 1.44, proven=True)],
        pairing="prompt",
    )
    study.set_user_attr("confirmation", confirmation.as_dict())
    lines = best_text(best_result(study)).splitlines()
    assert lines[0].endswith("--spec-default")  # trial 1's command
    assert lines[1].startswith("# 1.44x the plain command's speed [95% CI ")
    assert re.match(
        r"# this is llama.cpp's --spec-default; the fastest searched configuration \(trial\) ran 1.20x "
        r"\[95% CI 1\.1\d-1\.2\d\] in the same rounds$",
        lines[2],
    ), lines[2]
    assert not any("this command runs" in line for line in lines)  # no ratio of the default over itself
