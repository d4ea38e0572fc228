"""What a DFlash/DSpark step costs besides the target's linear verify, measured in-process on the pair the
blocks were recorded with (autotune.predict.cost has the target's and a draft model's costs):

* the draft's decode of a noise block and the read-out of its chain, per block size (one per draft);
* feeding the draft the target's layer inputs of the rows a step kept (every step, drafted or not);
* for PCTree, the target's verify of a tree of n nodes with one sequence id per root-to-leaf path: the
  prefix shared into every leaf's sequence, the tree decode and the roll-back to the kept path. Not a
  linear batch of n: each node attends to its own ancestors only, and the KV cache is unified over the
  leaves' sequences.

The trees timed are real ones: built by `build_tree` from one block of the draft with the space's
largest k, one per node count of the grid up to the space's largest n. The in-process engine also
builds each tree in Python (`tree_builds`); where it is the arbiter, that is charged too.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from autotune.engines.dflash.contexts import DFlashPair
from autotune.engines.dflash.pctree import MarkovHead, Tree, build_tree
from autotune.predict.blocks import layer_inputs
from autotune.predict.cost import Curve, grid_sizes, timed_curve, timed_ms


def _draft_after(pair: DFlashPair, features: np.ndarray) -> Callable[[int], None]:
    """A curve's `prepare` for the draft: its cache then holds the target's layer inputs of `depth` positions."""

    def prepare(depth: int) -> None:
        pair.draft.clear()
        pair.draft.inject(features[:depth], 0)

    return prepare


def measure_block_curve(
    pair: DFlashPair, features: np.ndarray, fill: Sequence[int], *, max_rows: int, depths: Sequence[int]
) -> Curve:
    """The draft's decode of a noise block of each grid size up to `max_rows`, after `depth` injected rows,
    and the read-out of its greedy chain (each row's argmax, over the whole vocabulary)."""
    draft = pair.draft

    def step(size: int, depth: int) -> float:
        def draft_chain() -> None:
            logits, _ = draft.block([fill[depth]] + [pair.mask_token] * (size - 1), depth, confidence=False)
            logits.argmax(axis=1)

        elapsed = timed_ms(draft_chain, draft)
        draft.truncate(depth)
        return elapsed

    return timed_curve(grid_sizes(max_rows), depths, _draft_after(pair, features), step)


def measure_inject_curve(pair: DFlashPair, features: np.ndarray, *, max_rows: int, depths: Sequence[int]) -> Curve:
    """Feeding the draft n rows of the target's layer inputs, n on the grid up to `max_rows`."""
    draft = pair.draft

    def step(rows: int, depth: int) -> float:
        elapsed = timed_ms(lambda: draft.inject(features[depth : depth + rows], depth), draft)
        draft.truncate(depth)
        return elapsed

    return timed_curve(grid_sizes(max_rows), depths, _draft_after(pair, features), step)


def measure_tree_curve(pair: DFlashPair, fill: Sequence[int], trees: Sequence[Tree], *, depths: Sequence[int]) -> Curve:
    """The target's verify of each tree (one per node count) at each depth, as `DFlashDrafter._verify_tree`
    runs it: the prefix copied to every leaf's sequence, the tree decoded, the deepest path kept."""
    target = pair.target
    by_size = {len(tree): tree for tree in trees}

    def prepare(depth: int) -> None:
        target.clear()
        target.decode(list(fill[:depth]), 0)

    def step(size: int, depth: int) -> float:
        tree = by_size[size]
        seqs = tree.sequences()

        def verify() -> None:
            for s in range(1, len(seqs[0])):
                target.seq_cp(0, s)
            target.decode_tree(tree.tokens, [depth + d for d in tree.depths], seqs)
            target.keep_path(seqs[-1][0], depth + 1 + tree.depths[-1])

        elapsed = timed_ms(verify, target)
        target.truncate(depth)
        return elapsed

    return timed_curve(sorted(by_size), depths, prepare, step)


def block_rows(
    pair: DFlashPair, features: np.ndarray, fill: Sequence[int], *, spec_type: str, depth: int
) -> np.ndarray:
    """The rows a draft reads of its largest block after `depth` positions of `fill` (a copy)."""
    draft = pair.draft
    first_row = 0 if pair.anchor_first(spec_type) else 1
    draft.clear()
    draft.inject(features[:depth], 0)
    size = pair.n_draft_max(spec_type) + first_row
    logits, _ = draft.block([fill[depth]] + [pair.mask_token] * (size - 1), depth, confidence=False)
    rows = np.array(logits[first_row:])
    draft.truncate(depth)
    return rows


def sample_trees(rows: np.ndarray, last: int, markov: MarkovHead, *, k: int, n: int, max_leaves: int) -> list[Tree]:
    """Trees of every grid node count up to n + 1 that the block `rows` gives with `k` (one per count)."""
    chain = rows.argmax(axis=1).tolist()
    trees: dict[int, Tree] = {}
    for nodes in grid_sizes(n + 1):
        tree = build_tree(last, chain, rows, markov, k=k, n=nodes - 1, max_leaves=max_leaves)
        trees.setdefault(len(tree), tree)
    return [trees[size] for size in sorted(trees)]


def measure_tree_builds(
    rows: np.ndarray,
    last: int,
    markov: MarkovHead,
    trees: Sequence[Tree],
    *,
    k: int,
    max_leaves: int,
    depth: int,
    repeats: int = 5,
) -> Curve:
    """The in-process engine's host time to build each tree from whole block rows (its candidates read off
    the vocabulary, then the tree): what a PCTree step costs it between two decodes, in Python. The
    PCTree fork of llama-server does this in C++, where it is negligible."""
    chain = rows.argmax(axis=1).tolist()
    budgets = {len(tree): len(tree) - 1 for tree in trees}

    def step(size: int, _depth: int) -> float:
        return timed_ms(lambda: build_tree(last, chain, rows, markov, k=k, n=budgets[size], max_leaves=max_leaves))

    return timed_curve(sorted(budgets), [depth], lambda _depth: None, step, repeats=repeats)


def measure_block_costs(
    pair: DFlashPair,
    fill: Sequence[int],
    *,
    spec_type: str,
    depths: Sequence[int],
    markov: MarkovHead | None = None,
    k: int = 0,
    n: int = 0,
    in_process: bool = False,
) -> dict[str, Curve]:
    """The "blocks" and "injects" curves of one pair, and with `markov` its "trees" (PCTree up to k children
    and n nodes), and with `in_process` the "tree_builds" the in-process engine pays; `fill` must reach
    the last depth plus the draft's block."""
    rows = pair.n_draft_max(spec_type) + 1
    features = layer_inputs(pair, fill[: depths[-1] + rows])
    curves = {
        "blocks": measure_block_curve(pair, features, fill, max_rows=rows, depths=depths),
        "injects": measure_inject_curve(pair, features, max_rows=rows, depths=depths),
    }
    if markov is not None:
        block = block_rows(pair, features, fill, spec_type=spec_type, depth=depths[0])
        leaves = pair.target.n_seq_max
        trees = sample_trees(block, fill[depths[0]], markov, k=k, n=n, max_leaves=leaves)
        curves["trees"] = measure_tree_curve(pair, fill, trees, depths=depths)
        if in_process:
            curves["tree_builds"] = measure_tree_builds(
                block, fill[depths[0]], markov, trees, k=k, max_leaves=leaves, depth=depths[0]
            )
    pair.draft.clear()
    pair.target.clear()
    return curves
