"""A dead run's llama-server is found and stopped; a live run's is left alone. Real processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autotune.engines.orphans import ServerRecord, servers_dir, start_time, stop_orphaned_servers


def a_dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def stand_in_server():
    """A process leading its own group, as a llama-server we start does."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def write_record(server: subprocess.Popen, owner_pid: int, owner_started: str) -> ServerRecord:
    record = ServerRecord(server.pid, start_time(server.pid), owner_pid, owner_started, ("llama-server",))
    servers_dir().mkdir(parents=True, exist_ok=True)
    record.path.write_text(json.dumps({**record.__dict__, "argv": list(record.argv)}))
    return record


def test_the_server_of_a_dead_run_is_stopped_and_reported(autotune_home, stand_in_server):
    record = write_record(stand_in_server, a_dead_pid(), "1")
    (stopped,) = stop_orphaned_servers()
    assert stopped.server_pid == stand_in_server.pid
    assert stand_in_server.wait(timeout=5) == -9
    assert not record.path.exists()


def test_the_server_of_a_live_run_is_left_alone(autotune_home, stand_in_server):
    live = subprocess.Popen(["sleep", "60"])
    try:
        record = write_record(stand_in_server, live.pid, start_time(live.pid))
        assert stop_orphaned_servers() == []
        assert stand_in_server.poll() is None
        assert record.path.exists()
    finally:
        live.kill()
        live.wait()


def test_a_pid_reused_by_another_process_is_not_the_run_that_started_the_server(autotune_home, stand_in_server):
    """The owner's pid now names a process that started later: the run that started the server is gone."""
    live = subprocess.Popen(["sleep", "60"])
    try:
        write_record(stand_in_server, live.pid, str(int(start_time(live.pid)) - 1))
        assert [r.server_pid for r in stop_orphaned_servers()] == [stand_in_server.pid]
    finally:
        live.kill()
        live.wait()
