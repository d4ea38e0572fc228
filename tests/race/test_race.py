"""The race on real llama.cpp, each test driven to its outcome: an A/A race (the plain command against
itself under another name) names no winner; a real, known difference (the plain command on two threads
against one) is named at the look that proves it, in whichever round this machine's speed puts that, and
printed from the round after the decision; a configuration as costly as the target leaves at the look that
shows it; whole rounds in-process. Figures are checked against the stored units, recomputed apart from the
race's own bookkeeping; what is asserted is what the race decides, never how fast this box is. (The
decision's error rates are checked on synthetic rounds: tests/race/test_simulated.py.)"""

from __future__ import annotations

import math
import shutil

import pytest

from autotune.engines.server import ServerEngine
from autotune.engines.worker import WorkerEngine
from autotune.errors import UsageError
from autotune.measure.paired import Units, paired_speedup
from autotune.measure.prompts import Prompt, PromptMix, default_mix_path, load_prompt_mix
from autotune.race.entrants import Entrant
from autotune.race.race import RaceBudget, race
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.study.verdict import BUDGET_SPENT, MACHINE_MOVED, NONE_CAN_WIN, WINNER, RaceVerdict


def test_a_budget_is_rounds_or_time():
    assert RaceBudget.parse("6") == RaceBudget(rounds=6)
    assert RaceBudget.parse("5m") == RaceBudget(seconds=300.0) and RaceBudget.parse("90s") == RaceBudget(seconds=90.0)
    assert RaceBudget(rounds=2).spent(2, 1.0) and not RaceBudget(rounds=2).spent(1, 1e6)
    assert RaceBudget(seconds=60).spent(0, 60.0) and not RaceBudget(seconds=60).spent(9, 59.0)
    assert RaceBudget(rounds=4).left_s(1, 30.0) == 90.0  # three rounds left at the first one's pace
    for bad in ("0", "2.5", "-3", "soon", "5h"):
        with pytest.raises(UsageError, match="--race-budget"):
            RaceBudget.parse(bad)


def stored_ratio(confirmation: RaceVerdict, label: str, rounds: slice = slice(None)) -> float:
    """A row's speedup summed from its stored per-prompt times, apart from `paired_speedup`: the baseline's
    time over the row's on the prompts both ran in each round."""
    restored = RaceVerdict.from_dict(confirmation.as_dict())
    row = next(r for r in restored.configs if r.label == label)
    base = restored.baseline_of(row)
    a = b = 0.0
    for ours, theirs in list(zip(row.decode_ms, base.decode_ms))[rounds]:
        a += sum(theirs[: len(ours)])
        b += sum(ours)
    return a / b


def ratio_at_decision(confirmation: RaceVerdict, label: str, decided_by: str) -> float:
    """A winner's point at its decision, from the stored units of the rounds before the one after it, as the
    test that decided computes it: the per-prompt sequence's is their summed ratio (`stored_ratio`), the
    stratified test's the geometric mean of the complete rounds' ratios."""
    before = range(confirmation.after_decision_round)
    if decided_by == "per-prompt sequence":
        return stored_ratio(confirmation, label, slice(0, before.stop))
    row = next(r for r in confirmation.configs if r.label == label)
    complete = [r for r in before if len(row.decode_ms[r]) == len(confirmation.prompt_ids)]
    return math.exp(sum(math.log(stored_ratio(confirmation, label, slice(r, r + 1))) for r in complete) / len(complete))


@pytest.fixture
def gemma_copy(gemma_path, tmp_path):
    target = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    shutil.copy(gemma_path, target)
    return target


@pytest.fixture
def demo_mix(gemma_path):
    return load_prompt_mix(default_mix_path([gemma_path])[0]).take(per_category=1)


#: each side of the control's interval: the level it states (1 % a race), written here apart from the code's
#: constant so that a loosened level fails the A/A test below
CONTROL_ONE_SIDED = 0.005


@pytest.mark.slow
@pytest.mark.usefixtures("no_server_left_behind")
def test_an_aa_race_names_no_winner(gemma_copy, demo_mix):
    """An A/A race ends without a winner; it may end because the machine's speed moved only with the
    evidence: the control's interval, recomputed from its stored units at the stated level, rules out
    1.00x. And where that interval rules it out, the race did end there. (A race ended by more than
    MAX_VOID void rounds keeps none of their units, so it cannot show the evidence and fails here.)"""
    same = Entrant("trial", 1, SpecConfig(gemma_copy))  # the plain command under another name
    with ServerEngine(context_size=2048) as engine:
        confirmation = race(
            engine,
            [Entrant("baseline", 0, SpecConfig(gemma_copy)), same],
            demo_mix,
            max_tokens=32,
            budget=RaceBudget(rounds=2),
            command=ServerCommand(2048),
        )
    assert confirmation.pairing == "prompt" and confirmation.winner is None
    assert confirmation.ended in (NONE_CAN_WIN, BUDGET_SPENT, MACHINE_MOVED)
    assert confirmation.pick.role == "baseline"
    low, high = confirmation.configs[0].speedup_ci
    assert low < 1.02  # the same command is never proven faster, however loaded the box
    restored = RaceVerdict.from_dict(confirmation.as_dict())
    (control,) = restored.controls
    base = restored.baseline_of(control)
    assert control.role == "control" and control.failure is None
    evidence = paired_speedup(
        Units.of(base.decode_ms, base.tokens), Units.of(control.decode_ms, control.tokens), pair_by_unit=True
    ).interval(CONTROL_ONE_SIDED)
    ended, moved = confirmation.ended, evidence[0] > 1.0 or evidence[1] < 1.0
    assert (ended == MACHINE_MOVED) == moved, (evidence, confirmation.void_rounds)
    assert control.speedup_ci_level == 1 - CONTROL_ONE_SIDED
    assert control.speedup_ci == pytest.approx(evidence, abs=1e-3)  # what is stored is this interval


