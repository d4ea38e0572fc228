"""Every in-process cost measurement waits for the llama.cpp work it times before its clock stops.

On a GPU backend llama_decode and llama_process return once the graph is queued; a context's work is
done only after llama_synchronize, or a read-back of its logits (llama.h: "This is automatically done
when using one of the functions below to obtain the computation results"). On the CPU both calls are
synchronous, so the times cannot show it; instead the real bindings are wrapped here and each clock
read (time.perf_counter: a step's start or stop) must find no context with queued work not yet waited
for: none of an earlier step's tail at a start, none of its own at a stop.
"""

from __future__ import annotations

import time

import llama_cpp
import pytest

from autotune.engines.dflash import bindings as dfc
from autotune.engines.python import PythonEngine
from autotune.predict.block_cost import (
    block_rows,
    measure_block_curve,
    measure_inject_curve,
    measure_tree_builds,
    measure_tree_curve,
    sample_trees,
)
from autotune.predict.blocks import layer_inputs
from autotune.predict.cost import measure_curve, measure_sampler
from autotune.spec.config import SpecConfig
from autotune.testing.dspark_fixtures import require_dspark_symbols

FILL = list(range(3, 200))
DEPTHS = [8, 24]


class Watch:
    """The wrapped calls in order: launches (llama_decode, llama_process) queue work on their context,
    waits (llama_synchronize, llama_get_logits) finish it; each clock read notes what was still queued."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, **contexts):
        self.names = {context.ptr: name for name, context in contexts.items()}
        self.queued: set[int] = set()
        self.unwaited: list[str] = []  # e.g. "stop of step 3: draft"
        self.clock_reads = 0
        self.launches_since_read = 0
        self.timed_launches = 0  # launches between two clock reads, i.e. inside some timed step
        self._wrap(monkeypatch, llama_cpp, "llama_decode", self._launch)
        self._wrap(monkeypatch, dfc, "llama_process", self._launch)
        self._wrap(monkeypatch, llama_cpp, "llama_synchronize", self._wait)
        self._wrap(monkeypatch, llama_cpp, "llama_get_logits", self._wait)
        perf_counter = time.perf_counter

        def clock() -> float:
            if self.queued:
                edge = "stop" if self.clock_reads % 2 else "start"
                queued = ", ".join(sorted(self.names.get(ctx, str(ctx)) for ctx in self.queued))
                self.unwaited.append(f"{edge} of step {self.clock_reads // 2}: {queued}")
            self.clock_reads += 1
            self.timed_launches += self.launches_since_read if self.clock_reads % 2 == 0 else 0
            self.launches_since_read = 0
            return perf_counter()

        monkeypatch.setattr(time, "perf_counter", clock)

    @staticmethod
    def _wrap(monkeypatch: pytest.MonkeyPatch, module, name: str, note) -> None:
        real = getattr(module, name)

        def wrapped(ctx, *args):
            note(ctx)
            return real(ctx, *args)

        monkeypatch.setattr(module, name, wrapped)

    def _launch(self, ctx: int) -> None:
        self.queued.add(ctx)
        self.launches_since_read += 1

    def _wait(self, ctx: int) -> None:
        self.queued.discard(ctx)


@pytest.fixture(scope="module")
def engine():
    with PythonEngine(context_size=512, threads=1) as engine:
        yield engine


@pytest.fixture
def plain(engine, tiny_dir):
    """The target's context and request sampler, as the step costs measure them."""
    target = tiny_dir / "tiny-target.gguf"
    engine.load(SpecConfig(target))
    return engine.context("target", target), engine.sampler("target", target)


@pytest.fixture
def dspark(engine, tiny_dir):
    """The tiny DSpark pair, the target's layer inputs along FILL, and PCTree trees of its block."""
    require_dspark_symbols()
    config = SpecConfig(tiny_dir / "tiny-target.gguf", "draft-dspark", tiny_dir / "tiny-dspark.gguf")
    engine.load(config)
    pair = engine.dflash_pair(config)
    rows = pair.n_draft_max("draft-dspark") + 1
    features = layer_inputs(pair, FILL[: DEPTHS[-1] + rows])
    block = block_rows(pair, features, FILL, spec_type="draft-dspark", depth=DEPTHS[0])
    trees = sample_trees(block, FILL[DEPTHS[0]], pair.markov(), k=2, n=6, max_leaves=pair.target.n_seq_max)
    return pair, features, rows, block, trees


def _assert_every_step_waits(watch: Watch, *, launches: bool) -> None:
    assert watch.clock_reads > 0 and watch.clock_reads % 2 == 0  # a start and a stop per step
    assert (watch.timed_launches > 0) == launches  # the steps time llama.cpp work (or host work only)
    assert watch.unwaited == [], "a step's clock read while a context still had work queued"


def test_the_target_decode_curve_waits_for_each_decode(plain, monkeypatch):
    context, _ = plain
    watch = Watch(monkeypatch, target=context)
    measure_curve(context, FILL, depths=DEPTHS, max_size=8, repeats=2)
    _assert_every_step_waits(watch, launches=True)


def test_the_sampler_time_waits_for_its_context(plain, monkeypatch):
    context, sampler = plain
    watch = Watch(monkeypatch, target=context)
    measure_sampler(context, sampler, FILL[0], count=5)
    _assert_every_step_waits(watch, launches=False)


def test_the_draft_block_curve_waits_for_each_block(dspark, monkeypatch):
    pair, features, rows, _, _ = dspark
    watch = Watch(monkeypatch, target=pair.target, draft=pair.draft)
    measure_block_curve(pair, features, FILL, max_rows=rows, depths=DEPTHS)
    _assert_every_step_waits(watch, launches=True)


def test_the_injection_curve_waits_for_each_injection(dspark, monkeypatch):
    """An injection reads nothing back: only an explicit llama_synchronize ends its work."""
    pair, features, rows, _, _ = dspark
    watch = Watch(monkeypatch, target=pair.target, draft=pair.draft)
    measure_inject_curve(pair, features, max_rows=rows, depths=DEPTHS)
    _assert_every_step_waits(watch, launches=True)


def test_the_tree_verify_curve_waits_for_each_tree(dspark, monkeypatch):
    pair, _, _, _, trees = dspark
    watch = Watch(monkeypatch, target=pair.target, draft=pair.draft)
    measure_tree_curve(pair, FILL, trees, depths=DEPTHS)
    _assert_every_step_waits(watch, launches=True)


def test_the_tree_builds_time_host_work_only(dspark, monkeypatch):
    pair, _, _, block, trees = dspark
    watch = Watch(monkeypatch, target=pair.target, draft=pair.draft)
    measure_tree_builds(
        block, FILL[DEPTHS[0]], pair.markov(), trees, k=2, max_leaves=pair.target.n_seq_max, depth=DEPTHS[0], repeats=2
    )
    _assert_every_step_waits(watch, launches=False)
