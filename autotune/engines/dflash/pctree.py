"""PCTree (parent-conditioned drafting trees) from one DSpark block: the tree, its construction, and
the Markov head it scores other parents with.

A community fork of llama-server has it as `--spec-dspark-pctree -k K -n N`. Each block row's logits
without the Markov bias are the row minus the bias of the greedy parent; a child of any parent token t
at depth d then scores `base_d + markov_w2 . markov_w1[t]`, i.e. what the draft would have said had the
chain passed through t (markov_w1/markov_w2 are read from the draft GGUF). The tree holds the greedy
chain, so from any state it accepts at least what linear DSpark would, then grows best-first by path
log-probability, each node taking at most k children, up to n drafted nodes, the draft's depth and
`MAX_TREE_LEAVES` leaves.

Host cost per step (it runs between two decodes): each depth's candidate children are the
`_CANDIDATES` leading tokens of its block row (every token of a vocabulary that small), found for all
depths at once without sorting the vocabulary (`leading_ids`); every score, chain or not, is a
log-probability among those candidates, and the Markov bias is computed for candidate tokens only
(markov_w2's candidate rows), once per expanded node. Nothing else touches the whole vocabulary,
and a budget the chain fills alone (n no more than its length) scores nothing.
"""

from __future__ import annotations

import heapq
import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autotune.errors import ModelFileError

__all__ = ["MAX_TREE_LEAVES", "BlockCandidates", "MarkovHead", "Tree", "build_tree", "leading_ids"]

#: Sequence ids of the DSpark target context: a PCTree verify step uses one per leaf.
MAX_TREE_LEAVES = 64

#: Children are scored among the leading `_CANDIDATES` tokens of each block row (a tree is a guess
#: either way: verification keeps the output exact); a vocabulary up to that size is scored exactly.
_CANDIDATES = 256
_GROUPS = 64  # leading_ids: a row is cut into this many interleaved groups


@dataclass
class MarkovHead:
    """bias(prev) = scale * markov_w2 . markov_w1[prev], over the target vocabulary."""

    w1: np.ndarray  # (n_vocab, R)
    w2: np.ndarray  # (n_vocab, R): rows of target token ids (d2t scattered), zero for unmapped ones
    scale: float = 1.0

    @classmethod
    def from_gguf(cls, path: Path) -> "MarkovHead":
        from autotune.gguf.header import read_header

        header = read_header(path)
        tensors = {t.name: t for t in header.tensors}
        if "markov_w1.weight" not in tensors or "markov_w2.weight" not in tensors:
            raise ModelFileError(f"{path.name}: no DSpark Markov head (markov_w1/markov_w2): PCTree needs one")
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            w1 = _tensor(data, tensors["markov_w1.weight"])
            w2 = _tensor(data, tensors["markov_w2.weight"])
            scale = (
                float(_tensor(data, tensors["markov_w2.scale"]).reshape(-1)[0]) if "markov_w2.scale" in tensors else 1.0
            )
            d2t = _tensor(data, tensors["d2t"]).reshape(-1).astype(np.int64) if "d2t" in tensors else None
        if d2t is not None:
            full = np.zeros((w1.shape[0], w2.shape[1]), dtype=np.float32)
            full[d2t] = w2
            w2 = full
        return cls(np.ascontiguousarray(w1), np.ascontiguousarray(w2), scale)

    def bias(self, prev: int, w2: np.ndarray | None = None) -> np.ndarray:
        """The Markov bias after token `prev`: over the whole vocabulary, or over the tokens whose
        markov_w2 rows `w2` holds (`self.w2[ids]`)."""
        out = (self.w2 if w2 is None else w2) @ self.w1[prev]
        return out * self.scale if self.scale != 1.0 else out


