"""Concurrent streams (`--concurrency N`), runtime flags in the search space (`[runtime]`), serving
objectives and presets per load: on a real llama-server with tiny GGUF models, real SQLite, no mocks."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import llama_cpp
import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.engines.server_requests import stream_order
from autotune.errors import SearchSpaceError
from autotune.hardware import hardware_key
from autotune.llamacpp.runtime import server_default_threads
from autotune.measure.prompts import Prompt, PromptMix
from autotune.presets.export import export_presets
from autotune.spec.command import server_argv
from autotune.spec.config import SpecConfig
from autotune.spec.space import load_space
from autotune.study.catalog import study_name
from autotune.testing import tiny_gguf
from storage.presets import Preset, PresetStore

pytestmark = pytest.mark.usefixtures("no_server_left_behind")

MIX = PromptMix(
    "test",
    (
        Prompt("a", "qa", "The quick brown fox jumps over the lazy dog and the quick brown fox runs."),
        Prompt("b", "rag", "Hello, world! This is a test prompt. Hello, world! This is a test prompt."),
        Prompt("c", "code", "def f(x): return x + 1\ndef g(x): return f(x) * 2\n"),
    ),
)
NGRAM = {"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("conc-models") / "target.gguf"
    tiny_gguf.write_qwen3_target(path)
    return path


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def autotune(*args: str, home) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOTUNE_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], env=env, capture_output=True, text=True, timeout=300
    )


def assert_one_line_usage_error(done, *needles):
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.strip().splitlines() if line.startswith("autotune: error:")]
    assert len(errors) == 1 and done.stderr.strip().endswith(errors[0]), done.stderr  # notes may come before it
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in errors[0]


def assert_no_study(home: Path):
    db = home / "autotune.db"
    if db.exists():
        tables = {r[0] for r in sqlite3.connect(db).execute("select name from sqlite_master where type='table'")}
        if "studies" in tables:
            assert sqlite3.connect(db).execute("select count(*) from studies").fetchone()[0] == 0


# -- streams on one llama-server ----------------------------------------------------------------------


def test_each_stream_generates_the_whole_mix_from_its_own_prompt():
    orders = [stream_order(5, 3, s) for s in range(3)]
    assert all(sorted(order) == list(range(5)) for order in orders)
    assert [order[0] for order in orders] == [0, 1, 3]  # at any moment the streams run different prompts
    assert stream_order(3, 1, 0) == [0, 1, 2]


@pytest.mark.slow
def test_two_streams_run_at_once_on_two_slots_with_the_context_per_slot(target):
    with ServerEngine(context_size=512, threads=1) as one:
        single = one.measure(SpecConfig(target), MIX, max_tokens=400)
    with ServerEngine(context_size=512, threads=1, concurrency=2) as engine:
        measurement = engine.measure(SpecConfig(target), MIX, max_tokens=400)
        argv = engine.last_argv
        ngram = engine.measure(SpecConfig(target, "ngram-simple", params=NGRAM), MIX, max_tokens=32)
    assert argv[argv.index("-np") + 1] == "2" and argv[argv.index("-c") + 1] == "1024"
    assert sorted((r.stream, r.prompt_id) for r in measurement.results) == [
        (s, p) for s in (0, 1) for p in ("a", "b", "c")
    ]
    assert [r.prompt_id for r in measurement.results[:3]] == ["a", "b", "c"]  # stream 0 first, in mix order
    # the slots' own times add up to more than the wall time: the streams overlapped
    assert sum(r.prompt_ms + r.decode_ms for r in measurement.results) > measurement.busy_ms
    figures = measurement.summary()
    assert figures["concurrency"] == 2
    assert figures["aggregate_tok_s"] == pytest.approx(
        sum(r.n_generated for r in measurement.results) * 1000 / measurement.busy_ms, rel=1e-3
    )
    assert figures["per_stream_p10_tok_s"] <= figures["per_stream_tok_s"]
    # greedy batched slots give the one-stream tokens on this model
    assert [r.tokens for r in measurement.results[:3]] == [r.tokens for r in single.results]
    assert ngram.n_drafted > 0 and ngram.n_verify_steps_total > 0 and ngram.mean_accepted_length > 1


# -- runtime flags ------------------------------------------------------------------------------------


def runtime_space(tmp_path: Path, runtime: str, base_flags: str = "") -> Path:
    """The tiny space, ngram-simple alone, with this [runtime] table (and `base_flags`)."""
    path = tmp_path / "tiny.toml"
    path.write_text(
        tiny_gguf.tiny_space(
            spec_types={"ngram-simple": tiny_gguf.TINY_SPEC_TYPES["ngram-simple"]},
            base_flags=base_flags,
            extra=f"[runtime]\n{runtime}",
        )
    )
    return path


def test_runtime_flags_are_written_only_where_they_differ_from_llama_servers_defaults():
    target, draft = Path("t.gguf"), Path("d.gguf")
    defaults = {
        "threads": server_default_threads(),
        "batch_size": 2048,
        "ubatch_size": 512,
        "cache_type_k": "f16",
        "backend_sampling": False,
        "draft_backend_sampling": True,
        "draft_cache_type_v": "f16",
    }
    argv = server_argv(SpecConfig(target, "draft-simple", draft, runtime=defaults), context_size=512)
    assert argv == [
        "llama-server",
        "-m",
        "t.gguf",
        "-c",
        "512",
        "-np",
        "1",
        "-ngl",
        "all",
        "-fa",
        "on",
        "--temp",
        "0",
        "--spec-type",
        "draft-simple",
        "-md",
        "d.gguf",
        "-ngld",
        "all",
    ]
    changed = {
        "ubatch_size": 128,
        "flash_attn": "auto",
        "draft_ngl": "0",
        "cache_type_v": "q8_0",
        "backend_sampling": True,
        "draft_backend_sampling": False,
        "threads_batch": 7,
    }
    argv = server_argv(SpecConfig(target, "draft-simple", draft, runtime=changed), context_size=512, parallel=4)
    assert "-fa" not in argv  # auto is llama-server's own default
    assert argv[argv.index("-ngld") + 1] == "0" and argv[argv.index("-ub") + 1] == "128"
    assert {"-bs", "--no-spec-draft-backend-sampling"} <= set(argv) and argv[argv.index("-tb") + 1] == "7"
    assert argv[argv.index("-c") + 1] == "2048" and argv[argv.index("-np") + 1] == "4"
    baseline = server_argv(SpecConfig(target, runtime={"draft_cache_type_k": "q8_0"}), context_size=512)
    assert "-ctkd" not in baseline  # a draft's setting means nothing without a draft


@pytest.mark.parametrize(
    "runtime, problem",
    [
        ("threads = [0, 2]", "at least 1"),
        ('flash_attn = ["on", "sometimes"]', "expected one or more of"),
        ('draft_ngl = ["most"]', "layer counts"),
        ("n_gpu_layers = 3", "unknown runtime setting"),
    ],
)
def test_bad_runtime_tables_name_the_key(tmp_path, runtime, problem):
    with pytest.raises(SearchSpaceError, match=problem):
        load_space(runtime_space(tmp_path, runtime))


def test_a_runtime_flag_also_in_base_flags_is_refused(tmp_path):
    with pytest.raises(SearchSpaceError, match="base_flags already sets -ub"):
        load_space(runtime_space(tmp_path, "ubatch_size = [64, 512, 64]", '["-ub", "256"]'))


@pytest.mark.slow
def test_the_python_engine_applies_runtime_values_to_its_contexts(target):
    engine = PythonEngine(context_size=512, threads=1)
    try:
        config = SpecConfig(
            target,
            "ngram-simple",
            params=NGRAM,
            runtime={"ubatch_size": 64, "batch_size": 256, "flash_attn": "off", "cache_type_k": "q8_0"},
        )
        measurement = engine.measure(config, MIX, max_tokens=16)
        context = engine.context("target", target)
        assert llama_cpp.llama_n_ubatch(context.ptr) == 64 and llama_cpp.llama_n_batch(context.ptr) == 256
        assert measurement.results[0].n_generated == 16
        engine.measure(SpecConfig(target), MIX, max_tokens=4)  # back to the defaults: new contexts
        assert llama_cpp.llama_n_ubatch(engine.context("target", target).ptr) == 512
    finally:
        engine.close()


def test_a_runtime_flag_the_python_engine_cannot_apply_is_bad_input(tmp_path, models_dir, autotune_home):
    space = runtime_space(tmp_path, "backend_sampling = [false, true]")
    done = autotune(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(space),
        "--models-dir",
        str(models_dir),
        "--trials",
        "2",
        home=autotune_home,
    )
    assert_one_line_usage_error(done, "backend_sampling (-bs)", "--engine server")
    assert_no_study(autotune_home)


@pytest.mark.slow
def test_a_joint_study_searches_runtime_and_spec_parameters(tmp_path, models_dir, autotune_home):
    space = runtime_space(tmp_path, 'ubatch_size = [64, 512, 64]\nflash_attn = ["on", "off"]')
    run(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(space),
        "--models-dir",
        str(models_dir),
        "--trials",
        "4",
        "--max-tokens",
        "8",
        "--seed",
        "3",
        "--no-confirm",
        "--no-pruning",
        "--baseline-every",
        "0",
    )
    study = optuna.load_study(
        study_name=study_name("tiny", hardware_key(), "python"), storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    )
    searched = [t for t in study.trials if "role" not in t.user_attrs and t.state == optuna.trial.TrialState.COMPLETE]
    assert searched and all({"ubatch_size", "flash_attn", "ngram_simple_size_n"} <= set(t.params) for t in searched)
    for trial in searched:
        runtime, argv = trial.user_attrs["config"]["runtime"], trial.user_attrs["argv"]
        assert runtime == {"ubatch_size": trial.params["ubatch_size"], "flash_attn": trial.params["flash_attn"]}
        assert ("-ub" in argv) == (runtime["ubatch_size"] != 512)
        assert argv[argv.index("-fa") + 1] == runtime["flash_attn"]


# -- --concurrency on the command line ----------------------------------------------------------------


@pytest.mark.parametrize("levels", ["0", "1,0", "two"])
def test_bad_concurrency_is_one_line_and_exit_2(tiny_space, models_dir, autotune_home, levels):
    done = autotune(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--concurrency",
        levels,
        home=autotune_home,
    )
    assert_one_line_usage_error(done, "--concurrency")
    assert_no_study(autotune_home)


def test_concurrency_without_a_llama_server_is_bad_input(tiny_space, models_dir, tmp_path, autotune_home):
    done = autotune(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--concurrency",
        "1,2",
        "--server-bin",
        str(tmp_path / "no-such-llama-server"),
        home=autotune_home,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert_no_study(autotune_home)


@pytest.mark.slow
def test_search_at_two_streams_runs_on_the_server_and_reports_serving_figures(
    tiny_space, models_dir, autotune_home, tmp_path
):
    result = run(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--trials",
        "3",
        "--max-tokens",
        "8",
        "--seed",
        "1",
        "--concurrency",
        "2,1",
        "--objective",
        "throughput",
        "--threads",
        "1",
        "--race-top",
        "1",
        "--race-budget",
        "2",
        "--baseline-every",
        "0",
    )
    assert result.output.count("the python engine measures one stream: --concurrency 2 runs on the server engine") == 1
    commands = [line.split() for line in result.output.strip().splitlines() if line.split()[0].endswith("llama-server")]
    assert [(argv[argv.index("-np") + 1], argv[argv.index("-c") + 1]) for argv in commands] == [
        ("1", "512"),
        ("2", "1024"),
    ]
    assert "pick one with" in run("best", "--model", "tiny", ok=False).output  # two levels: say which
    study = optuna.load_study(
        study_name=study_name("tiny", hardware_key(), "server", objective="throughput", concurrency=2),
        storage=f"sqlite:///{autotune_home / 'autotune.db'}",
    )
    assert all(not t.user_attrs.get("prune_reason") for t in study.trials)  # aggregate throughput is not pruned
    best = json.loads(run("best", "--model", "tiny", "--json", "--concurrency", "2").output)
    assert best["concurrency"] == 2 and best["aggregate_tok_s"] > 0
    assert 0 < best["per_stream_p10_tok_s"] <= best["per_stream_tok_s"]
    assert best["argv"][best["argv"].index("-np") + 1] == "2"
    assert best["confirmed"]["engine"] == "server"
    confirmed = run("confirm", "--model", "tiny", "--concurrency", "2", "--top", "1", "--repeats", "2").output
    assert "--concurrency 2 (-np 2)" in confirmed and "aggregate" in confirmed
    presets = run("presets", "list").output
    assert " np 2 " in presets  # the confirmed winner is this machine's preset for two streams
    shown = run("presets", "show", "--model", "tiny", "--concurrency", "2").output.splitlines()[0].split()
    assert shown[shown.index("-np") + 1] == "2"
    written = run("report", "--model", "tiny", "--concurrency", "2", "--out", str(tmp_path / "report")).output
    assert str(tmp_path / "report" / "concurrency.png") in written.split()
    page = (tmp_path / "report" / "index.html").read_text()
    assert "tok/s against concurrency" in page and ("Speculation pays" in page or "Speculation stops paying" in page)


@pytest.mark.slow
def test_min_stream_tok_s_is_a_constraint_never_a_score(tiny_space, models_dir, autotune_home):
    done = run(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--trials",
        "3",
        "--max-tokens",
        "8",
        "--seed",
        "2",
        "--no-confirm",
        "--min-stream-tok-s",
        "1e12",
        "--baseline-every",
        "0",
        ok=False,
    )
    assert done.exit_code == 1 and "no configuration meets its --min-stream-tok-s bound" in done.output
    study = optuna.load_study(
        study_name=study_name("tiny", hardware_key(), "python"), storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    )
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert complete and all(t.values[0] > 0 for t in complete)  # the measured speed, not a penalty
    assert all(t.constraints["min_stream_tok_s"] > 0 for t in complete)  # told to the sampler as infeasible
    assert all(t.user_attrs["feasible"] is False for t in complete)
    done = run("best", "--model", "tiny", ok=False)
    assert done.exit_code == 1 and "--min-stream-tok-s" in done.output


# -- presets per load ---------------------------------------------------------------------------------


def _preset(concurrency: int, word: str) -> Preset:
    return Preset(
        model="m",
        hardware=hardware_key(),
        argv=("echo", word),
        tok_s=10.0 * concurrency,
        baseline_tok_s=5.0,
        speedup=1.5,
        engine="server",
        llama_cpp_build="b",
        file_hashes={},
        params={},
        study_name="s",
        concurrency=concurrency,
    )


def test_presets_are_kept_per_load_and_a_v1_database_is_migrated(tmp_path):
    db = tmp_path / "v1.db"
    connection = sqlite3.connect(db)
    connection.executescript("""
        CREATE TABLE autotune_schema_version (version INTEGER NOT NULL, PRIMARY KEY (version));
        INSERT INTO autotune_schema_version VALUES (1);
        CREATE TABLE autotune_presets (id INTEGER NOT NULL, model VARCHAR(255) NOT NULL, hardware VARCHAR(255) NOT NULL,
            argv JSON NOT NULL, command TEXT NOT NULL, tok_s FLOAT NOT NULL, baseline_tok_s FLOAT NOT NULL,
            speedup FLOAT NOT NULL, ci95_low FLOAT, ci95_high FLOAT, p_value FLOAT, engine VARCHAR(64) NOT NULL,
            llama_cpp_build VARCHAR(255) NOT NULL, file_hashes JSON NOT NULL, params JSON NOT NULL,
            study_name VARCHAR(512) NOT NULL, created_at DATETIME NOT NULL, PRIMARY KEY (id),
            CONSTRAINT uq_autotune_presets_model_hardware UNIQUE (model, hardware));
        INSERT INTO autotune_presets VALUES (1, 'm', 'hw', '["echo", "old"]', 'echo old', 10, 5, 2, NULL, NULL, NULL,
            'server', 'b', '{}', '{}', 's', '2026-01-01 00:00:00');
    """)
    connection.commit()
    connection.close()
    with PresetStore(f"sqlite:///{db}") as store:
        assert store.get("m", "hw").argv == ("echo", "old")  # an old preset is the one-stream one
        store.save(dataclasses.replace(store.get("m", "hw"), concurrency=4, argv=("echo", "four")))
        store.save(dataclasses.replace(store.get("m", "hw"), argv=("echo", "new")))  # replaces level 1 only
        assert [(p.concurrency, p.argv[1]) for p in store.list()] == [(1, "new"), (4, "four")]


@pytest.mark.parametrize(
    "asked, runs",
    [
        ([], "one"),
        (["--concurrency", "3"], "two"),
        (["--concurrency", "9"], "eight"),
        (["m", "--concurrency", "1"], "one"),
    ],
)
def test_the_sh_launcher_runs_the_preset_of_the_nearest_measured_load(tmp_path, asked, runs):
    script = tmp_path / "launch.sh"
    script.write_text(export_presets([_preset(1, "one"), _preset(8, "eight"), _preset(2, "two")], "sh"))
    done = subprocess.run(["sh", str(script), *asked, "--port", "1"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [runs, "--port", "1"]


def test_the_sh_launcher_refuses_a_bad_concurrency(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text(export_presets([_preset(1, "one")], "sh"))
    done = subprocess.run(["sh", str(script), "--concurrency", "0"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--concurrency" in done.stderr and not done.stdout


@pytest.mark.slow
def test_nightly_tunes_each_load_into_its_own_preset(tiny_space, models_dir, autotune_home):
    common = [
        "nightly",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--top",
        "1",
        "--race-budget",
        "2",
        "--max-tokens",
        "32",
        "--seed",
        "0",
        "--threads",
        "1",
    ]
    measured = ["--trials", "3", "--no-pruning"]  # level 2's study is measured; level 1's is predicted and raced
    # A level whose race's control (the plain command against itself) ruled out 1.00x stores no preset, as
    # it must: on 3 ms decodes one burst from a neighbour does that (CI, twice). The next night re-tunes it.
    outcomes = ("improved: tiny: first preset", "unchanged: tiny: the machine's speed moved during the race")
    missing, lines = [1, 2], []
    for _ in range(3):
        night = CliRunner().invoke(
            cli, [*common, *(measured if 2 in missing else []), "--concurrency", ",".join(map(str, missing))]
        )
        # one summary per level, prefixed by its level unless the night ran level 1 alone
        prefixes = [""] if missing == [1] else [f"--concurrency {level}: " for level in missing]
        summaries = {
            prefix: [
                line
                for line in night.output.splitlines()
                if line.startswith(tuple(prefix + outcome for outcome in outcomes))
            ]
            for prefix in prefixes
        }
        lines += [line for found in summaries.values() for line in found]
        assert all(len(found) == 1 for found in summaries.values()), night.output
        improved = any(": first preset" in line for found in summaries.values() for line in found)
        assert night.exit_code == (0 if improved else 3), night.output  # 3: every level unchanged
        presets = json.loads(run("presets", "list", "--json").output)
        missing = sorted({1, 2} - {p["concurrency"] for p in presets if p["model"] == "tiny"})
        if not missing:
            break
    assert sorted((p["model"], p["concurrency"]) for p in presets) == [("tiny", 1), ("tiny", 2)], "\n".join(lines)
    two = next(p for p in presets if p["concurrency"] == 2)["argv"]
    assert two[two.index("-np") + 1] == "2"
    again = CliRunner().invoke(cli, [*common, *measured, "--concurrency", "1,2"])
    assert again.exit_code == 3 and again.output.count("no new or changed model files") == 2, again.output
