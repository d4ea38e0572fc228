"""`autotune report` end to end: a real search on the tiny GGUFs, confirmed on the in-process engine,
studies with failed and pruned trials and a pareto study made from its real trials, and the page
opened in a real headless Chromium."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape
from pathlib import Path

import matplotlib.image
import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines import create_engine
from autotune.hardware import hardware_key
from autotune.race.confirm import confirm
from autotune.race.race import RaceBudget
from autotune.spec.command import ServerCommand
from autotune.study.catalog import study_name
from autotune.testing.browser import find_chromium, headless_chromium
from autotune.testing.tiny_gguf import TINY_SPEC_TYPES, tiny_space

TrialState = optuna.trial.TrialState
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

#: the tiny space with ngram-simple's n in [1, 2]
SPACE = tiny_space(
    spec_types={**TINY_SPEC_TYPES, "ngram-simple": {**TINY_SPEC_TYPES["ngram-simple"], "ngram_simple_size_n": (1, 2)}}
)


@dataclass(frozen=True)
class Reports:
    storage: str
    search: optuna.Study
    pages: dict[str, tuple[Path, list[Path]]]  # study kind -> (index.html, PNG files), as the CLI printed them


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def reports(tmp_path_factory, tiny_dir) -> Reports:
    """One real search (confirmed on the python engine), studies derived from its real trials, and the
    report of each, written by the CLI."""
    root = tmp_path_factory.mktemp("report")
    storage = f"sqlite:///{root / 'autotune.db'}"
    space = root / "tiny.toml"
    space.write_text(SPACE)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AUTOTUNE_HOME", str(root / "home"))
        for var in ("AUTOTUNE_STORAGE", "AUTOTUNE_MODELS_DIR", "AUTOTUNE_DEBUG"):
            env.delenv(var, raising=False)
        searched = run(
            "search",
            "--strategy",
            "measure",
            "--model",
            "tiny",
            "--space",
            str(space),
            "--models-dir",
            str(tiny_dir),
            "--max-tokens",
            "8",
            "--trials",
            "8",
            "--seed",
            "1",
            "--no-pruning",
            "--baseline-every",
            "0",
            "--no-confirm",
            "--threads",
            "1",
            "--storage",
            storage,
        )
        assert searched.exit_code == 0, searched.output
        study = optuna.load_study(study_name=study_name("tiny", hardware_key(), "python"), storage=storage)
        with create_engine("python", context_size=512, threads=1) as engine:
            confirm(study, engine, top=2, budget=RaceBudget(rounds=2), command=ServerCommand(512))
        _derive_studies(study, storage)
        pages = {}
        for kind, args in {
            "search": ("--model", "tiny", "--objective", "decode"),
            "mixed": ("--model", "tiny-mixed"),
            "pareto": ("--model", "tiny", "--objective", "pareto"),
            "equal": ("--model", "tiny-equal"),
        }.items():
            out = root / f"report-{kind}"
            result = run("report", *args, "--storage", storage, "--out", str(out))
            assert result.exit_code == 0, result.output
            written = [Path(line) for line in result.stdout.splitlines()]
            pages[kind] = (written[0], written[1:])
    return Reports(storage, optuna.load_study(study_name=study.study_name, storage=storage), pages)


def _derive_studies(study: optuna.Study, storage: str) -> None:
    """From the search's real trials: `tiny-mixed` adds a re-measured baseline (a drift check), a failed
    and a pruned trial; the pareto study scores them on (decode tok/s, prompt tok/s); `tiny-empty` holds
    nothing; `tiny-failed` only FAILs."""
    hw = hardware_key()
    trials = study.get_trials()
    speculative = next(t for t in trials if t.state == TrialState.COMPLETE and t.params)
    broken = {k: v for k, v in speculative.user_attrs.items() if k not in ("figures", "per_prompt", "per_category")}

    def unfinished(state: TrialState, reason_attr: str, reason: str) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            state=state,
            params=speculative.params,
            distributions=speculative.distributions,
            user_attrs={**broken, reason_attr: reason},
            intermediate_values={0: 1.0} if state == TrialState.PRUNED else None,
        )

    mixed = optuna.create_study(
        storage=storage, study_name=study_name("tiny-mixed", hw, "python"), direction="maximize"
    )
    for key, value in study.user_attrs.items():
        mixed.set_user_attr(key, value)
    baseline = trials[0]
    drift_check = optuna.trial.create_trial(
        state=TrialState.COMPLETE,
        value=baseline.value * 0.9,
        params={},
        distributions={},
        user_attrs={**baseline.user_attrs, "drift_check": True, "drift": 0.9},
    )
    mixed.add_trials([*trials[:4], drift_check, *trials[4:]])
    mixed.add_trial(unfinished(TrialState.FAIL, "fail_reason", "llama-server crashed: out of memory"))
    mixed.add_trial(
        unfinished(TrialState.PRUNED, "prune_reason", "significantly slower than the best trial after 1 prompts")
    )

    pareto = optuna.create_study(
        storage=storage,
        study_name=study_name("tiny", hw, "python", objective="pareto"),
        directions=["maximize", "maximize"],
    )
    for key, value in study.user_attrs.items():
        if key != "confirmation":
            pareto.set_user_attr(key, value)
    pareto.set_user_attr("objective", "pareto")
    for trial in trials:
        figures = trial.user_attrs.get("figures")
        values = [figures["mix_tok_s"], figures["prompt_tok_s"]] if trial.state == TrialState.COMPLETE else None
        pareto.add_trial(
            optuna.trial.create_trial(
                state=trial.state,
                values=values,
                params=trial.params,
                distributions=trial.distributions,
                user_attrs=trial.user_attrs,
            )
        )

    equal = optuna.create_study(
        storage=storage, study_name=study_name("tiny-equal", hw, "python"), direction="maximize"
    )
    equal.add_trial(baseline)
    for value in EQUAL_VALUES:  # one spec type whose rounded interval lies a hair below its mean
        equal.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE,
                value=value,
                params=speculative.params,
                distributions=speculative.distributions,
                user_attrs=speculative.user_attrs,
            )
        )

    optuna.create_study(storage=storage, study_name=study_name("tiny-empty", hw, "python"))
    failed = optuna.create_study(storage=storage, study_name=study_name("tiny-failed", hw, "python"))
    failed.add_trial(unfinished(TrialState.FAIL, "fail_reason", "llama-server would not start"))


#: Three tok/s figures that spread by 1e-9: their 95% interval, rounded to 3 decimals, is 50.000-50.000, and
#: their mean 50.0004 lies outside it (matplotlib refused the negative error bar: 'yerr' must not ...).
EQUAL_VALUES = (50.0004, 50.0004, 50.0004 + 1e-9)


def picked_row(html: str) -> int:
    """The trial number of the top table's highlighted row (what `autotune best` prints)."""
    (number,) = re.findall(r'<tr class="picked[^"]*" data-trial="(\d+)"', html)
    return int(number)


