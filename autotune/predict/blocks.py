"""draft-dflash and draft-dspark (linear and PCTree) without re-running the drafter per configuration:
the draft's block at every position of every trajectory, recorded once per (draft file, block size).

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
from autotune.engines.drafters.base import Drafter
from autotune.engines.drafters.draft_model import top_k_probability
from autotune.engines.speculation import Steps
from autotune.measure.measurement import extend_until_stop
from autotune.predict.replay import END, PromptReplay, Replay, script_of
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
    """Per prompt (by its token ids), the block at each trajectory position, for one spec type and size."""

    spec_type: str
    size: int  # rows decoded: n_max + the rows before the first one read
    first_row: int
    limit: int  # the most rows a draft reads (the draft's block size, less its anchor row where it has one)
    blocks: dict[tuple[int, ...], list[Block]] = field(default_factory=dict)
    draft_decodes: int = 0  # what recording cost: blocks and single-token injections

    @classmethod
    def record(cls, pair: DFlashPair, trajectories: Trajectories, *, spec_type: str, n_maxes: Sequence[int],
               p_min: bool = False, confidence: bool = False, candidates: Sequence[int] = ()) -> dict[int, "DraftBlocks"]:
        """Walk every trajectory through the target once and the draft once per block size, decoding one
        block per position and size; keyed by n_max, each clamped to what the draft's block gives, as
        llama.cpp clamps it. `p_min`: keep what a p_min cut reads (DSpark's confidence with `confidence`,
        else each row's top-10 probability: a pass over the vocabulary per row, so only when asked);
        `candidates`: the n_max values whose PCTree candidates are kept."""
        first_row = 0 if pair.anchor_first(spec_type) else 1
        limit = pair.n_draft_max(spec_type)
        found = {n: cls(spec_type, n + first_row, first_row, limit) for n in sorted({min(n, limit) for n in n_maxes})}
        keep = {min(n, limit) for n in candidates}
        for trajectory in trajectories.prompts:
            features = layer_inputs(pair, list(trajectory.prompt_tokens) + list(trajectory.tokens))
            for n, blocks in found.items():
                blocks.blocks[tuple(trajectory.prompt_tokens)] = blocks._walk(
                    pair, trajectory, features, p_min=p_min and not confidence, confidence=p_min and confidence,
                    candidates=n in keep)
        return found

    def _walk(self, pair: DFlashPair, trajectory: Trajectory, features: np.ndarray, *, p_min: bool,
              confidence: bool, candidates: bool) -> list[Block]:
        draft = pair.draft
        draft.clear()
        n_prompt = len(trajectory.prompt_tokens)
        draft.inject(features[:n_prompt], 0)
        blocks = []
        for p, last in enumerate(trajectory.tokens):
            position = n_prompt + p
            if position + self.size > pair.target.n_ctx:
                break
            logits, conf = draft.block([last] + [pair.mask_token] * (self.size - 1), position, confidence=confidence)
            rows = logits[self.first_row:]
            blocks.append(Block(
                chain=tuple(int(t) for t in rows.argmax(axis=1)),
                top_probability=tuple(float(top_k_probability(row)) for row in rows) if p_min else None,
                confidence=tuple(float(c) for c in conf[self.first_row:]) if confidence else None,
                candidates=BlockCandidates.of(rows) if candidates else None,
            ))
            draft.truncate(position)
            draft.inject(features[position:position + 1], position)
            self.draft_decodes += 2
        return blocks

    @property
    def has_candidates(self) -> bool:
        """Whether PCTree's candidates were kept (a tree can be built from these blocks)."""
        return any(blocks[0].candidates is not None for blocks in self.blocks.values() if blocks)

    def drafter(self, config: SpecConfig) -> "BlockCutDrafter":
        return BlockCutDrafter(self, config)


def layer_inputs(pair: DFlashPair, tokens: Sequence[int]) -> np.ndarray:
    """The target's layer inputs (what the draft is fed) at every position of `tokens`, decoded from 0."""
    target = pair.target
    target.clear()
    parts = []
    for start in range(0, len(tokens), target.n_batch):
        chunk = list(tokens[start:start + target.n_batch])
        target.decode(chunk, start)
        parts.append(np.array(target.features(slice(0, len(chunk)))))
    return np.concatenate(parts)


class BlockCutDrafter(Drafter):
    """Linear draft-dflash / draft-dspark, drafting by cutting the recorded blocks as
    `DFlashDrafter._draft` cuts the rows it decoded (p_min, then n_min, then the room left)."""

    def __init__(self, blocks: DraftBlocks, config: SpecConfig):
        self.blocks = blocks
        self.n_min = min(int(config.value("draft_n_min")), blocks.limit)
        self.p_min = float(config.value("draft_p_min"))
        self.confidence = config.spec_type == "draft-dspark" and self.p_min > 0
        self._prompt_length = 0
        self._current: list[Block] = []
        self.draft_decodes = 0

    def begin(self, prompt: list[int]) -> None:
        self._prompt_length = len(prompt)
        self._current = self.blocks.blocks[tuple(prompt)]

    def block_at(self, history: list[int]) -> Block | None:
        index = len(history) - self._prompt_length
        return self._current[index] if index < len(self._current) else None

    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        block = self.block_at(history)
        if block is None:  # no cache room for the noise block
            return []
        self.draft_decodes += 1
        return self.cut(block, n_max)

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


def replay_tree(blocks: DraftBlocks, config: SpecConfig, markov: MarkovHead, trajectories: Trajectories, *,
                max_leaves: int = MAX_TREE_LEAVES) -> Replay:
    """PCTree (draft-dspark with `dspark_pctree`) over every trajectory: each step's tree is built from the
    recorded block as `DFlashDrafter._verify_tree` builds it, and its accepted path is the longest one the
    trajectory follows; drafted counts the tree's nodes, as llama-server does."""
    cutter = blocks.drafter(config)
    k, n = max(1, int(config.value("dspark_pctree_k"))), max(1, int(config.value("dspark_pctree_n")))
    prompts = []
    for trajectory in trajectories.prompts:
        script = script_of(trajectory, trajectories.max_tokens)
        prompt = list(trajectory.prompt_tokens)
        cutter.begin(prompt)
        history, generated, steps, decodes = list(prompt), script[:1], Steps(), 0
        last = generated[-1]
        while len(generated) < trajectories.max_tokens and last != END:
            room = trajectories.max_tokens - len(generated) - 1
            block = cutter.block_at(history) if room > 0 else None
            decodes += block is not None
            chain = cutter.cut(block, room) if block is not None else []
            k_next = len(history) - len(prompt) + 1  # index in `script` of the token after `last`
            if chain:
                tree = build_tree(last, chain, block.candidates, markov, k=k, n=n, max_leaves=max_leaves)
                kids, node, kept = tree.children(), 0, []
                while k_next + len(kept) < len(script) and script[k_next + len(kept)] in kids[node]:
                    node = kids[node][script[k_next + len(kept)]]
                    kept.append(tree.tokens[node])
                steps.drafted += len(tree) - 1
                steps.accepted += len(kept)
                steps.verify_steps += 1
                size = len(tree)
            else:
                kept, size = [], 1
            emitted = script[k_next:k_next + len(kept) + 1]
            steps.batch_sizes.append(size)
            steps.positions.append(len(history))
            steps.emitted.append(len(emitted))
            history.append(last)
            history.extend(kept)
            extend_until_stop(generated, emitted, trajectories.max_tokens, lambda token: token == END)
            last = generated[-1]
        prompts.append(PromptReplay(trajectory.prompt_id, len(generated), steps, decodes))
    return Replay(tuple(prompts))
