"""A race whose machine moved, forced: `autotune nightly` runs on Gemma 3 270M while this test loads the
baseline's llama-server alone, and the night must say that its machine moved, give no verdict, and store
none.

The load falls on one server: in each race round every entrant's server starts afresh, in entrant
order, the baseline's (the plain command) first and the control's (the plain command again) last
(autotune.race.rounds, autotune.engines.server `live`). From the moment a round's servers run side by
side (the race: every other measurement runs one server at a time), the oldest one alive is the
baseline's, and it gets a third of the time: stopped 4 ms of every 6 (SIGSTOP, SIGCONT), as a CPU quota
would hold it. A stopped server spends nothing, so the others run as before. CPU affinity did not load
it alone: with the baseline's threads pinned to CPU 0, the control's own prompts took up to 5080 ms
(a busy loop on CPU 0 beside it) or 2298 ms (none) against their 1-2 ms, and the control's bounds, and
its void rounds, were lost in that noise. The control should then measure the plain command faster
than the baseline does, and the race end with the machine's speed moved: either the control's bounds
over the race rule out 1.00x (autotune.race.guards.machine_moved) or more than MAX_VOID rounds are
void, each its control more than 4 sd from 1.00x (autotune.measure.stratified, autotune.race.race
`_run`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines.orphans import start_time
from autotune.measure.paired import Units, paired_speedup
from autotune.study.verdict import RaceVerdict
from autotune.testing.processes import start_autotune
from storage import resolve_storage_url

#: each side of the control's interval, the level autotune.race.guards states (1 % a race)
CONTROL_ONE_SIDED = 0.005
#: void rounds a race replays before it ends with the machine moved (autotune.measure.stratified.MAX_VOID)
VOID_ROUNDS_TO_END = 3


def serving_llama_servers(pid: int) -> list[int]:
    """The llama-server children of `pid` that listen on a port (not a `--version` run), oldest first. Read
    from the children each of its threads started, not by walking /proc: the watch runs every few ms and
    must not load the box itself."""
    found = []
    try:
        children = [
            int(child)
            for task in os.listdir(f"/proc/{pid}/task")
            for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        ]
    except OSError:  # it is exiting
        return []
    for child in children:
        try:
            comm = Path(f"/proc/{child}/comm").read_text().strip()
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            started = int(start_time(child) or 0)
        except (OSError, ValueError):
            continue
        if comm == "llama-server" and b"--port" in argv:
            found.append((started, child))
    return [child for _, child in sorted(found)]


def throttle_once(pid: int) -> None:
    """`pid` stopped for 4 ms, then let run for 2 ms; a process that just ended is let go."""
    try:
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.004)
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    time.sleep(0.002)


def night_under_load(
    args: list[str], out: Path, timeout_s: float = 600
) -> tuple[subprocess.CompletedProcess, set[int]]:
    """Run `autotune ARGS`, throttling the baseline's server of every race round (module docstring) until it
    exits. Returns what it did (its output as written to `out`) and the baseline servers throttled."""
    stdout, stderr = out / "stdout", out / "stderr"
    with stdout.open("w") as to_stdout, stderr.open("w") as to_stderr:
        proc = start_autotune(args, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=to_stdout, stderr=to_stderr)
    racing, loaded = False, set()
    try:
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"the night did not end within {timeout_s:g} s"
            servers = serving_llama_servers(proc.pid)
            racing = racing or len(servers) >= 2  # the race: a round's servers run side by side
            if racing and servers:
                loaded.add(servers[0])
                throttle_once(servers[0])
            else:
                time.sleep(0.01)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(args, proc.returncode, stdout.read_text(), stderr.read_text()), loaded


GEMMA_SPACE = """
[model]
name = "gemma"
target = "gemma-3-270m-q4_k_m.gguf"
context_size = 2048
[spec_types.ngram-simple]
ngram_simple_size_n = [1, 3]
ngram_simple_size_m = [2, 8]
"""


@pytest.mark.slow
def test_a_night_whose_baseline_server_is_loaded_says_the_machine_moved_and_stores_no_preset(
    tmp_path, gemma_path, autotune_home
):
    """On Gemma 3 270M, not the tiny models: a tiny model decodes its 10 tokens in 1-2 ms, and on a busy
    2-core box a server's prompt now and then takes 100-365 ms (measured here, the control's own), outliers
    that leave the control's bounds at [0, inf] and its rounds never void, however slow the baseline."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(gemma_path, models / "gemma-3-270m-q4_k_m.gguf")
    space = tmp_path / "gemma.toml"
    space.write_text(GEMMA_SPACE)
    args = [
        "nightly",
        "--model",
        "gemma",
        "--space",
        str(space),
        "--models-dir",
        str(models),
        "--objective",
        "e2e",
        "--trials",
        "3",
        "--no-pruning",
        "--top",
        "1",
        "--race-budget",
        "2",
        "--max-tokens",
        "16",
        "--seed",
        "0",
    ]
    night, loaded = night_under_load(args, tmp_path)
    assert loaded, night.stderr  # the race ran, and its baseline's server was throttled

    url = resolve_storage_url(None)
    (raced,) = [
        s
        for s in optuna.get_all_study_summaries(url, include_best_trial=False)
        if "confirmation" in optuna.load_study(study_name=s.study_name, storage=url).user_attrs
    ]
    confirmation = RaceVerdict.from_dict(
        optuna.load_study(study_name=raced.study_name, storage=url).user_attrs["confirmation"]
    )
    assert confirmation.ended == "the machine's speed moved" and confirmation.winner is None

    # what the user reads: exit 3, "unchanged" (docs/cli.md, "Exit codes"), the race's reason, no verdict
    assert (night.returncode, night.stdout) == (
        3,
        f"unchanged: gemma: {confirmation.machine_moved}; no verdict "
        "tonight, no preset yet: the next night tunes it again\n",
    ), night.stderr
    assert json.loads(CliRunner().invoke(cli, ["presets", "list", "--json"]).stdout) == []  # and nothing was stored

    # the evidence, in the load's direction: the control ran the plain command faster than the throttled baseline
    if confirmation.machine_moved == "the control moved in every replayed round":  # their units were set aside
        assert len(confirmation.void_rounds) == VOID_ROUNDS_TO_END
        assert all(float(re.search(r"ran (\d+\.\d+)x", reason).group(1)) > 1 for reason in confirmation.void_rounds)
    else:  # the control's bounds over the race, recomputed from its stored units
        assert confirmation.machine_moved.startswith("the machine's speed moved during the race: ")
        (control,) = confirmation.controls
        base = confirmation.baseline_of(control)
        low, high = paired_speedup(
            Units.of(base.decode_ms, base.tokens), Units.of(control.decode_ms, control.tokens), pair_by_unit=True
        ).interval(CONTROL_ONE_SIDED)
        assert low > 1.0, (low, high)