def check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 10_000, f"{path}: {len(data)} bytes"
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300, pixels.shape
    assert pixels.std() > 0.01, f"{path} is blank"


def test_report_writes_an_offline_page_and_the_same_figures_as_png(reports):
    index, pngs = reports.pages["search"]
    assert index.name == "index.html" and index.is_file()
    names = {p.stem for p in pngs}
    assert {"history", "spec-types", "by-draft-n-max", "category-speedup", "acceptance", "importance"} <= names
    assert "pareto" not in names  # a single-objective study has no front
    for png in pngs:
        check_png(png)
    html = index.read_text()
    assert html.count("Plotly.newPlot(") == len(pngs)  # each PNG is one of the page's figures
    assert html.count("* plotly.js v") == 1  # inlined once
    assert "<script src=" not in html and "<link" not in html and "@import" not in html


def test_the_top_table_has_command_lines_confirmed_figures_and_provenance(reports, confirmed_pick):
    html = reports.pages["search"][0].read_text()
    study = reports.search
    raced = confirmed_pick(study.user_attrs["confirmation"])  # None: the plain command, trial 0
    picked = study.trials[raced["trial"] if raced else 0]
    assert picked_row(html) == picked.number
    assert escape(picked.user_attrs["llama_cpp_build"]) in html
    for sha in picked.user_attrs["model_files"].values():
        assert sha in html
    assert "llama-server -m " in html
    assert "95% CI" in html  # `confirm` ran: its figures are in the table
    assert html.count("data-trial-detail=") >= 2


def test_an_interval_that_misses_its_mean_is_drawn_without_its_bar_and_said(reports):
    index, pngs = reports.pages["equal"]
    for png in pngs:
        check_png(png)
    html = index.read_text()
    drawn_without = [
        line for line in re.findall(r'<p class="caption">([^<]*)</p>', html) if "without an error bar" in line
    ]
    assert len(drawn_without) == 1  # the spec-type figure; the baseline's single trial has no interval at all
    assert drawn_without[0].endswith(
        "Drawn without an error bar, as its interval does not contain its mean: "
        f"{escape(equal_spec_type(reports))} (mean 50.000, interval 50.000-50.000)."
    )


def equal_spec_type(reports: Reports) -> str:
    """The spec type of the trial tiny-equal copies (the search's first completed speculative trial)."""
    trial = next(t for t in reports.search.trials if t.state == TrialState.COMPLETE and t.params)
    return trial.user_attrs["config"]["spec_type"]


