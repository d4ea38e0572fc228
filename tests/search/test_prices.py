"""This machine's prices (autotune.search.prices): the file round-trips, a corrupt one is refused in one line,
`--plan` with no target on disk prices with them and says so, and (slow) examples/benchmarks/gpu_prices.py
measures them here at small shapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.search.plan import Prices, load_prices, prices_path, write_prices
from autotune.search.plan._prices import PricesFileError

REPO = Path(__file__).resolve().parents[2]
ROWS = 16

PRICES = Prices(
    hardware="NVIDIA H100 80GB HBM3 80GiB",
    measured_on="2026-12-07",
    llama_build="llama-cpp-python 0.3.36 (CUDA)",
    server_build="version: 1 (abc)",
    n_embd=4096,
    n_vocab=151_936,
    target_layers=2,
    target_quant="Q4_K_M",
    target_step_ms_per_layer=0.2,
    prefill_ms_per_token_layer=0.004,
    draft_layers=5,
    draft_quant="F16",
    block_ms=tuple(1.0 + 0.05 * r for r in range(ROWS)),
    logits_copy_ms=tuple(0.02 * r for r in range(ROWS)),
    inject_ms=tuple(0.3 + 0.01 * r for r in range(ROWS)),
    draft_simple_shape="1024 wide, 28 layers, Q8_0",
    draft_simple_token_ms=2.5,
    server_start_s=3.2,
    server_start_file_bytes=6_500_000_000,
)

PLAN = [
    "search",
    "--model",
    "qwen3-8b",
    "--plan",
    "--offline",
    "--max-tokens",
    "512",
    "--per-category",
    "4",
    "--budget",
    "none",
]


def test_the_prices_file_round_trips_under_the_machines_key(autotune_home):
    path = write_prices(PRICES)
    assert path == prices_path(PRICES.hardware) == autotune_home / "prices" / "NVIDIA_H100_80GB_HBM3_80GiB.json"
    assert load_prices(path) == PRICES
    assert json.loads(path.read_text())["block_ms"][0] == 1.0  # every price under its unit's name
    assert load_prices() is None  # this machine has none: a plan assumes what it would price


@pytest.mark.parametrize(
    "text, reason",
    [
        ("{", "Expecting property name"),
        (json.dumps({**PRICES.as_dict(), "version": 0}), "version 0, not 1"),
        (json.dumps({k: v for k, v in PRICES.as_dict().items() if k != "server_start_s"}), "no server_start_s"),
        (json.dumps({**PRICES.as_dict(), "block_ms": "fast"}), 'block_ms is "fast", not a list of numbers'),
        (json.dumps({**PRICES.as_dict(), "inject_ms": [1.0]}), "the same rows"),
        (json.dumps({**PRICES.as_dict(), "server_start_s": -1}), "server_start_s must be positive"),
    ],
    ids=[
        "not JSON",
        "another version",
        "a price missing",
        "a price of the wrong type",
        "rows that differ",
        "a negative price",
    ],
)
def test_a_corrupt_prices_file_is_refused_in_one_line(tmp_path, text, reason):
    path = tmp_path / "prices.json"
    path.write_text(text)
    with pytest.raises(PricesFileError) as refused:
        load_prices(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: not a prices file autotune can read (") and reason in message, message
    assert "\n" not in message and message.endswith(
        "measure again with python examples/benchmarks/gpu_prices.py, or delete it"
    )


def test_plan_with_nothing_on_disk_prices_with_this_machines_prices_and_says_which(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [*PLAN, "--models-dir", str(empty)]
    assumed = _run(args)
    path = write_prices(replace(PRICES, hardware=hardware_key()))
    priced = _run(args)
    assert priced[2].startswith("pace: 95 tok/s for Qwen3-8B-Q4_K_M.gguf, the pace qwen3-8b's search space states"), (
        priced[2]
    )
    assert assumed[2].endswith(
        "10 s a server start, 0.2 s a prompt's processing and 1.3 ms at least a draft model's step (assumed)"
    ), assumed[2]
    # 544 bytes a prompt: 136 tokens at 0.02 of a 10.5 ms step, then one step
    assert priced[2].endswith(
        "server start 3.2 s, a prompt's processing 0.04 s (~136 tokens at 0.020 of a step, then "
        f"one), a DFlash/DSpark block 1.8 ms: this machine's prices, measured by gpu_prices on "
        f"2026-12-07 ({path})"
    ), priced[2]
    seconds = {
        name: (_minutes(before), _minutes(after))
        for name, before, after in zip(_phases(assumed), assumed[3:-1], priced[3:-1])
    }
    assert seconds["blocks"][1] < seconds["blocks"][0] / 4  # 1.75 ms a block or injection, not a 10.5 ms target step
    assert seconds["baseline"][1] < seconds["baseline"][0]  # 3.2 s a start and 0.04 s a request, not 10 s and 0.2 s
    given = _run([*args, "--plan-tok-s", "40"])
    assert given[2].startswith("pace: 40 tok/s as given (--plan-tok-s)") and f"({path})" in given[2], given[2]

    path.write_text("{")
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 2 and f"{path}: not a prices file autotune can read" in refused.output, refused.output


def _run(args: list[str]) -> list[str]:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def _phases(lines: list[str]) -> list[str]:
    return ["step costs" if line.strip().startswith("step") else line.split()[0] for line in lines[3:-1]]


def _minutes(row: str) -> float:
    return float(row.rsplit(" min", 1)[0].split()[-1].lstrip("≤"))


@pytest.mark.slow
def test_gpu_prices_measures_every_price_here_at_small_shapes(tmp_path):
    out = tmp_path / "prices.json"
    done = subprocess.run(
        [
            sys.executable,
            "examples/benchmarks/gpu_prices.py",
            "--n-embd",
            "256",
            "--vocab",
            "4096",
            "--threads",
            "1",
            "--out",
            str(out),
        ],  # one thread: 20 s here, where two threads on 2 shared cores took minutes
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "AUTOTUNE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    prices = load_prices(out)
    assert prices.hardware == hardware_key() and prices.n_embd == 256 and prices.n_vocab == 4096
    assert len(prices.block_ms) == len(prices.inject_ms) == len(prices.logits_copy_ms) == ROWS
    assert all(ms > 0 for ms in (*prices.block_ms, *prices.inject_ms))
    # the logits' share of each block: a difference of two medians, which a busy CPU can make 0 at a few rows
    assert all(0 <= logits <= block for logits, block in zip(prices.logits_copy_ms, prices.block_ms))
    assert (
        min(
            prices.target_step_ms_per_layer,
            prices.prefill_ms_per_token_layer,
            prices.draft_simple_token_ms,
            prices.server_start_s,
        )
        > 0
        and prices.server_build
    )
    lines = done.stdout.splitlines()
    assert all(line.startswith("prices: ") for line in lines), lines
    rows = [line.split()[1:] for line in lines if line.startswith("prices:   ")]
    assert [int(row[0]) for row in rows] == list(range(1, ROWS + 1)), lines  # block, logits, injection ms a row
    assert lines[-1].startswith(f"prices: wrote {out} in "), lines[-1]