@pytest.mark.slow
@pytest.mark.usefixtures("no_server_left_behind")
def test_a_real_difference_is_named_within_a_round_and_printed_from_the_round_after(gemma_copy, demo_mix):
    one_thread = SpecConfig(gemma_copy, runtime={"threads": 1})
    two_threads = SpecConfig(gemma_copy, runtime={"threads": 2})
    looks = []
    with ServerEngine(context_size=2048) as engine:
        confirmation = race(
            engine,
            [Entrant("baseline", 0, one_thread), Entrant("trial", 1, two_threads)],
            demo_mix,
            max_tokens=32,
            budget=RaceBudget(rounds=3),
            command=ServerCommand(2048),
            on_look=looks.append,
        )
    # the decision and its direction, not how soon this box made it: the round it came in is the machine's
    assert confirmation.ended == WINNER and confirmation.decided_round is not None
    winner = confirmation.winner
    assert winner is not None and winner.trial == 1 and winner.significant
    decided = confirmation.decided_round
    assert looks[-1].round_ == decided and len(winner.decode_ms[decided]) == looks[-1].prompts_done  # no look after
    after = confirmation.after_decision_round
    assert after == decided + 1 and len(winner.decode_ms[after]) == len(demo_mix)
    assert winner.speedup == pytest.approx(stored_ratio(confirmation, winner.label, slice(after, after + 1)), rel=1e-3)
    assert winner.speedup_at_decision == pytest.approx(
        ratio_at_decision(confirmation, winner.label, winner.decided_by), rel=1e-3
    )
    assert winner.speedup_ci[0] > 1.02  # proven faster: above 1 + the minimum effect, as the race decides
    low, high = winner.speedup_ci  # the interval that decided, its point inside, at the level that decided
    assert low <= winner.speedup_at_decision <= high
    # either test may prove it (the per-prompt sequence within a round, the stratified one over complete
    # rounds): the level is the share of the 5 % of the one that did, a quarter for the per-prompt test
    shares = {"per-prompt sequence": 1 / 4, "stratified rounds": 3 / 4}
    assert winner.speedup_ci_level == pytest.approx(1 - 0.05 * shares[winner.decided_by])
    assert winner.replication_ci[0] < winner.speedup < winner.replication_ci[1]
    assert winner.ceiling is None or winner.ceiling >= 1.0  # no drafts: the counts bound nothing here


@pytest.mark.slow
@pytest.mark.usefixtures("no_server_left_behind")
def test_a_configuration_as_costly_as_the_target_leaves_after_the_prompts_that_show_it(gemma_copy, demo_mix):
    slow = SpecConfig(gemma_copy, "draft-simple", gemma_copy, {"draft_n_max": 8})  # a draft as costly as the target
    entrants = [Entrant("baseline", 0, SpecConfig(gemma_copy)), Entrant("trial", 1, slow)]
    with ServerEngine(context_size=2048) as engine:
        confirmation = race(
            engine, entrants, demo_mix, max_tokens=48, budget=RaceBudget(rounds=2), command=ServerCommand(2048)
        )
    row = confirmation.configs[0]
    assert row.dropped and not row.significant and confirmation.winner is None
    assert row.speedup <= row.speedup_ci[1] < 1.02  # it cannot be 1 + the minimum effect faster: what drops it
    assert row.speedup == pytest.approx(stored_ratio(confirmation, row.label), rel=1e-3)
    assert confirmation.ended == NONE_CAN_WIN
    # it left at the look that showed it, and the race ended there: not a prompt was run after it
    assert [len(r) for r in row.decode_ms] == [len(r) for r in confirmation.baselines[0].decode_ms]


MIX = PromptMix(
    "race",
    (
        Prompt("a", "code", "def add(a, b):\n    return"),
        Prompt("b", "chat", "Name three colours of the rainbow."),
        Prompt("c", "chat", "Write a haiku about the sea."),
    ),
)


@pytest.mark.usefixtures("no_server_left_behind")
def test_in_process_a_round_is_the_unit_and_the_race_runs_its_budget_or_stops_when_none_can_win(tiny_dir):
    target = tiny_dir / "tiny-target.gguf"
    drafting = SpecConfig(target, "draft-simple", tiny_dir / "tiny-draft.gguf")
    entrants = [Entrant("baseline", None, SpecConfig(target)), Entrant("trial", 1, drafting)]
    with WorkerEngine(context_size=256) as engine:
        confirmation = race(
            engine, entrants, MIX, max_tokens=16, budget=RaceBudget(rounds=3), command=ServerCommand(256)
        )
    assert confirmation.pairing == "round"  # the in-process engine holds one configuration at a time
    row = confirmation.configs[0]
    assert confirmation.repeats <= 3 and row.rounds == confirmation.repeats and row.prompts == 3
    assert confirmation.looks == confirmation.repeats  # one look a round
    assert all(len(r) == 3 for r in row.decode_ms)
    assert row.speedup == pytest.approx(stored_ratio(confirmation, row.label), rel=1e-3)
    base = confirmation.baselines[0]
    versus = paired_speedup(
        Units.of(base.decode_ms, base.tokens), Units.of(row.decode_ms, row.tokens), pair_by_unit=False
    )
    assert row.speedup_ci == pytest.approx(versus.interval(1 - row.speedup_ci_level), abs=1e-3)
