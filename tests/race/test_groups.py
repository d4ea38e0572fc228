"""A race whose servers do not all fit at once still races prompt by prompt: one target's entrants at a time,
each on the round's prompts in the same order, on servers whose context is what the mix asks, not the
search space's. The engine is the real llama-server engine with room for fewer servers than the race
(a GPU smaller than the race); the servers alive at each look are counted from /proc."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autotune.engines.server import ServerEngine
from autotune.measure.prompts import Prompt, PromptMix
from autotune.race.entrants import Entrant
from autotune.race.race import RaceBudget, race
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.testing.processes import our_llama_servers

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

CONTEXT = 512
MIX = PromptMix(
    "groups",
    (
        Prompt("a", "code", "def add(a, b):\n    return"),
        Prompt("b", "chat", "Name three colours of the rainbow."),
        Prompt("c", "chat", "Write a haiku about the sea."),
    ),
)


class RoomFor(ServerEngine):
    """llama-server with room for `room` servers at once, whatever the machine's memory."""

    def __init__(self, room: int, **kwargs):
        super().__init__(**kwargs)
        self.room = room

    def holds_at_once(self, configs, mix, *, max_tokens) -> bool:
        return len(configs) <= self.room


def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def _two_targets(tiny_dir: Path, tmp_path: Path) -> tuple[Path, Path, list[Entrant]]:
    """Two targets (the second a copy of the first: its own references) and a draft-simple finalist of each."""
    first = tiny_dir / "tiny-target.gguf"
    second = Path(shutil.copy(first, tmp_path / "tiny-target-b.gguf"))
    return (
        first,
        second,
        [
            Entrant("baseline", None, SpecConfig(first)),
            Entrant("baseline", None, SpecConfig(second)),
            Entrant("trial", 1, SpecConfig(first, "draft-simple", tiny_dir / "tiny-draft.gguf", {"draft_n_max": 2})),
            Entrant("trial", 2, SpecConfig(second, "draft-simple", tiny_dir / "tiny-draft.gguf", {"draft_n_max": 3})),
        ],
    )


def _race_with_room(room: int, entrants: list[Entrant], mix: PromptMix, budget: RaceBudget, look, max_tokens=16):
    """The race of `entrants` over `mix` on llama-server with room for `room` servers, `look` hearing each look."""
    with RoomFor(room, context_size=CONTEXT) as engine:
        return race(
            engine, entrants, mix, max_tokens=max_tokens, budget=budget, command=ServerCommand(CONTEXT), on_look=look
        )


def test_one_target_at_a_time_where_the_race_does_not_fit_and_each_server_sized_to_the_mix(tiny_dir, tmp_path):
    first, second, entrants = _two_targets(tiny_dir, tmp_path)
    loaded: list[set[str]] = []  # at each look, the targets of the servers running
    contexts: set[int] = set()

    def look(status) -> None:
        argvs = [_argv(pid) for pid in our_llama_servers()]
        loaded.append({argv[argv.index("-m") + 1] for argv in argvs})
        contexts.update(int(argv[argv.index("-c") + 1]) for argv in argvs)
        assert len(argvs) <= 3

    # room for a target's baseline, control and finalist: 3, not 6
    confirmation = _race_with_room(3, entrants, MIX, RaceBudget(rounds=1), look)
    assert confirmation.pairing == "prompt"  # not whole mixes one configuration at a time
    assert all(len(targets) == 1 for targets in loaded)  # one target's servers at a time ...
    assert {t for targets in loaded for t in targets} == {str(first), str(second)}  # ... and each in turn
    assert contexts and max(contexts) < CONTEXT  # the mix's longest prompt and output, not the space's context
    assert {str(r.target) for r in confirmation.controls} == {str(first), str(second)}  # a control each
    for row in confirmation.baselines + confirmation.controls:  # every prompt of the round, its target's turn
        assert [len(round_) for round_ in row.decode_ms if round_][:1] == [len(MIX)]  # a void round is kept empty


def test_entrants_rotate_over_blocks_of_prompts_where_one_targets_servers_do_not_fit(tiny_dir):
    """Room for one server (a 24 GB card and an 8B target's race): each entrant in turn runs a block of the mix
    on a server of its own, a block the unit; a budget of one round is one pass, every prompt once."""
    target = tiny_dir / "tiny-target.gguf"
    entrants = [
        Entrant("baseline", None, SpecConfig(target)),
        Entrant("trial", 1, SpecConfig(target, "draft-simple", tiny_dir / "tiny-draft.gguf", {"draft_n_max": 2})),
    ]
    alive: list[int] = []  # llama-servers running at each look: none, each block's servers stopped with it

    def look(status) -> None:
        alive.append(len(our_llama_servers()))

    confirmation = _race_with_room(1, entrants, MIX, RaceBudget(rounds=1), look)
    assert confirmation.pairing == "block"
    # a block of ceil(3 / 4) = 1 prompt, three blocks a pass, no prompt twice in it; the trial (a draft as costly
    # as its target, about 0.2x) may leave after two blocks, proven unable to reach the goal
    blocks = confirmation.orders
    assert 2 <= len(blocks) <= len(MIX) and all(len(order) == 1 for order in blocks)
    assert len({order[0] for order in blocks}) == len(blocks)
    assert len(alive) == len(blocks) and set(alive) == {0}  # a look after each block, its servers stopped
    for row in confirmation.baselines + confirmation.controls:
        assert [len(times) for times in row.decode_ms] == [1] * len(blocks)


LONG_MIX = PromptMix(
    "groups-long",
    tuple(
        Prompt(f"p{i}", ("code", "chat")[i % 2], f"Count from {i} to {i + 5}, one number a line.") for i in range(10)
    ),
)


def test_targets_alternate_in_blocks_so_a_time_budget_stops_with_every_target_raced(tiny_dir, tmp_path):
    """Room for one target's servers at a time and a time budget spent at the first look: the race stops at the
    end of a block of prompts that every target's entrants ran (blocks of five: TARGET_BLOCK is 6), never inside
    the first target's turn, so the second target is raced on the same prompts as the first. (A look whose
    control has moved so far is no look, so the stop may come a block later: still at a block's end.)"""
    first, second, entrants = _two_targets(tiny_dir, tmp_path)
    loaded: list[set[str]] = []  # at each look, the targets whose servers are running

    def look(status) -> None:
        argvs = [_argv(pid) for pid in our_llama_servers()]
        loaded.append({argv[argv.index("-m") + 1] for argv in argvs})

    verdict = _race_with_room(3, entrants, LONG_MIX, RaceBudget(seconds=0.001), look, max_tokens=8)
    assert verdict.pairing == "prompt" and len(verdict.orders) == 1  # stopped inside the first round
    assert loaded and all(len(targets) == 1 for targets in loaded)  # one target's servers at a time
    assert {t for targets in loaded for t in targets} == {str(first), str(second)}  # and both raced
    ran = {str(row.target): len(row.decode_ms[0]) for row in verdict.baselines + verdict.controls}
    assert set(ran) == {str(first), str(second)}
    assert len(set(ran.values())) == 1 and next(iter(ran.values())) in (5, 10)  # the same prompts, whole blocks
