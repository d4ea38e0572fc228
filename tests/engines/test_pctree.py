"""PCTree construction (autotune.engines.dflash.pctree) against its definition, computed the slow way.

The engine's build_tree is lazy and touches only candidate tokens; the reference here scores every
node's children from scratch in float64 over the whole vocabulary (the Markov bias of every token),
then restricts them to the documented candidates (a row's 256 leading tokens: all of them at vocabulary
64, exact scores), and compares every frontier child at once. On
random logits the two must give the same tree, node for node, in the same batch order.
"""

from __future__ import annotations

import numpy as np
import pytest

from autotune.engines.dflash.pctree import _CANDIDATES, MarkovHead, Tree, build_tree, leading_ids


def reference_tree(
    last: int, chain: list[int], rows: np.ndarray, markov: MarkovHead, *, k: int, n: int, max_leaves: int
) -> Tree:
    depth_max = min(len(chain), len(rows))
    w1, w2 = markov.w1.astype(np.float64), markov.w2.astype(np.float64)

    def bias(token: int) -> np.ndarray:
        return markov.scale * (w2 @ w1[token])

    def child_logp(depth: int, token: int, on_chain: bool) -> dict[int, float]:
        z = rows[depth].astype(np.float64)
        if not on_chain:  # the row as the graph would have made it after `token` instead of the greedy parent
            z = z - bias(last if depth == 0 else chain[depth - 1]) + bias(token)
        ids = np.argsort(-rows[depth])[:_CANDIDATES]  # every token of a small vocabulary
        z = z[ids]
        logp = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
        return dict(zip(ids.tolist(), logp.tolist()))

    tokens, parents, depths, scores, on_chain = [last], [-1], [0], [0.0], [True]
    for d in range(min(depth_max, n)):
        tokens.append(chain[d])
        parents.append(len(tokens) - 2)
        depths.append(d + 1)
        scores.append(scores[-1] + child_logp(d, chain[d], True)[chain[d]])
        on_chain.append(True)
    offered: dict[int, list[tuple[int, float]]] = {}  # node -> its best k children when it was expanded

    def kids(node: int) -> list[int]:
        return [tokens[i] for i in range(len(tokens)) if parents[i] == node]

    while len(tokens) - 1 < n:
        n_leaves = sum(1 for i in range(len(tokens)) if not kids(i))
        best = None
        for node in range(len(tokens)):
            if depths[node] >= depth_max:
                continue
            if node not in offered:
                logp = child_logp(depths[node], tokens[node], on_chain[node])
                taken = kids(node)
                ranked = sorted((t for t in logp if t not in taken), key=lambda t: -logp[t])[:k]
                offered[node] = [(t, logp[t]) for t in ranked]
            present = kids(node)
            if len(present) >= k or (present and n_leaves >= max_leaves):
                continue
            for token, lp in offered[node]:
                if token not in present and (best is None or scores[node] + lp > best[0]):
                    best = (scores[node] + lp, node, token)
        if best is None:
            break
        score, node, token = best
        tokens.append(token)
        parents.append(node)
        depths.append(depths[node] + 1)
        scores.append(score)
        on_chain.append(False)
    order = sorted(range(len(tokens)), key=lambda i: depths[i])
    where = {old: new for new, old in enumerate(order)}
    return Tree(
        tokens=[tokens[i] for i in order],
        parents=[-1 if parents[i] < 0 else where[parents[i]] for i in order],
        depths=[depths[i] for i in order],
    )


def random_block(rng, vocab: int, depth: int, rank: int, scale: float = 1.0):
    markov = MarkovHead(
        rng.standard_normal((vocab, rank)).astype(np.float32),
        rng.standard_normal((vocab, rank)).astype(np.float32),
        scale,
    )
    rows = (rng.standard_normal((depth, vocab)) * 3).astype(np.float32)
    return markov, rows, [int(r.argmax()) for r in rows]


@pytest.mark.parametrize("vocab", [64, 1000, 5000, 20_000])
def test_build_tree_equals_the_reference_construction(vocab):
    rng = np.random.default_rng(vocab)
    for trial in range(6):
        depth = int(rng.integers(2, 7))
        markov, rows, chain = random_block(rng, vocab, depth, rank=int(rng.integers(2, 9)), scale=(1.0, 0.5)[trial % 2])
        chain = chain[: int(rng.integers(1, depth + 1))]  # p-min or room may cut the chain short of the rows
        last = int(rng.integers(0, vocab))
        for k, n, max_leaves in [(1, 8, 64), (2, 8, 64), (3, 16, 64), (4, 32, 64), (4, 32, 5), (3, 2, 64)]:
            fast = build_tree(last, chain, rows, markov, k=k, n=n, max_leaves=max_leaves)
            assert fast == reference_tree(last, chain, rows, markov, k=k, n=n, max_leaves=max_leaves), (
                vocab,
                trial,
                k,
                n,
            )


def test_build_tree_grows_past_the_chain():
    """The comparison above means something only if trees branch: they do, up to their budget."""
    rng = np.random.default_rng(1)
    markov, rows, chain = random_block(rng, 20_000, 4, rank=4)
    tree = build_tree(3, chain, rows, markov, k=4, n=32)
    assert len(tree) - 1 == 32 and max(len(c) for c in tree.children()) == 4


@pytest.mark.parametrize("n", [5, 256, 300, 4096, 16_383, 16_384, 151_936])
def test_leading_ids_are_the_largest_entries(n):
    rng = np.random.default_rng(n)
    row = rng.standard_normal(n).astype(np.float32)
    count = min(256, n)
    rows = np.stack([row, -row, np.roll(row, 7)])
    for found, each in zip(leading_ids(rows, 256), rows):
        assert sorted(found.tolist()) == sorted(np.argsort(-each)[:count].tolist())
