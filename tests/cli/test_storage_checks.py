"""A storage that cannot work is found before the first measurement, in one line with exit code 2: an
invalid URL, a path that cannot be written, a server that does not answer, a driver that is missing."""

from __future__ import annotations

import socket
import time

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the probe closes


BAD_STORAGE = {
    "invalid URL": ("not a url", "is not a valid SQLAlchemy URL"),
    "unwritable path": ("sqlite:////proc/nope/x.db", "cannot write the database /proc/nope/x.db"),
    "unreachable server": (f"postgresql+psycopg://autotune@127.0.0.1:{closed_port()}/autotune", "127.0.0.1"),
    "missing driver": ("mysql+mysqldb://autotune@127.0.0.1/autotune", "MySQLdb"),
}


@pytest.mark.parametrize("verb", ["search", "search --strategy measure", "nightly"])
@pytest.mark.parametrize("storage, said", list(BAD_STORAGE.values()), ids=list(BAD_STORAGE))
def test_a_bad_storage_is_one_line_and_exit_2_before_anything_is_measured(verb, storage, said, tiny_space,
                                                                           models_dir):
    if "psycopg" in storage:
        pytest.importorskip("psycopg")
    started = time.monotonic()
    result = CliRunner().invoke(cli, [*verb.split(), "--model", "tiny", "--space", str(tiny_space), "--models-dir",
                                      str(models_dir), "--max-tokens", "8", "--storage", storage])
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("autotune: error: ") and said in last, result.output
    assert "measuring" not in result.output and "calibrat" not in result.output and "trial" not in result.output
    assert time.monotonic() - started < 30
