"""A confirmation or race refuses a row that did not draft or whose output is not the baseline's.
Real llama-server and llama.cpp on the tiny GGUF fixtures."""

from __future__ import annotations

import pytest

from autotune.engines.server import ServerEngine
from autotune.measure.prompts import Prompt, PromptMix
from autotune.race.checks import MeasurementCheck
from autotune.race.entrants import Entrant
from autotune.race.race import RaceBudget, race
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

MIX = PromptMix(
    "checks",
    (Prompt("a", "code", "def add(a, b):\n    return"), Prompt("b", "chat", "Name three colours of the rainbow.")),
)


@pytest.fixture(scope="module")
def engine():
    with ServerEngine(context_size=256) as server:
        yield server


def test_a_draft_the_server_cannot_use_is_dropped_from_the_race_with_the_servers_reason(engine, tiny_dir):
    target = tiny_dir / "tiny-target.gguf"
    mismatched = SpecConfig(target, "draft-simple", tiny_dir / "tiny-otherwords.gguf")
    drafting = SpecConfig(target, "draft-simple", tiny_dir / "tiny-draft.gguf")
    entrants = [
        Entrant("baseline", 0, SpecConfig(target)),
        Entrant("trial", 1, mismatched),
        Entrant("trial", 2, drafting),
    ]
    confirmation = race(engine, entrants, MIX, max_tokens=16, budget=RaceBudget(rounds=2), command=ServerCommand(256))
    rows = {row.trial: row for row in confirmation.configs}
    assert rows[1].failure.startswith("drafted nothing: speculation was inactive (")
    assert "vocabs are not compatible" in rows[1].failure
    assert rows[2].failure is None and rows[2].rounds >= 1  # it drafted, and its output is the baseline's


def test_an_output_that_is_not_the_baselines_fails_the_row(engine, tiny_dir):
    """A measurement 8 tokens shorter than the baseline's stands in for a verifier that goes wrong: the
    check compares token ids, whatever made them differ."""
    target = tiny_dir / "tiny-target.gguf"
    config = SpecConfig(target, "draft-simple", tiny_dir / "tiny-draft.gguf")
    check = MeasurementCheck(engine, MIX, compare_output=True)
    assert check.failure(SpecConfig(target), engine.measure(SpecConfig(target), MIX, max_tokens=24)) is None
    assert check.failure(config, engine.measure(config, MIX, max_tokens=24)) is None
    assert check.failure(config, engine.measure(config, MIX, max_tokens=16)) == (
        "output differs from the baseline's (prompt a, token 16)"
    )
    sampled = MeasurementCheck(engine, MIX, compare_output=False)  # sampling at a temperature: not compared
    sampled.failure(SpecConfig(target), engine.measure(SpecConfig(target), MIX, max_tokens=24))
    assert sampled.failure(config, engine.measure(config, MIX, max_tokens=16)) is None
