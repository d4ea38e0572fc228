"""examples/benchmarks/gpu_check.sh --cpu: the device check runs here as it will on a GPU, and prints
every line the closing note of the GPU issue reads (tiny settings: it measures nothing worth quoting).
It runs on this test's own interpreter (PYTHON), whatever `python` comes first on PATH."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NUMBER = r"[0-9]+\.[0-9]+"


@pytest.mark.slow
def test_gpu_check_runs_on_the_cpu_and_prints_every_figure(tmp_path):
    done = subprocess.run(
        [
            "bash",
            "examples/benchmarks/gpu_check.sh",
            "--cpu",
            "--max-tokens",
            "4",
            "--prompts",
            "1",
            "--trials",
            "3",
            "--vocab",
            "4096",
            "--search-args",
            "--no-confirm --no-pruning",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "AUTOTUNE_HOME": str(tmp_path), "PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(re.match(r"device: CPU .* GiB free$", line) for line in lines), lines
    failed = [line for line in lines if re.match(r"(quick|gemma|fixture): .* (python|server): ", line)]
    assert not failed, failed  # a measurement that failed prints its error in place of its row
    quick = [i for i, line in enumerate(lines) if line.startswith(("doctor: ", "quick: "))]
    assert "doctor: usable: yes" in lines and lines[quick[-1]].startswith("quick: none ")  # the first minute
    assert quick[-1] < next(i for i, line in enumerate(lines) if line.startswith("gemma: "))
    for section, names in {
        "quick": ["none"],
        "gemma": ["none", "ngram-simple n4 m16", "draft-simple n_max=4"],
        "fixture": ["none", "ngram-simple n2 m8", "draft-simple n_max=4", "draft-dspark n_max=8"],
    }.items():
        for name in names:
            row = next((line for line in lines if line.startswith(f"{section}: {name} ")), None)
            assert row, (section, name, lines)
            python_tok_s, server_tok_s, ratio, host, host_ms = re.findall(
                rf"({NUMBER})%?", row.removeprefix(f"{section}: {name}")
            )[:5]
            assert float(ratio) == pytest.approx(float(python_tok_s) / float(server_tok_s), rel=0.2, abs=0.02), row
            assert 0 <= float(host) < 100 and float(host_ms) > 0, row
            assert row.endswith(" rss"), row  # memory in use: this process's, there being no GPU
    pctree = next(line for line in lines if line.startswith("fixture: pctree k=3 n=16 "))
    assert re.search(rf"{NUMBER}\s+-\s+-\s+{NUMBER}%", pctree), pctree  # llama-server has no PCTree flags
    for name in ("draft-dspark n_max=8", "draft-dspark n_max=3", "pctree k=3 n=16"):
        row = next((line for line in lines if line.startswith(f"blocks: {name} ")), None)
        replayed, measured = re.search(r"replayed (\S+) measured (\S+) ", row or "").groups()
        assert replayed == measured, row  # the prediction's counts are the engine's
    command = next(line for line in lines if line.startswith("search: ") and "llama-server" in line and " -m " in line)
    assert "gemma-3-270m-q4_k_m.gguf" in command and "--temp 0" in command
    assert "search: exit 0" in lines and lines[-1] == "plan: exit 0"
    plans = [line for line in lines if line.startswith("plan: plan: up to ")]
    assert len(plans) == 2 and all("on this machine: baseline " in line for line in plans), plans
    assert any(
        line.startswith("plan: workload: 2 target(s), 44 prompts x 512 tokens; 2 draft model(s)") for line in lines
    )  # qwen3-8b's space, priced at 95 tok/s
    paces = [line for line in lines if line.startswith("plan: pace: ")]
    assert paces[0].startswith("plan: pace: 95 tok/s as given") and "on one prompt on the" in paces[1], paces
