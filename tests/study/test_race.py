"""The race: its budget, and real races on llama-server with the real Gemma 3 270M (prompt by prompt, every
server loaded) and in-process on the tiny models (whole rounds), each checked against the figures
recomputed from the units it stored."""

from __future__ import annotations

import shutil

import pytest

from autotune.engines.server import ServerEngine
from autotune.engines.worker import WorkerEngine
from autotune.errors import UsageError
from autotune.measure.prompts import Prompt, PromptMix, default_mix_path, load_prompt_mix
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.study.race import Entrant, RaceBudget, race
from autotune.study.verdict import WINNER, Confirmation


def test_a_budget_is_rounds_or_time():
    assert RaceBudget.parse("6") == RaceBudget(rounds=6)
    assert RaceBudget.parse("5m") == RaceBudget(seconds=300.0) and RaceBudget.parse("90s") == RaceBudget(seconds=90.0)
    assert RaceBudget(rounds=6).planned_rounds(first_round_s=40.0) == 6
    assert RaceBudget(seconds=300.0).planned_rounds(first_round_s=40.0) == 7  # the first round's pace, fixed
    assert RaceBudget(seconds=30.0).planned_rounds(first_round_s=40.0) == 1
    for bad in ("0", "2.5", "-3", "soon", "5h"):
        with pytest.raises(UsageError, match="--race-budget"):
            RaceBudget.parse(bad)


def assert_recomputable(confirmation: Confirmation) -> None:
    """Every stored speedup is the paired ratio of the stored units, its interval too."""
    restored = Confirmation.from_dict(confirmation.as_dict())
    for row in restored.configs + restored.spec_defaults:
        if row.speedup is None:
            continue
        versus = restored.versus(row, restored.baseline_of(row))
        assert versus.ratio == pytest.approx(row.speedup, abs=1e-4)
        assert versus.interval() == pytest.approx(row.speedup_ci95, abs=1e-3)
        assert len(row.decode_ms) == row.rounds and all(len(r) == row.prompts for r in row.decode_ms)


@pytest.mark.slow
@pytest.mark.usefixtures("no_server_left_behind")
def test_a_race_on_llama_server_pairs_each_prompt_drops_a_slower_configuration_and_keeps_the_baseline(
        gemma_path, tmp_path):
    target = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    shutil.copy(gemma_path, target)
    bundled = load_prompt_mix(default_mix_path([gemma_path])[0]).take(per_category=1)
    mix = PromptMix(bundled.source, bundled.prompts[:6])
    slow = SpecConfig(target, "draft-simple", target, {"draft_n_max": 8})  # a draft as costly as the target
    fast = SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 6, "ngram_simple_size_m": 16})
    entrants = [Entrant("baseline", 0, SpecConfig(target)), Entrant("trial", 1, slow), Entrant("trial", 2, fast)]
    pairings = []
    with ServerEngine(context_size=2048) as engine:
        confirmation = race(engine, entrants, mix, max_tokens=48, budget=RaceBudget(rounds=4),
                            command=ServerCommand(2048), on_start=pairings.append)
    assert pairings == ["prompt"] and confirmation.pairing == "prompt"  # three Gemma servers fit at once
    baseline_row = confirmation.baselines[0]
    slow_row = next(c for c in confirmation.configs if c.trial == 1)
    assert baseline_row.dropped is None and baseline_row.rounds == confirmation.repeats
    assert slow_row.dropped and "slower than the leader" in slow_row.dropped and not slow_row.significant
    assert slow_row.speedup < 0.8  # measured: a same-size draft costs about what it saves, and more
    assert slow_row.rounds < confirmation.repeats or confirmation.repeats == 1
    assert confirmation.fastest.trial == 2
    assert_recomputable(confirmation)
    fast_row = next(c for c in confirmation.configs if c.trial == 2)
    if confirmation.ended == WINNER:  # proven: faster than 1.02x below its interval
        assert confirmation.winner is fast_row and fast_row.significant and fast_row.speedup > 1.02
    else:
        assert confirmation.winner is None and confirmation.pick is baseline_row


MIX = PromptMix("race", (Prompt("a", "code", "def add(a, b):\n    return"),
                         Prompt("b", "chat", "Name three colours of the rainbow."),
                         Prompt("c", "chat", "Write a haiku about the sea.")))


@pytest.mark.usefixtures("no_server_left_behind")
def test_in_process_a_round_is_the_unit_and_the_race_runs_its_budget_or_stops_when_none_can_win(tiny_dir):
    target = tiny_dir / "tiny-target.gguf"
    drafting = SpecConfig(target, "draft-simple", tiny_dir / "tiny-draft.gguf")
    entrants = [Entrant("baseline", None, SpecConfig(target)), Entrant("trial", 1, drafting)]
    with WorkerEngine(context_size=256) as engine:
        confirmation = race(engine, entrants, MIX, max_tokens=16, budget=RaceBudget(rounds=3),
                            command=ServerCommand(256))
    assert confirmation.pairing == "round"  # the in-process engine holds one configuration at a time
    row = confirmation.configs[0]
    assert confirmation.repeats <= 3 and row.rounds == confirmation.repeats and row.prompts == 3
    assert confirmation.planned_rounds == 3
    assert_recomputable(confirmation)
