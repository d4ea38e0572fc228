"""llama.cpp dying of a signal, said in one line: a llama-server build that dies of SIGILL on start (a
stand-in passing --help and --version to the real binary), and the default search's in-process worker
killed from outside while it measures step costs: once (a fresh worker finishes the work) and twice
(the search ends with one line). Real autotune processes, real llama.cpp, the real Gemma 3 270M."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autotune.engines.orphans import descendant_pids
from autotune.llamacpp.server_binary import resolve_server_binary
from autotune.testing.processes import process_ids_named, start_autotune
from autotune.testing.stand_ins import stand_in_llama_server

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

IN_PROCESS_PHASE = "measuring the step costs of"
REBUILD = "rebuild llama.cpp for this machine: python -m autotune.install --rebuild"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("autotune: error:")]


def test_a_llama_server_that_dies_of_sigill_on_start_is_one_line_naming_it_and_the_fix(
    tmp_path, tiny_space, models_dir
):
    broken = stand_in_llama_server(tmp_path, resolve_server_binary(), dies_of="ILL")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "search",
            "--model",
            "tiny",
            "--space",
            str(tiny_space),
            "--models-dir",
            str(models_dir),
            "--server-bin",
            str(broken),
            "--max-tokens",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    (line,) = error_lines(done.stderr)
    assert line == (
        f"autotune: error: llama-server ({broken}) died of SIGILL (illegal instruction) while loading "
        "tiny-target.gguf: it ran an instruction this CPU refuses (built for another CPU, or AMX on a VM "
        f"that reports it); {REBUILD}"
    )


def workers_of(pid: int) -> list[int]:
    """The in-process engine's workers among `pid`'s descendants (not multiprocessing's resource tracker)."""

    def cmdline(child: int) -> str:
        try:
            return Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return ""

    return [child for child in descendant_pids(pid) if "spawn_main" in cmdline(child)]


def search_killing_its_worker(
    gemma_path: Path, tmp_path: Path, kills: int, signum: signal.Signals
) -> tuple[subprocess.Popen, str, list[int]]:
    """The default search on Gemma, its worker sent `signum` each of the first `kills` times it starts
    measuring step costs; returns the finished process, its stderr and the pids killed."""
    models = tmp_path / "models"
    models.mkdir()
    (models / gemma_path.name).symlink_to(gemma_path)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(f'{{"id": "p{i}", "category": "c{i}", "prompt": "Once upon a time number {i},"}}\n' for i in range(3))
    )
    process = start_autotune(
        [
            "search",
            "--model",
            "gemma3-270m",
            "--models-dir",
            str(models),
            "--prompts",
            str(prompts),
            "--max-tokens",
            "16",
            "--race-budget",
            "1",
        ],
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stderr: list[str] = []
    killed: list[int] = []

    def read() -> None:
        for line in process.stderr:
            stderr.append(line)
            if IN_PROCESS_PHASE in line and len(killed) < kills:
                deadline = time.monotonic() + 30
                while not (workers := [w for w in workers_of(process.pid) if w not in killed]):
                    assert time.monotonic() < deadline, "no worker measured the step costs"
                    time.sleep(0.01)
                os.kill(workers[0], signum)
                killed.append(workers[0])

    reader = threading.Thread(target=read)
    reader.start()
    process.wait(timeout=600)
    reader.join()
    return process, "".join(stderr), killed


def test_a_worker_killed_once_in_the_in_process_phase_is_retried_and_the_search_finishes(gemma_path, tmp_path):
    process, stderr, killed = search_killing_its_worker(gemma_path, tmp_path, kills=1, signum=signal.SIGKILL)
    assert process.returncode == 0, stderr
    assert len(killed) == 1 and re.search(
        r"the in-process worker died \(worker killed by SIGKILL.*\); retrying "
        r"once in a fresh worker",
        stderr,
    )
    assert stderr.count(IN_PROCESS_PHASE) == 2  # the fresh worker measured them again
    assert process.stdout.read().startswith("/")  # the command, printed


def test_a_worker_that_segfaults_twice_ends_the_search_in_one_line_with_nothing_left_running(gemma_path, tmp_path):
    process, stderr, killed = search_killing_its_worker(gemma_path, tmp_path, kills=2, signum=signal.SIGSEGV)
    assert process.returncode == 1, stderr
    assert len(killed) == 2 and "Traceback" not in stderr
    (line,) = error_lines(stderr)
    assert re.fullmatch(
        r"autotune: error: the in-process llama\.cpp \(llama-cpp-python, \S+/llama_cpp/lib\) died of "
        r"SIGSEGV \(segmentation fault\) while measuring in-process: .*; " + re.escape(REBUILD),
        line,
    )
    assert not [pid for pid in killed if Path(f"/proc/{pid}").exists()]
    assert not process_ids_named("llama-server", containing=str(tmp_path))  # the baseline's server stopped too
