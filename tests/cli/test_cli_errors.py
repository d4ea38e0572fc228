"""The console script (`python -m autotune`, as a shell runs it): a usage error, Click's or the library's,
ends in one line on stderr and exit code 2, with no traceback and nothing written to the database. Every
kind of bad input, on every strategy, is in test_bad_input.py (in-process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from autotune.testing.database import studies_in


def autotune(*args: str, home) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOTUNE_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], env=env, capture_output=True, text=True, timeout=120
    )


def assert_usage_error(done: subprocess.CompletedProcess, home, *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error:"), done.stderr
    for needle in needles:
        assert needle in lines[0]
    assert studies_in(home / "autotune.db") == 0


@pytest.mark.parametrize("strategy", [[], ["--strategy", "measure"]], ids=["default", "measure"])
def test_unknown_model_lists_known_ones(autotune_home, strategy):
    done = autotune("search", *strategy, "--model", "llama-9000", home=autotune_home)
    assert_usage_error(done, autotune_home, "unknown model 'llama-9000'", "gemma3-270m")


def test_an_unknown_option_is_clicks_usage_error_in_one_line(autotune_home):
    done = autotune("search", "--model", "gemma3-270m", "--fastest", home=autotune_home)
    assert_usage_error(done, autotune_home, "--fastest")


def test_best_without_a_study(autotune_home):
    done = autotune("best", "--model", "gemma3-270m", home=autotune_home)
    assert_usage_error(done, autotune_home, "no study named", "autotune search")


@pytest.mark.parametrize("trials", ["0", "-3"])
def test_trials_zero_or_negative_is_a_usage_error(autotune_home, trials):
    done = autotune("search", "--strategy", "measure", "--model", "gemma3-270m", "--trials", trials, home=autotune_home)
    assert_usage_error(done, autotune_home, "--trials")
