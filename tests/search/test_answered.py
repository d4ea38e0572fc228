"""A search that waited on another of its key answers from the run that just finished, where that run
measured the same files, space, prompts and length. Real processes, the tiny models, a real llama-server,
one SQLite file (tests/cli/test_same_key_searches.py: with `--again` the second measures anew)."""

from __future__ import annotations

import optuna
import pytest

from autotune.hardware import hardware_key
from autotune.testing.processes import start_logged

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

BASELINE = "measuring the baseline of tiny-target.gguf"


def search_args(space, models, *extra: str) -> list[str]:
    return [
        "search",
        "--model",
        "tiny",
        "--space",
        str(space),
        "--models-dir",
        str(models),
        "--max-tokens",
        "24",
        "--race-top",
        "1",
        "--race-budget",
        "1",
        "--heartbeat",
        "1",
        *extra,
    ]


def runs(home) -> list[str]:
    url = f"sqlite:///{home / 'autotune.db'}"
    return sorted(s.study_name for s in optuna.get_all_study_summaries(url, include_best_trial=False))


def _waiting_pair(first_args: list[str], second_args: list[str]) -> tuple[str, str, str]:
    """Run two searches, the second started once the first measures (so it waits); their stdout's first lines
    and the second's log."""
    first, first_log = start_logged(first_args)
    second = None
    try:
        assert first_log.wait_for(BASELINE, timeout_s=300), first_log.text()
        second, second_log = start_logged(second_args)
        assert second_log.wait_for("autotune: waiting: ", timeout_s=120), second_log.text()
        first_out = first.stdout.read()  # stderr is the line logs' to read
        assert first.wait(timeout=600) == 0, first_log.text()[-3000:]
        second_out = second.stdout.read()
        assert second.wait(timeout=600) == 0, second_log.text()[-3000:]
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
    return first_out.splitlines()[0], second_out.splitlines()[0], second_log.text()


def test_a_search_that_waited_answers_from_the_same_search_that_just_finished(tiny_space, models_dir, autotune_home):
    args = search_args(tiny_space, models_dir)
    first_command, second_command, second_log = _waiting_pair(args, args)
    assert "answering from tiny@" in second_log and BASELINE not in second_log, second_log
    assert second_command == first_command  # the same answer, printed as `best` prints it
    assert runs(autotune_home) == [f"tiny@{hardware_key()}:predicted"]  # nothing measured twice
