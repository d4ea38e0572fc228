"""The race: the rule that drops an entrant, and a real race on llama-server with the real Gemma 3 270M
that drops a configuration slower by design and keeps the baseline."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autotune.engines.server import ServerEngine
from autotune.measure.prompts import PromptMix, default_mix_path, load_prompt_mix
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.study.race import Entrant, race, slower_than_leader


def _entrant(role: str, per_prompt: list[list[float]]) -> Entrant:
    entrant = Entrant(role, None, SpecConfig(target=Path("/m/t.gguf")))
    entrant.per_prompt = per_prompt
    entrant.mix_tok_s = [sum(r) / len(r) for r in per_prompt]
    return entrant


def test_only_an_entrant_slower_prompt_by_prompt_is_dropped_and_never_a_reference():
    leader = _entrant("trial", [[100, 80, 90, 70, 60, 95]] * 2)
    slower = _entrant("trial", [[90, 71, 80, 63, 52, 85], [91, 72, 81, 62, 54, 86]])  # ~10% slower on every prompt
    mixed = _entrant("trial", [[120, 60, 100, 50, 70, 80], [80, 95, 85, 85, 50, 100]])  # slower on average, not everywhere
    baseline = _entrant("baseline", [[50, 40, 45, 35, 30, 47]] * 2)  # much slower, but the reference
    dropped = slower_than_leader([leader, slower, mixed, baseline])
    assert dropped == [slower]


def test_holm_keeps_borderline_entrants_that_one_comparison_alone_would_drop():
    leader = _entrant("trial", [[100, 100, 100, 100]] * 2)
    first = _entrant("trial", [[97, 98, 97, 100]] * 2)  # one-sided p = 0.033 against the leader
    second = _entrant("trial", [[97, 98, 97, 100]] * 2)
    assert slower_than_leader([leader, first]) == [first]  # one comparison: 0.033 < 0.05
    assert slower_than_leader([leader, first, second]) == []  # two: Holm's first threshold is 0.025


@pytest.mark.slow
@pytest.mark.usefixtures("no_server_left_behind")
def test_a_race_on_llama_server_drops_a_slower_configuration_and_keeps_the_baseline(gemma_path, tmp_path):
    target = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    shutil.copy(gemma_path, target)
    bundled = load_prompt_mix(default_mix_path([gemma_path])[0]).take(per_category=1)
    mix = PromptMix(bundled.source, bundled.prompts[:6])
    slow = SpecConfig(target, "draft-simple", target, {"draft_n_max": 8})  # a draft as costly as the target
    fast = SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 6, "ngram_simple_size_m": 16})
    entrants = [Entrant("baseline", 0, SpecConfig(target)), Entrant("trial", 1, slow), Entrant("trial", 2, fast)]
    with ServerEngine(context_size=2048) as engine:
        confirmation = race(engine, entrants, mix, max_tokens=48, rounds=3, command=ServerCommand(2048))
    baseline_row = confirmation.baselines[0]
    slow_row = next(c for c in confirmation.configs if c.trial == 1)
    assert baseline_row.dropped is None and len(baseline_row.samples) == confirmation.repeats
    assert slow_row.dropped and "slower than the leader" in slow_row.dropped
    assert slow_row.speedup < 0.8  # measured: a same-size draft costs about what it saves, and more
    assert confirmation.fastest.trial == 2
    # the winner only where significantly faster than the baseline (48 tokens here: often 1.0-1.1x, p > 0.05)
    fast_row = next(c for c in confirmation.configs if c.trial == 2)
    if fast_row.p_value < 0.05 and fast_row.speedup > 1:
        assert confirmation.winner is fast_row
    else:
        assert confirmation.winner is None
