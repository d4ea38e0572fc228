"""DFlash/DSpark blocks recorded at a sample of positions, and a configuration's tokens per step estimated
from them with its sampling error.

Recording a block at every position, for every block size the space allows, is most of what a predicted
search costs at GPU scale (issue 40: 22 sizes x 22,500 positions per target). A block of size b is not
the first b rows of a larger one (the noise block is decoded non-causally: every row attends to every
other; measured on the fixtures by examples/benchmarks/block_replay.py), so each size keeps its own
recording, and each is recorded in windows: `WINDOW` consecutive positions, chosen systematically along
each trajectory from a random start, about `SAMPLE_POSITIONS` positions per size over the whole mix
(every position where the mix has fewer).

The replay then walks each window from its first position with the engine's step loop: a step reads
the block at its position, cuts its draft, keeps what the trajectory agrees with; the window ends at
the first step past its last position. Each prompt's steps stand for the prompt's decode in proportion
`scale` = the prompt's decode tokens / the tokens its windows emitted. The tokens per step over all
windows is a ratio estimate with windows as the sampling units; its standard error (with the finite
population correction) is stated relative to it: the predicted decode time, and so the speedup, moves
with the number of steps, by about that much.

A window's walk starts where the full walk may be in the middle of an accepted run, so its first step
sees a shorter run than the full walk would; over `WINDOW` positions (several steps) that start is
diluted, and the fixtures' sampled-versus-full figures include it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

from autotune.engines.speculation import Steps
from autotune.predict.replay import END, PromptReplay, Replay, script_of
from autotune.predict.trajectory import Trajectories, Trajectory

#: consecutive positions of one sampled window
WINDOW = 32
#: positions recorded per (draft, block size) over the whole mix by default; None: every one. On the
#: bigram fixture (examples/benchmarks/block_replay.py) a third of 1,536 positions put tokens per step within
#: 0.1-2.4 % of the full recording's but one configuration's predicted speedup 15 % off, and 300 of 570
#: positions moved the speedup by 0.7-1.0 %: no sample that saves much keeps it within 1 %, so a search
#: records every position until one does
SAMPLE_POSITIONS: int | None = None

#: one step from a recorded block: (block, room, script, index in the script of the token after `last`)
#: -> (batch size, tokens drafted, draft tokens kept)
DraftStep = Callable[[object, int, list[int], int], tuple[int, int, int]]


def sample_windows(length: int, fraction: float, *, seed: int, window: int = WINDOW) -> tuple[tuple[int, int], ...]:
    """The windows [start, end) of a trajectory of `length` positions recorded at `fraction` of them:
    evenly spaced from a random start (`seed`), at least one; the whole trajectory at a fraction of 1."""
    if fraction >= 1 or length <= window:
        return ((0, length),) if length else ()
    count = math.ceil(length / window)
    chosen = max(1, round(count * fraction))
    offset = random.Random(seed).random()
    picks = sorted({int((i + offset) * count / chosen) for i in range(chosen)})
    return tuple((j * window, min(length, (j + 1) * window)) for j in picks)


def sample_fraction(trajectories: Trajectories, positions: int | None = SAMPLE_POSITIONS) -> float:
    """The fraction of the mix's positions that records about `positions` of them (1: all; None: all)."""
    total = sum(min(len(t.tokens), trajectories.max_tokens) for t in trajectories.prompts)
    return min(1.0, positions / total) if total and positions is not None else 1.0


def walk_window(
    trajectory: Trajectory, blocks: Sequence, window: tuple[int, int], max_tokens: int, step: DraftStep
) -> tuple[Steps, int, int]:
    """The engine's step loop over `trajectory` from the window's first position until a step starts past
    its last one; returns the steps, the draft decodes (a block read) and the tokens emitted. `blocks[i]`
    is the block drafted after the trajectory's token i (past the list: no cache room, no draft)."""
    script = script_of(trajectory, max_tokens)
    n_prompt = len(trajectory.prompt_tokens)
    steps, decodes = Steps(), 0
    index, end = window  # index: of `last` in the script
    start = index
    while index < end and index + 1 < max_tokens and script[index] != END:
        room = max_tokens - (index + 1) - 1
        block = blocks[index] if room > 0 and index < len(blocks) else None
        size, drafted, kept = step(block, room, script, index + 1) if block is not None else (1, 0, 0)
        emitted = len(script[index + 1 : index + 2 + kept])
        if not emitted:  # the trajectory ends here (no end-of-generation token, no budget left)
            break
        decodes += block is not None
        if drafted:
            steps.drafted += drafted
            steps.accepted += kept
            steps.verify_steps += 1
        steps.batch_sizes.append(size)
        steps.positions.append(n_prompt + index)
        steps.emitted.append(emitted)
        index += emitted
    return steps, decodes, index - start


@dataclass(frozen=True)
class WindowCounts:
    """What one window's walk emitted and in how many steps: the sampling unit of the error."""

    tokens: int
    steps: int


def replay_windows(
    trajectories: Trajectories,
    windows_of: dict[tuple[int, ...], tuple[tuple[int, int], ...]],
    blocks_of: dict[tuple[int, ...], list],
    step: DraftStep,
    fraction: float,
) -> Replay:
    """A configuration's replay over the recorded windows of every trajectory (module docstring), with
    its tokens per step's relative sampling error."""
    prompts, units = [], []
    for trajectory in trajectories.prompts:
        key = tuple(trajectory.prompt_tokens)
        merged, decodes, emitted = Steps(), 0, 0
        for window in windows_of[key]:
            steps, window_decodes, window_tokens = walk_window(
                trajectory, blocks_of[key], window, trajectories.max_tokens, step
            )
            _extend(merged, steps)
            decodes += window_decodes
            emitted += window_tokens
            units.append(WindowCounts(window_tokens, len(steps.batch_sizes)))
        n_generated = len(script_of(trajectory, trajectories.max_tokens))
        scale = (n_generated - 1) / emitted if emitted else 1.0
        prompts.append(PromptReplay(trajectory.prompt_id, n_generated, merged, decodes, scale=scale))
    return Replay(tuple(prompts), sampling_error=ratio_error(units, fraction))


def _extend(steps: Steps, more: Steps) -> None:
    steps.batch_sizes += more.batch_sizes
    steps.positions += more.positions
    steps.emitted += more.emitted
    steps.drafted += more.drafted
    steps.accepted += more.accepted
    steps.verify_steps += more.verify_steps


def ratio_error(units: Sequence[WindowCounts], fraction: float) -> float:
    """The relative standard error of the tokens per step Σ tokens / Σ steps over sampled `units`, a
    ratio estimate with the finite population correction (0 where everything was recorded)."""
    units = [u for u in units if u.steps]
    if fraction >= 1 or len(units) < 2:
        return 0.0
    tokens, steps = sum(u.tokens for u in units), sum(u.steps for u in units)
    ratio = tokens / steps
    residual = sum((u.tokens - ratio * u.steps) ** 2 for u in units) / (len(units) - 1)
    mean_steps = steps / len(units)
    variance = (1 - fraction) * residual / (len(units) * mean_steps**2)
    return math.sqrt(variance) / ratio
