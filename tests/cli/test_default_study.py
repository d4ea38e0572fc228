"""Everything a user reads of a default (`--strategy predict`) study, end to end: `report`, `best`,
`best --json`, `best --by-category`, `trials` and `presets export`, with no traceback anywhere.

One real default search on the tiny models and a real llama-server (its --spec-default, ngram-mod with
n_min 48, can draft nothing in 24 tokens: an entrant that fails, every time), and studies of each race
outcome made from its real trials with a race whose decode times this module chose (autotune.testing.races):
a winner 1.30x as fast, the plain command (the fastest entrant 1.01x, which cannot reach the minimum
effect), and a budget spent (the fastest entrant 1.30x give or take 30%). Each output is checked against
those chosen figures, not against what the code under test computes from them."""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner, Result

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.study.catalog import study_name
from autotune.study.verdict import BUDGET_SPENT, NONE_CAN_WIN, WINNER, RacedConfig, RaceVerdict
from autotune.testing.races import raced_row, scaled
from autotune.testing.tiny_gguf import TINY_SPACE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

#: One prompt of each category is raced (--per-category 1, the default): the categories every
#: per-category output must show.
PROMPTS = [
    ("qa", "What is the capital of France?"),
    ("code", "def fibonacci(n):"),
    ("chat", "Hello! How are you today?"),
]
CATEGORIES = ["chat", "code", "qa"]
#: The chosen race: 2 rounds x 3 prompts of the plain command's decode times (ms).
BASELINE_MS = [[400.0, 500.0, 600.0], [410.0, 490.0, 610.0]]
SPEC_DEFAULT_FAILURE = "drafted nothing: speculation was inactive"
PLAIN_LINE = (
    "# the plain command: no configuration was proven faster than it by 2% on llama-server "
    "(2 rounds x 3 prompts, each prompt paired, 6 looks; {ended})"
)


@dataclass(frozen=True)
class Studies:
    storage: str
    real: optuna.Study
    out: Path  # where reports go


def run(*args: str, storage: str) -> Result:
    result = CliRunner().invoke(cli, [*args, "--storage", storage])
    assert result.exit_code == 0 and result.exception is None, (result.exception, result.output)
    assert "Traceback" not in result.output
    return result