def test_failed_and_pruned_trials_are_shown_not_hidden(reports):
    html = reports.pages["mixed"][0].read_text()
    assert "llama-server crashed: out of memory" in html
    assert "significantly slower than the best trial after 1 prompts" in html
    mixed = optuna.load_study(study_name=study_name("tiny-mixed", hardware_key(), "python"), storage=reports.storage)
    failed = sum(t.state == TrialState.FAIL for t in mixed.trials)
    assert f"{failed} failed, 1 pruned" in html  # counted in the summary
    assert '"failed (no figure)"' in html and '"pruned (no figure)"' in html  # marked in the history
    for png in reports.pages["mixed"][1]:
        check_png(png)


def test_a_pareto_study_draws_its_front_and_the_pick(reports):
    index, pngs = reports.pages["pareto"]
    assert "pareto" in {p.stem for p in pngs}
    check_png(next(p for p in pngs if p.stem == "pareto"))
    html = index.read_text()
    assert "pareto: decode tok/s and prompt tok/s" in html
    study = optuna.load_study(
        study_name=study_name("tiny", hardware_key(), "python", objective="pareto"), storage=reports.storage
    )
    assert picked_row(html) == pareto_pick(study).number


def pareto_pick(study: optuna.Study) -> optuna.trial.FrozenTrial:
    """`best`'s rule on a pareto study, written out: of the completed trials no other beats on both decode
    and prompt tok/s, the lossless one with the highest end-to-end tok/s."""
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    front = [
        t
        for t in complete
        if not any(o.values[0] >= t.values[0] and o.values[1] >= t.values[1] and o.values != t.values for o in complete)
    ]
    lossless = [t for t in front if t.user_attrs.get("lossless") is not False]
    assert lossless, "every trial on the front lost the baseline's output: pick the study again"
    return max(lossless, key=lambda t: t.user_attrs["figures"]["e2e_tok_s"])


@pytest.mark.parametrize(
    "model, message",
    [
        ("nope", "no study named"),
        ("tiny-empty", "has no completed trial"),
        ("tiny-failed", "has no completed trial"),
    ],
)
def test_an_empty_or_unknown_study_is_one_line_and_exit_2(reports, tmp_path, model, message):
    result = run("report", "--model", model, "--storage", reports.storage, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr and result.stderr.startswith("autotune: error:")
    assert not (tmp_path / "out" / "index.html").exists()


FIGURES_JS = """
return Array.from(document.querySelectorAll('[data-figure]')).map(el => {
  const plot = el.querySelector('.js-plotly-plot');
  return {slug: el.dataset.figure,
          drawn: !!(plot && plot._fullLayout && plot.querySelector('svg.main-svg')),
          marks: plot ? plot.querySelectorAll('path.point, path.js-line, .bars path').length : 0,
          traces: plot && plot.data ? plot.data.map(t => t.name || '') : []};
});
"""
ALL_DRAWN_JS = f"const figures = (() => {{ {FIGURES_JS} }})();\nreturn figures.length && figures.every(f => f.drawn) ? figures : null;"


@pytest.mark.skipif(
    find_chromium() is None, reason="needs chromium and chromium-driver (apt-get install chromium chromium-driver)"
)
def test_every_figure_renders_in_headless_chromium_without_console_errors(reports, tmp_path):
    ARTIFACTS.mkdir(exist_ok=True)
    with headless_chromium(tmp_path / "chromium-profile") as browser:
        for kind in ("mixed", "pareto"):
            index, pngs = reports.pages[kind]
            browser.open(index.resolve().as_uri())
            figures = browser.wait_for(ALL_DRAWN_JS, timeout_s=30) or browser.script(FIGURES_JS)
            browser.screenshot(ARTIFACTS / f"report-{kind}.png")
            by_slug = {f["slug"]: f for f in figures}
            assert set(by_slug) == {p.stem for p in pngs}, kind  # the page shows every figure written as PNG
            for figure in by_slug.values():
                assert figure["drawn"] and figure["marks"] > 0, (kind, figure)
            errors = [entry for entry in browser.console() if entry["level"] in ("SEVERE", "ERROR")]
            assert not errors, errors
            fetched = [url for url in browser.requested_urls() if not url.startswith(("chrome:", "data:", "blob:"))]
            assert fetched == [index.resolve().as_uri()], fetched  # nothing but the page itself
            if kind == "mixed":
                assert {"failed (no figure)", "pruned (no figure)"} <= set(by_slug["history"]["traces"])
            else:
                assert "chosen" in by_slug["pareto"]["traces"]
    check_png(ARTIFACTS / "report-mixed.png")
