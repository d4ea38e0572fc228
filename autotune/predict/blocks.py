"""draft-dflash and draft-dspark (linear and PCTree) without re-running the drafter per configuration:
the draft's block at the positions of every trajectory, recorded once per (draft file, block size): at
every position, or in windows at a sample of them (autotune.predict.block_sample).

A DFlash/DSpark draft is one non-causal decode of the noise block `[last, <mask> ...]` (see
autotune.engines.dflash.drafter): every row attends to every other, so a block of n_max + 1 rows is
not a longer block cut short, and each block size the space allows is recorded on its own. Along a
trajectory the draft's cache holds the target's layer inputs of every token before `last`, as it does
in the engine (there they arrive with each verify batch, here one token at a time: the same values up
to the last bits of a different batch shape).

What a position keeps: the greedy chain (each row's argmax), each row's top-10 probability (draft-dflash's
`p_min` test), DSpark's confidence where the file has the head, and, for PCTree, the rows'
`BlockCandidates` (all a tree reads). A configuration then cuts its draft from the chain as the engine
does (`p_min`, `n_min`, the room left) and, for PCTree, builds its tree from the candidates with the
engine's own `build_tree`; the tree's accepted path is read off the trajectory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from autotune.engines.dflash.contexts import DFlashPair
from autotune.engines.dflash.pctree import MAX_TREE_LEAVES, BlockCandidates, MarkovHead, build_tree
from autotune.engines.drafters.draft_model import top_k_probability
from autotune.predict.block_sample import replay_windows, sample_windows
from autotune.predict.replay import Replay
from autotune.predict.trajectory import Trajectories, Trajectory
from autotune.spec.config import SpecConfig


@dataclass(frozen=True)
class Block:
    """One position's draft block, as far as the replay reads it (rows from the first one the type reads)."""

    chain: tuple[int, ...]  # each row's argmax
    top_probability: tuple[float, ...] | None  # each row's top-10 probability of its argmax, where asked for
    confidence: tuple[float, ...] | None  # DSpark's confidence head, where asked for
    candidates: BlockCandidates | None  # PCTree's view of the rows, where asked for


