"""A predicted search stopped after it measured its target resumes: the same search run again takes the
baseline, trajectory and recordings the stopped one kept instead of measuring them again, and once its
answer is stored nothing resumes any more; another length, prompt, build or file is another key. Real
processes, the tiny models, a real llama-server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from autotune.search.inputs import SearchOptions, SearchSettings, check_inputs
from autotune.search.predicted._resume import resume_key
from autotune.testing.processes import start_logged

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

BASELINE = "measuring the baseline of tiny-target.gguf"
RESUMED = "resuming tiny-target.gguf: its baseline and recordings from the unfinished search"


def search_args(space, models, *extra: str) -> list[str]:
    return [
        "search",
        "--model",
        "tiny",
        "--space",
        str(space),
        "--models-dir",
        str(models),
        "--max-tokens",
        "24",
        "--race-top",
        "1",
        "--race-budget",
        "1",
        *extra,
    ]


def run(args: list[str], *, stop_at: str | None = None) -> tuple[int, str]:
    """Run autotune; with `stop_at`, SIGTERM it once that line is logged. Its exit code and its log."""
    process, log = start_logged(args)
    try:
        if stop_at is not None:
            assert log.wait_for(stop_at, timeout_s=600), log.text()[-3000:]
            process.send_signal(signal.SIGTERM)
        process.stdout.read()
        return process.wait(timeout=600), log.text()
    finally:
        if process.poll() is None:
            process.kill()


def test_a_search_stopped_after_its_recordings_resumes_from_them(tiny_space, models_dir, autotune_home):
    code, first = run(search_args(tiny_space, models_dir), stop_at="racing 1 predicted finalists")
    assert code == 128 + signal.SIGTERM and BASELINE in first, first[-3000:]
    assert list((autotune_home / "unfinished").glob("*.pickle")), "nothing kept for a resume"

    code, second = run(search_args(tiny_space, models_dir))
    assert code == 0, second[-3000:]
    assert RESUMED in second and BASELINE not in second and "recorded tiny-draft.gguf's greedy chains" not in second
    assert not list((autotune_home / "unfinished").glob("*.pickle"))  # the answer is stored: nothing resumes


def test_what_a_search_keeps_is_keyed_by_what_shaped_it(tiny_space, models_dir):
    options = SearchOptions(
        SearchSettings(model="tiny", trials=1, max_tokens=24), space_file=tiny_space, models_dir=models_dir
    )
    inputs = check_inputs(options, lambda line: None)
    target = inputs.candidates.targets[0]
    key = resume_key(inputs, options.settings, target, "b1")
    assert key == resume_key(check_inputs(options, lambda line: None), options.settings, target, "b1")
    assert key != resume_key(inputs, replace(options.settings, max_tokens=20), target, "b1")
    assert key != resume_key(inputs, options.settings, target, "b2")  # another llama.cpp build
    fewer = replace(inputs, mix=replace(inputs.mix, prompts=inputs.mix.prompts[1:]))
    assert key != resume_key(fewer, options.settings, target, "b1")
    (models_dir / "tiny-draft.gguf").write_bytes((models_dir / "tiny-draft.gguf").read_bytes() + b"\0")
    redrafted = check_inputs(options, lambda line: None)
    assert key != resume_key(redrafted, options.settings, target, "b1")  # a draft's contents changed


def test_a_search_stopped_in_its_race_keeps_the_standing_result_undecided(tiny_space, models_dir, autotune_home):
    code, log = run(
        search_args(tiny_space, models_dir, "--race-budget", "4"),
        stop_at="race: every entrant's llama-server stays loaded",
    )
    assert code == 128 + signal.SIGTERM, log[-3000:]
    assert "autotune: stopped in race round " in log and ", undecided: " in log, log[-3000:]
    best = subprocess.run(
        [sys.executable, "-m", "autotune", "best", "--model", "tiny"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "AUTOTUNE_HOME": str(autotune_home)},
    )
    assert best.returncode == 0, best.stderr
    lines = best.stdout.splitlines()
    assert (
        lines[1].startswith("# the plain command: no configuration was proven faster")
        and "stopped before a verdict: undecided" in lines[1]
    ), lines