@pytest.fixture(scope="module")
def studies(tmp_path_factory, tiny_dir) -> Studies:
    """The real default search, then a study per chosen race outcome made from its trials."""
    root = tmp_path_factory.mktemp("default-study")
    storage = f"sqlite:///{root / 'autotune.db'}"
    space, prompts = root / "tiny.toml", root / "prompts.jsonl"
    space.write_text(textwrap.dedent(TINY_SPACE.format(draft="tiny-draft.gguf")))
    prompts.write_text(
        "".join(json.dumps({"id": f"{c}-{i}", "category": c, "prompt": p}) + "\n" for i, (c, p) in enumerate(PROMPTS))
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AUTOTUNE_HOME", str(root / "home"))
        env.setenv("AUTOTUNE_LOCK_DIR", str(root / "locks"))
        run(
            "search",
            "--model",
            "tiny",
            "--space",
            str(space),
            "--models-dir",
            str(tiny_dir),
            "--prompts",
            str(prompts),
            "--max-tokens",
            "24",
            "--race-top",
            "2",
            "--race-budget",
            "2",
            storage=storage,
        )
    real = optuna.load_study(study_name=study_name("tiny", hardware_key(), "predicted"), storage=storage)
    for outcome in (WINNER, NONE_CAN_WIN, BUDGET_SPENT):
        _derive(real, storage, outcome)
    return Studies(storage, real, root / "reports")


MODELS = {WINNER: "tiny-winner", NONE_CAN_WIN: "tiny-plain", BUDGET_SPENT: "tiny-budget"}


def _derive(real: optuna.Study, storage: str, ended: str) -> None:
    """A study holding `real`'s trials and a race of the chosen outcome between its finalists: the first
    at the chosen speed, any other at 0.9x."""
    race = RaceVerdict.from_dict(real.user_attrs["confirmation"])
    first, *others = race.configs
    (baseline,) = race.baselines
    speed, jitter = {WINNER: (1.30, 0.0), NONE_CAN_WIN: (0.95, 0.0), BUDGET_SPENT: (1.30, 0.3)}[ended]

    def row(entrant: RacedConfig, decode_ms: list[list[float]], significant: bool = False) -> RacedConfig:
        made = raced_row(
            entrant.label,
            entrant.role,
            decode_ms,
            baseline_ms=BASELINE_MS,
            trial=entrant.trial,
            target=entrant.target,
            argv=entrant.argv,
            significant=significant,
        )
        return replace(made, family=entrant.family)

    chosen = replace(
        race,
        repeats=2,
        looks=6,
        ended=ended,
        machine_moved=None,
        decided_round=None,
        after_decision_round=None,
        baselines=[
            replace(
                raced_row(
                    "none", "baseline", BASELINE_MS, trial=baseline.trial, target=baseline.target, argv=baseline.argv
                )
            )
        ],
        configs=[
            row(first, scaled(BASELINE_MS, speed, jitter, seed=3), significant=ended == WINNER),
            *(row(other, scaled(BASELINE_MS, 0.9)) for other in others),
        ],
    )
    study = optuna.create_study(
        storage=storage, study_name=study_name(MODELS[ended], hardware_key(), "predicted"), direction="maximize"
    )
    for key, value in real.user_attrs.items():
        study.set_user_attr(key, chosen.as_dict() if key == "confirmation" else value)
    study.add_trials(real.trials)


def race_rows(studies: Studies) -> tuple[RacedConfig, RacedConfig]:
    """The real race's baseline and first finalist: what every chosen race raced."""
    race = RaceVerdict.from_dict(studies.real.user_attrs["confirmation"])
    return race.baselines[0], race.configs[0]


def printed_interval(line: str) -> tuple[float, float]:
    """The `[95% CI a-b]` bounds a line prints."""
    low, high = re.search(r"\[95% CI (\d+\.\d+)-(\d+\.\d+)\]", line).groups()
    return float(low), float(high)


def categories_of(text: str) -> dict[str, str]:
    """`best --by-category`'s lines: category -> its speedup as printed."""
    return dict(re.findall(r"^#   (\w+)\s+(\d+\.\d\dx) ", text, flags=re.M))


# -- the real default search ------------------------------------------------------------------------


def test_the_real_search_says_its_failed_entrant_in_best_json_and_the_report(studies):
    text = run("best", "--model", "tiny", storage=studies.storage).stdout
    assert f"# llama.cpp's --spec-default left the race: {SPEC_DEFAULT_FAILURE}" in text.splitlines()
    found = json.loads(run("best", "--model", "tiny", "--json", storage=studies.storage).stdout)
    (spec_default,) = found["race"]["spec_defaults"]
    assert spec_default["failure"] == SPEC_DEFAULT_FAILURE and found["race"]["spec_default"] is None
    written = run("report", "--model", "tiny", "--out", str(studies.out / "real"), storage=studies.storage).stdout
    index = Path(written.splitlines()[0])
    assert index.name == "index.html" and all(Path(p).is_file() for p in written.splitlines())
    assert f"--spec-default (ngram-mod n_match=24 n_max=64 n_min=48): {SPEC_DEFAULT_FAILURE}" in index.read_text()


def test_trials_lists_every_trial_of_the_real_search(studies):
    rows = json.loads(run("trials", "--model", "tiny", "--json", storage=studies.storage).stdout)
    assert [r["number"] for r in rows] == list(range(len(studies.real.trials)))
    assert [rows[0]["role"], rows[1]["role"]] == ["baseline", "spec-default"]
    text = run("trials", "--model", "tiny", storage=studies.storage).stdout.splitlines()
    assert len(text) == 1 + len(rows) and "pred" in text[0]


# -- each outcome ----------------------------------------------------------------------------------


@pytest.mark.parametrize("ended", [WINNER, NONE_CAN_WIN, BUDGET_SPENT])
def test_report_draws_every_outcome_without_a_traceback(studies, ended):
    written = run(
        "report", "--model", MODELS[ended], "--out", str(studies.out / MODELS[ended]), storage=studies.storage
    ).stdout.splitlines()
    assert Path(written[0]).name == "index.html" and len(written) >= 3  # the page and its PNG figures
    assert all(Path(p).stat().st_size > 0 for p in written)
    assert f"{ended}, " in Path(written[0]).read_text()  # the summary's race row says how it ended


def test_a_winner_is_printed_with_its_chosen_speedup(studies):
    baseline, first = race_rows(studies)
    lines = run("best", "--model", MODELS[WINNER], storage=studies.storage).stdout.splitlines()
    assert shlex.split(lines[0]) == first.argv
    assert lines[1].startswith("# 1.30x the plain command's speed [95% CI ")
    low, high = printed_interval(lines[1])  # 6 units: the instance term keeps it wide however alike they are
    assert 1.15 < low < 1.30 < high < 1.45
    assert lines[1].endswith(", 2 rounds x 3 prompts, each prompt paired, 6 looks)")
    found = json.loads(run("best", "--model", MODELS[WINNER], "--json", storage=studies.storage).stdout)
    assert found["trial"] == first.trial and found["argv"] == first.argv
    assert found["race"]["ended"] == WINNER and found["race"]["pick"]["label"] == first.label
    assert set(found["by_category"]) == {"pick"}
    by_category = run("best", "--model", MODELS[WINNER], "--by-category", storage=studies.storage).stdout
    assert f"# the pick, {first.label}: speedup by category [95% CI], predicted" in by_category.splitlines()
    assert categories_of(by_category) == {category: "1.30x" for category in CATEGORIES}


@pytest.mark.parametrize("ended", [NONE_CAN_WIN, BUDGET_SPENT])
def test_a_plain_pick_prints_the_plain_command_and_where_the_fastest_entrant_won_and_lost(studies, ended):
    baseline, first = race_rows(studies)
    lines = run("best", "--model", MODELS[ended], storage=studies.storage).stdout.splitlines()
    assert shlex.split(lines[0]) == baseline.argv
    assert lines[1] == PLAIN_LINE.format(ended=ended)
    assert lines[2].startswith(f"# the fastest, {first.label}, ran ")
    found = json.loads(run("best", "--model", MODELS[ended], "--json", storage=studies.storage).stdout)
    assert found["trial"] == baseline.trial and found["params"]["spec_type"] == "none"
    assert found["race"]["ended"] == ended and found["race"]["pick"]["role"] == "baseline"
    assert found["race"]["rounds"] == 2 and not any(row["significant"] for row in found["race"]["finalists"])
    assert found["by_category"]["fastest"]["label"] == first.label
    assert sorted(found["by_category"]["fastest"]["categories"]) == CATEGORIES
    by_category = run("best", "--model", MODELS[ended], "--by-category", storage=studies.storage).stdout
    assert (
        f"# the plain command is the pick; the fastest entrant, {first.label}: speedup by category [95% CI], predicted"
    ) in by_category.splitlines()
    assert sorted(categories_of(by_category)) == CATEGORIES


def test_an_entrant_that_cannot_reach_the_minimum_effect_is_said_so_with_its_figures(studies):
    _, first = race_rows(studies)
    lines = run("best", "--model", MODELS[NONE_CAN_WIN], storage=studies.storage).stdout.splitlines()
    assert lines[2].startswith(f"# the fastest, {first.label}, ran 0.95x [95% CI ")
    assert printed_interval(lines[2])[1] < 1.02
    assert lines[2].endswith("its whole interval lies below the minimum effect (1.02x): no longer race would pick it")
    by_category = run("best", "--model", MODELS[NONE_CAN_WIN], "--by-category", storage=studies.storage).stdout
    assert categories_of(by_category) == {category: "0.95x" for category in CATEGORIES}


# -- presets export --------------------------------------------------------------------------------


def test_a_default_nightly_makes_the_preset_every_export_writes(tmp_path, tiny_dir, studies):
    """`nightly`'s first night on the default strategy stores its pick as the preset (exit 0, 'first
    preset'); json, toml and sh exports all carry that pick's command."""
    space = tmp_path / "tiny.toml"
    space.write_text(textwrap.dedent(TINY_SPACE.format(draft="tiny-draft.gguf")))
    storage = f"sqlite:///{tmp_path / 'night.db'}"
    night = CliRunner().invoke(
        cli,
        [
            "nightly",
            "--model",
            "tiny",
            "--space",
            str(space),
            "--models-dir",
            str(tiny_dir),
            "--max-tokens",
            "24",
            "--top",
            "2",
            "--race-budget",
            "2",
            "--storage",
            storage,
        ],
    )
    assert night.exit_code == 0, (night.exception, night.output)
    assert night.stdout.startswith("improved: tiny: first preset")
    command = run("best", "--model", "tiny", storage=storage).stdout.splitlines()[0]
    (exported,) = json.loads(run("presets", "export", "--format", "json", storage=storage).stdout)
    assert exported["command"] == command and exported["model"] == "tiny"
    assert f'command = "{command}"' in run("presets", "export", "--format", "toml", storage=storage).stdout
    assert command in run("presets", "export", "--format", "sh", storage=storage).stdout