@dataclass
class DraftBlocks:
    """Per prompt (by its token ids), the block at each trajectory position (None where the sample left it
    out: only inside `windows`), for one spec type and size."""

    spec_type: str
    size: int  # rows decoded: n_max + the rows before the first one read
    first_row: int
    limit: int  # the most rows a draft reads (the draft's block size, less its anchor row where it has one)
    fraction: float = 1.0  # of the positions recorded (1: every one)
    blocks: dict[tuple[int, ...], list[Block | None]] = field(default_factory=dict)
    windows: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = field(default_factory=dict)  # recorded, per prompt
    draft_decodes: int = 0  # what recording cost: blocks and injections

    @classmethod
    def record(
        cls,
        pair: DFlashPair,
        trajectories: Trajectories,
        *,
        spec_type: str,
        n_maxes: Sequence[int],
        p_min: bool = False,
        confidence: bool = False,
        candidates: Sequence[int] = (),
        fraction: float = 1.0,
        seed: int = 0,
    ) -> dict[int, "DraftBlocks"]:
        """Walk every trajectory through the target once and the draft once per block size, decoding one
        block per recorded position and size; keyed by n_max, each clamped to what the draft's block
        gives, as llama.cpp clamps it. `p_min`: keep what a p_min cut reads (DSpark's confidence with
        `confidence`, else each row's top-10 probability: a pass over the vocabulary per row, so only
        when asked); `candidates`: the n_max values whose PCTree candidates are kept; `fraction`: of the
        positions recorded, in windows (`sample_windows`, seeded by `seed` and the prompt's index)."""
        first_row = 0 if pair.anchor_first(spec_type) else 1
        limit = pair.n_draft_max(spec_type)
        found = {
            n: cls(spec_type, n + first_row, first_row, limit, min(fraction, 1.0))
            for n in sorted({min(n, limit) for n in n_maxes})
        }
        keep = {min(n, limit) for n in candidates}
        for index, trajectory in enumerate(trajectories.prompts):
            key = tuple(trajectory.prompt_tokens)
            features = layer_inputs(pair, list(trajectory.prompt_tokens) + list(trajectory.tokens))
            length = min(len(trajectory.tokens), trajectories.max_tokens)
            for n, blocks in found.items():
                blocks.windows[key] = sample_windows(length, fraction, seed=seed * 1_000_003 + index)
                blocks.blocks[key] = blocks._walk(
                    pair,
                    trajectory,
                    features,
                    blocks.windows[key],
                    p_min=p_min and not confidence,
                    confidence=p_min and confidence,
                    candidates=n in keep,
                )
        return found

    def _walk(
        self,
        pair: DFlashPair,
        trajectory: Trajectory,
        features: np.ndarray,
        windows: tuple[tuple[int, int], ...],
        *,
        p_min: bool,
        confidence: bool,
        candidates: bool,
    ) -> list[Block | None]:
        """The blocks at the positions of `windows` (None between them), the draft fed the target's layer
        inputs one position at a time inside a window and in one batch across a gap."""
        draft = pair.draft
        draft.clear()
        n_prompt = len(trajectory.prompt_tokens)
        draft.inject(features[:n_prompt], 0)
        fed = n_prompt  # the draft's cache holds the layer inputs of the positions before this one
        recorded = {p for start, end in windows for p in range(start, end)}
        blocks: list[Block | None] = []
        for p, last in enumerate(trajectory.tokens[: max(recorded, default=-1) + 1]):
            position = n_prompt + p
            if position + self.size > pair.target.n_ctx:
                break
            if p not in recorded:
                blocks.append(None)
                continue
            if fed < position:
                draft.inject(features[fed:position], fed)
                self.draft_decodes += 1
            logits, conf = draft.block([last] + [pair.mask_token] * (self.size - 1), position, confidence=confidence)
            rows = logits[self.first_row :]
            blocks.append(
                Block(
                    chain=tuple(int(t) for t in rows.argmax(axis=1)),
                    top_probability=tuple(float(top_k_probability(row)) for row in rows) if p_min else None,
                    confidence=tuple(float(c) for c in conf[self.first_row :]) if confidence else None,
                    candidates=BlockCandidates.of(rows) if candidates else None,
                )
            )
            draft.truncate(position)
            draft.inject(features[position : position + 1], position)
            fed = position + 1
            self.draft_decodes += 2
        return blocks

    def head(self, n_max: int) -> "DraftBlocks":
        """These blocks cut to their first `n_max` rows read: what a block of that size would be if the rows
        after did not change the ones before (they can: `agreement` measures it). Records nothing."""
        cut = DraftBlocks(
            self.spec_type,
            n_max + self.first_row,
            self.first_row,
            self.limit,
            self.fraction,
            windows=dict(self.windows),
        )
        cut.blocks = {
            key: [None if b is None else _head(b, n_max) for b in blocks] for key, blocks in self.blocks.items()
        }
        return cut

    def agreement(self, other: "DraftBlocks") -> tuple[float, int]:
        """The share of the positions both recorded whose greedy chains are the same, and how many there were."""
        same = compared = 0
        for key, blocks in other.blocks.items():
            for mine, theirs in zip(self.blocks.get(key, ()), blocks):
                if mine is not None and theirs is not None:
                    compared += 1
                    same += mine.chain == theirs.chain
        return (same / compared if compared else 0.0), compared

    @property
    def has_candidates(self) -> bool:
        """Whether PCTree's candidates were kept (a tree can be built from these blocks)."""
        firsts = (next((b for b in blocks if b is not None), None) for blocks in self.blocks.values())
        return any(block is not None and block.candidates is not None for block in firsts)

    def cutter(self, config: SpecConfig) -> "BlockCut":
        return BlockCut(self, config)