def _tensor(data: mmap.mmap, info) -> np.ndarray:
    """One tensor as float32 (numpy order: ggml's shape reversed), dequantized if need be."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    shape = tuple(reversed(info.shape))
    raw = np.frombuffer(data, dtype=np.uint8, count=info.n_bytes, offset=info.data_offset)
    if info.tensor_type == GGMLQuantizationType.F32:
        return raw.view(np.float32).reshape(shape).copy()
    if info.tensor_type == GGMLQuantizationType.F16:
        return raw.view(np.float16).reshape(shape).astype(np.float32)
    if info.tensor_type == GGMLQuantizationType.I64:
        return raw.view(np.int64).reshape(shape).copy()
    if info.tensor_type == GGMLQuantizationType.I32:
        return raw.view(np.int32).reshape(shape).copy()
    return dequantize(raw, info.tensor_type).reshape(shape).astype(np.float32)


@dataclass
class Tree:
    """Draft nodes in batch order: depths never decrease (llama.cpp refuses a batch in which a
    sequence's positions go down). Node 0 is the root (the last accepted token, depth 0);
    parents[i] < i for every other node."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self) -> list[dict[int, int]]:
        kids: list[dict[int, int]] = [{} for _ in self.tokens]
        for i in range(1, len(self.tokens)):
            kids[self.parents[i]][self.tokens[i]] = i
        return kids

    def sequences(self) -> list[list[int]]:
        """Sequence ids per node: leaf j is sequence j, and a node carries the ids of its leaves."""
        kids = self.children()
        seqs: list[list[int]] = [[] for _ in self.tokens]
        n_leaves = 0
        for i in range(len(self.tokens)):
            if not kids[i]:
                seqs[i].append(n_leaves)
                n_leaves += 1
        for i in range(len(self.tokens) - 1, 0, -1):
            seqs[self.parents[i]].extend(seqs[i])
        return seqs


def leading_ids(rows: np.ndarray, count: int) -> np.ndarray:
    """Ids of the `count` largest entries of each row of `rows` (in no order), shape (rows, count),
    without partitioning whole rows.

    Each row is cut into `_GROUPS` interleaved groups (a matrix of `_GROUPS` rows): the maxima of its
    columns are distinct entries, so the count-th largest of them is at most the row's count-th largest,
    and every entry at or above it lies in the `count` columns with the largest maxima, or in the few
    entries past the matrix. Only those are partitioned: about 300 of Qwen3's 151,936."""
    n_rows, n = rows.shape
    width = n // _GROUPS
    if n <= count:
        return np.broadcast_to(np.arange(n), (n_rows, n))
    if width < count:
        return np.argpartition(rows, -count, axis=1)[:, -count:]
    cut = _GROUPS * width
    maxima = rows[:, :cut].reshape(n_rows, _GROUPS, width).max(axis=1)
    all_columns = np.argpartition(maxima, -count, axis=1)[:, -count:]
    floors = np.take_along_axis(maxima, all_columns, axis=1).min(axis=1)
    out = np.empty((n_rows, count), dtype=np.int64)
    for i, (row, columns) in enumerate(zip(rows, all_columns)):
        block = row[:cut].reshape(_GROUPS, width)[:, columns].reshape(-1)  # group-major, as np.nonzero of the matrix
        hits = np.flatnonzero(block >= floors[i])
        ids, values = hits // count * width + columns[hits % count], block[hits]
        if cut < n:
            ids, values = np.concatenate([ids, np.arange(cut, n)]), np.concatenate([values, row[cut:]])
        out[i] = ids[np.argpartition(values, -count)[-count:]]
    return out


def _log_softmax(z: np.ndarray) -> np.ndarray:
    """log-softmax over the last axis, in float64."""
    z = z.astype(np.float64)
    top = z.max(axis=-1, keepdims=True)
    return z - (top + np.log(np.exp(z - top).sum(axis=-1, keepdims=True)))


@dataclass(frozen=True)
class BlockCandidates:
    """What a tree reads of a block's rows: each row's leading `_CANDIDATES` token ids (in `leading_ids`'
    order) and their logits. The replay (autotune.predict.blocks) stores exactly this per position, so a
    tree built from it is the tree the engine builds from the whole rows."""

    ids: np.ndarray  # (rows, candidates)
    values: np.ndarray  # (rows, candidates), float32

    @classmethod
    def of(cls, rows: np.ndarray) -> "BlockCandidates":
        ids = np.ascontiguousarray(leading_ids(rows, _CANDIDATES), dtype=np.int32)  # half the bytes a replay keeps
        return cls(ids, np.take_along_axis(rows, ids, 1).astype(np.float32))

    def __len__(self) -> int:
        return len(self.ids)

    def head(self, n_rows: int) -> "BlockCandidates":
        return BlockCandidates(self.ids[:n_rows], self.values[:n_rows])


class _Rows:
    """The block rows a tree reads, prepared for all its depths at once: the candidate tokens of a
    child at each depth (`ids`, one row per depth), their markov_w2 rows, the chain parent's
    log-probabilities over them, and the rows at them without the chain parent's Markov bias."""

    def __init__(self, candidates: BlockCandidates, greedy_parents: list[int], markov: MarkovHead):
        self.ids, values = candidates.ids, candidates.values
        self.w2 = markov.w2[self.ids]
        bias = np.matmul(self.w2, markov.w1[greedy_parents][:, :, None])[:, :, 0]
        self.chain_logp = _log_softmax(values)
        self.base = values.astype(np.float32) - (bias * markov.scale if markov.scale != 1.0 else bias)

    def child_logp(self, depth: int, parent: int, markov: MarkovHead) -> np.ndarray:
        """Log-probabilities of the candidates at `depth` after an off-chain `parent`."""
        return _log_softmax(self.base[depth] + markov.bias(parent, self.w2[depth]))


def build_tree(
    last: int,
    chain: list[int],
    rows: np.ndarray | BlockCandidates,
    markov: MarkovHead,
    *,
    k: int,
    n: int,
    max_leaves: int = MAX_TREE_LEAVES,
) -> Tree:
    """The PCTree of one DSpark block.

    `rows[d]` are the block's (Markov-biased) logits of draft depth d + 1 (whole rows, or their
    `BlockCandidates`) and `chain` the greedy draft read from them (possibly shorter than `rows`:
    p-min, n-max, room). The tree holds the
    first `n` tokens of the chain, then the best of the top-`k` children of its nodes by path
    log-probability, children scored with the Markov bias of their own parent. Expansion is lazy
    (a child never scores above its parent), so only nodes that can still win are expanded.
    """
    depth_max = min(len(chain), len(rows))
    if depth_max >= n:  # the chain alone fills the budget: nothing to score
        return Tree(tokens=[last] + chain[:n], parents=list(range(-1, n)), depths=list(range(n + 1)))
    tokens, parents, depths, scores = [last], [-1], [0], [0.0]
    on_chain = [True]
    kids: list[set[int]] = [set()]
    n_leaves = 1
    if isinstance(rows, np.ndarray):
        rows = BlockCandidates.of(rows[:depth_max])
    prepared = _Rows(rows.head(depth_max), [last] + chain[: depth_max - 1], markov) if depth_max else None

    def add(parent: int, token: int, score: float, chain_node: bool) -> int:
        nonlocal n_leaves
        if kids[parent]:
            n_leaves += 1
        kids[parent].add(token)
        tokens.append(token)
        parents.append(parent)
        depths.append(depths[parent] + 1)
        scores.append(score)
        on_chain.append(chain_node)
        kids.append(set())
        return len(tokens) - 1

    def children(node: int) -> list[tuple[int, float]]:
        """The node's best k children not in the tree yet: (token, log-probability)."""
        d = depths[node]
        logp = prepared.chain_logp[d] if on_chain[node] else prepared.child_logp(d, tokens[node], markov)
        taken = kids[node]
        m = min(k + len(taken), logp.size)
        top = np.argpartition(logp, -m)[-m:]
        top = top[np.argsort(-logp[top])]
        ranked = zip(prepared.ids[d, top].tolist(), logp[top].tolist())
        return [(token, lp) for token, lp in ranked if token not in taken][:k]

    node = 0
    for d, token in enumerate(chain[:depth_max]):
        j = int(np.flatnonzero(prepared.ids[d] == token)[0])
        node = add(node, token, scores[node] + float(prepared.chain_logp[d, j]), True)
    # entries: (-score, order, parent, token); token -1 = "expand parent" (its children score below it)
    heap: list[tuple[float, int, int, int]] = [
        (-scores[i], i, i, -1) for i in range(len(tokens)) if depths[i] < depth_max
    ]
    heapq.heapify(heap)
    counter = len(heap)
    while heap and len(tokens) - 1 < n:
        neg, _, parent, token = heapq.heappop(heap)
        if token < 0:
            for child_token, lp in children(parent):
                heapq.heappush(heap, (-(scores[parent] + lp), counter, parent, child_token))
                counter += 1
            continue
        if token in kids[parent] or len(kids[parent]) >= k or (kids[parent] and n_leaves >= max_leaves):
            continue
        child = add(parent, token, -neg, False)
        if depths[child] < depth_max:
            heapq.heappush(heap, (neg, counter, child, -1))
            counter += 1
    # batch order: by depth (stable), parents remapped
    order = sorted(range(len(tokens)), key=lambda i: depths[i])
    where = {old: new for new, old in enumerate(order)}
    return Tree(
        tokens=[tokens[i] for i in order],
        parents=[-1 if parents[i] < 0 else where[parents[i]] for i in order],
        depths=[depths[i] for i in order],
    )
