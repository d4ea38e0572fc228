"""What a decode step costs, measured in-process where it is cheap and repeatable: the target's decode of
a batch of b tokens with b output rows at a context depth, llama-server's sampler chain per emitted
position, and a draft model's decode per token and per mirrored verify batch.

Every step is timed by `timed_ms`, which waits for the llama.cpp work it queued before the clock stops.
A step's time is interpolated linearly in the batch size between the measured sizes, and linearly in
the depth between the two measured depths. What this leaves out, measured against llama-server by
`calibrate`: the server's own work per step (slot bookkeeping, its sampler clones, HTTP), which the
calibration's per-step term absorbs, and the n-gram drafters' host time (microseconds in C++).
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import llama_cpp
import numpy as np

from autotune.engines.sampler import SamplerChain
from autotune.llamacpp.bindings import Context

#: batch sizes measured (up to the longest the space can verify); the rest are interpolated
BATCH_GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 56, 65)
REPEATS = 3


@dataclass(frozen=True)
class Curve:
    """Decode time (ms) of a batch of each measured size at each measured depth: medians, and spread."""

    sizes: tuple[int, ...]
    depths: tuple[int, ...]
    ms: tuple[tuple[float, ...], ...]  # [depth][size] medians
    spread: float  # median over the points of (max - min) / median across the repeats

    def __post_init__(self) -> None:
        # every size up to the largest measured, interpolated once: `at` runs per replayed step
        every = np.arange(self.sizes[-1] + 1)
        object.__setattr__(self, "_dense", [np.interp(every, self.sizes, row).tolist() for row in self.ms])

    def at(self, size: int, depth: float) -> float:
        dense = self._dense
        size = min(size, len(dense[0]) - 1)
        low_ms = dense[0][size]
        if len(self.depths) == 1:
            return low_ms
        low, high = self.depths[0], self.depths[-1]
        weight = (depth - low) / (high - low) if high > low else 0.0
        return max(low_ms + weight * (dense[-1][size] - low_ms), 0.0)

    def as_dict(self) -> dict:
        return {
            "sizes": list(self.sizes),
            "depths": list(self.depths),
            "ms": [list(r) for r in self.ms],
            "spread": self.spread,
        }


@dataclass(frozen=True)
class CostModel:
    """A target's step costs (and its drafts', by draft file name), measured on this machine.

    A draft model (draft-simple) has `drafts` (its decode per batch size) and `draft_sampler_ms`; a
    DFlash/DSpark draft has `blocks` (its decode of a noise block per block size), `injects` (feeding it
    the target's layer inputs of n kept rows) and, for PCTree, `trees` (the target's verify of a tree
    of n nodes) and, where the in-process engine is the arbiter, `tree_builds` (its Python tree build)."""

    target: Curve
    sampler_ms: float  # the request's sampler chain, per emitted position
    drafts: dict[str, Curve] = field(default_factory=dict)
    draft_sampler_ms: dict[str, float] = field(default_factory=dict)
    blocks: dict[str, Curve] = field(default_factory=dict)
    injects: dict[str, Curve] = field(default_factory=dict)
    trees: dict[str, Curve] = field(default_factory=dict)
    tree_builds: dict[str, Curve] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "target": self.target.as_dict(),
            "sampler_ms": self.sampler_ms,
            "drafts": _curves(self.drafts),
            "draft_sampler_ms": self.draft_sampler_ms,
            "blocks": _curves(self.blocks),
            "injects": _curves(self.injects),
            "trees": _curves(self.trees),
            "tree_builds": _curves(self.tree_builds),
        }


def _curves(curves: dict[str, Curve]) -> dict:
    return {k: v.as_dict() for k, v in curves.items()}


def measure_curve(
    context: Context,
    fill: Sequence[int],
    *,
    depths: Sequence[int],
    max_size: int,
    repeats: int = REPEATS,
    seed: int = 0,
) -> Curve:
    """Decode batches of each grid size (up to `max_size`) with every row output, at each depth (`fill`
    supplies the tokens)."""
    sizes = grid_sizes(max_size)

    def prepare(depth: int) -> None:
        context.clear()
        context.decode(list(fill[:depth]), 0)

    def step(size: int, depth: int) -> float:
        elapsed = timed_ms(lambda: context.decode(list(fill[depth : depth + size]), depth, n_outputs=size), context)
        context.truncate(depth)
        return elapsed

    return timed_curve(sizes, depths, prepare, step, repeats=repeats, seed=seed)


def timed_ms(call: Callable[[], object], *contexts) -> float:
    """The ms `call()` takes, its llama.cpp work included: each of `contexts` (what it runs on, anything with
    the llama_context pointer `ptr`) is synchronized before the clock starts and before it stops.

    On a GPU backend llama_decode and llama_process return once the graph is queued, so a clock stopped
    there measures the launch, and the next step's clock the tail of this one. llama_synchronize waits for
    a context's queued work (a no-op where there is none, and on the CPU, whose calls return when done).
    A read-back of logits synchronizes too, but not every step reads any: an injection reads nothing."""
    for context in contexts:
        llama_cpp.llama_synchronize(context.ptr)
    started = time.perf_counter()
    call()
    for context in contexts:
        llama_cpp.llama_synchronize(context.ptr)
    return (time.perf_counter() - started) * 1000


def grid_sizes(max_size: int) -> tuple[int, ...]:
    """The sizes of BATCH_GRID below `max_size`, and `max_size`."""
    return tuple(s for s in BATCH_GRID if s < max_size) + (max_size,)


def timed_curve(
    sizes: Sequence[int],
    depths: Sequence[int],
    prepare: Callable[[int], None],
    step: Callable[[int, int], float],
    *,
    repeats: int = REPEATS,
    seed: int = 0,
) -> Curve:
    """A Curve of `step(size, depth)` (which returns the ms it timed and leaves the state as `prepare(depth)`
    left it) at every size and depth: one untimed warm-up at the largest size, then `repeats` passes in
    shuffled order so drift spreads over all sizes."""
    order = random.Random(seed)
    table: list[tuple[float, ...]] = []
    spreads = []
    for depth in depths:
        prepare(depth)
        step(sizes[-1], depth)
        samples: dict[int, list[float]] = {s: [] for s in sizes}
        for _ in range(repeats):
            shuffled = list(sizes)
            order.shuffle(shuffled)
            for size in shuffled:
                samples[size].append(step(size, depth))
        table.append(tuple(statistics.median(samples[s]) for s in sizes))
        spreads += [(max(v) - min(v)) / statistics.median(v) for v in samples.values() if statistics.median(v) > 0]
    return Curve(tuple(sizes), tuple(depths), tuple(table), round(statistics.median(spreads), 4) if spreads else 0.0)


def measure_sampler(context: Context, sampler: SamplerChain, token: int, *, count: int = 50) -> float:
    """Median ms of one sampler-chain pass over a full vocabulary row."""
    context.clear()
    context.decode([token], 0)
    times = [timed_ms(lambda: sampler.sample(context, -1), context) for _ in range(count)]
    context.clear()
    return statistics.median(times)


def fill_tokens(prompts: Sequence[Sequence[int]], length: int) -> list[int]:
    """`length` real tokens for the depth measurements: the prompts (and their outputs) repeated."""
    pool = [t for p in prompts for t in p] or [1]
    return [pool[i % len(pool)] for i in range(length)]