def _head(block: Block, n: int) -> Block:
    return Block(
        block.chain[:n],
        None if block.top_probability is None else block.top_probability[:n],
        None if block.confidence is None else block.confidence[:n],
        None if block.candidates is None else block.candidates.head(n),
    )


def layer_inputs(pair: DFlashPair, tokens: Sequence[int]) -> np.ndarray:
    """The target's layer inputs (what the draft is fed) at every position of `tokens`, decoded from 0."""
    target = pair.target
    target.clear()
    parts = []
    for start in range(0, len(tokens), target.n_batch):
        chunk = list(tokens[start : start + target.n_batch])
        target.decode(chunk, start)
        parts.append(np.array(target.features(slice(0, len(chunk)))))
    return np.concatenate(parts)


class BlockCut:
    """How linear draft-dflash / draft-dspark cut a recorded block into a draft, as `DFlashDrafter._draft`
    cuts the rows it decoded (p_min, then n_min, then the room left)."""

    def __init__(self, blocks: DraftBlocks, config: SpecConfig):
        self.n_min = min(int(config.value("draft_n_min")), blocks.limit)
        self.p_min = float(config.value("draft_p_min"))
        self.confidence = config.spec_type == "draft-dspark" and self.p_min > 0

    def cut(self, block: Block, room: int) -> list[int]:
        chain = list(block.chain)
        if self.p_min > 0:
            scores = block.confidence if self.confidence else block.top_probability
            for j, score in enumerate(scores):
                if score < self.p_min:
                    del chain[j:]
                    break
        if len(chain) < self.n_min:
            return []
        return chain[:room]


def replay_linear(blocks: DraftBlocks, config: SpecConfig, trajectories: Trajectories) -> Replay:
    """Linear draft-dflash / draft-dspark over every trajectory (its recorded windows), the engine's step
    loop drafting by cutting the recorded blocks (`BlockCut`)."""
    cutter = blocks.cutter(config)

    def step(block: Block, room: int, script: list[int], k_next: int) -> tuple[int, int, int]:
        chain = cutter.cut(block, room)
        return len(chain) + 1, len(chain), _agreed(chain, script, k_next)

    return replay_windows(trajectories, blocks.windows, blocks.blocks, step, blocks.fraction)


def _agreed(chain: list[int], script: list[int], k_next: int) -> int:
    """How many of `chain` the trajectory follows from its token `k_next` on."""
    n = 0
    while n < len(chain) and k_next + n < len(script) and chain[n] == script[k_next + n]:
        n += 1
    return n


def replay_tree(
    blocks: DraftBlocks,
    config: SpecConfig,
    markov: MarkovHead,
    trajectories: Trajectories,
    *,
    max_leaves: int = MAX_TREE_LEAVES,
) -> Replay:
    """PCTree (draft-dspark with `dspark_pctree`) over every trajectory (its recorded windows): each step's
    tree is built from the recorded block as `DFlashDrafter._verify_tree` builds it, and its accepted path
    is the longest one the trajectory follows; drafted counts the tree's nodes, as llama-server does."""
    cutter = blocks.cutter(config)
    k, n = max(1, int(config.value("dspark_pctree_k"))), max(1, int(config.value("dspark_pctree_n")))

    def step(block: Block, room: int, script: list[int], k_next: int) -> tuple[int, int, int]:
        chain = cutter.cut(block, room)
        if not chain:
            return 1, 0, 0
        tree = build_tree(script[k_next - 1], chain, block.candidates, markov, k=k, n=n, max_leaves=max_leaves)
        kids, node, kept = tree.children(), 0, 0
        while k_next + kept < len(script) and script[k_next + kept] in kids[node]:
            node = kids[node][script[k_next + kept]]
            kept += 1
        return len(tree), len(tree) - 1, kept

    return replay_windows(trajectories, blocks.windows, blocks.blocks, step, blocks.fraction)
