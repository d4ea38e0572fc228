"""Drafters for the in-process engine: each proposes tokens for the target to verify in one batch.

They follow llama.cpp's own drafters (common/speculative.cpp) so that both engines measure the same
algorithm; the n-gram ones are in autotune.engines.ngram_drafters.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from autotune.engines._llama import Context
from autotune.engines._sampler import DRAFT_TOP_K, SamplerChain
from autotune.spec import SpecConfig


class Drafter(ABC):
    """Proposes tokens that would follow `history + [last]`: llama.cpp's `common_speculative_impl`.

    One drafter serves every generation of a measurement (llama-server keeps its drafters' state
    across requests). Each step the engine calls `draft`, cuts the draft to the room left, verifies
    it and, only when the draft was not empty, calls `accept` (common_speculative_accept)."""

    def begin(self, prompt: list[int]) -> None:
        """A new generation starts from `prompt` (the target has just processed it)."""

    @abstractmethod
    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        """Draft tokens after `history` (every token already in the target's cache) and `last`; the
        caller keeps at most `n_max` of them."""

    def accept(self, n_accepted: int, is_other: bool = False) -> None:
        """The target accepted the first `n_accepted` tokens of the last draft; `is_other`: another
        member of a combined type (autotune.engines.ngram_drafters.ChainDrafter) drafted it."""


class DraftModelDrafter(Drafter):
    """llama.cpp's `draft-simple`: a small model drafts greedily in its own context.

    The draft context caches every token the target has accepted; only tokens it has not seen yet
    are decoded before drafting, and rejected draft tokens are rolled back afterwards.
    """

    def __init__(self, context: Context, sampler: SamplerChain, config: SpecConfig):
        self.context = context
        self.sampler = sampler  # the draft's own top-10 chain, as llama-server samples a draft
        self.n_max = int(config.value("draft_n_max"))
        self.n_min = int(config.value("draft_n_min"))
        self.p_min = float(config.value("draft_p_min"))
        self.n_cached = 0  # tokens of the current sequence in the draft's KV cache
        self.n_base = 0  # length of history + last when the last draft began
        self.unverified = False  # drafted tokens are in the cache and no accept() has said how many stay

    def begin(self, prompt: list[int]) -> None:
        self.context.clear()
        self.n_cached = 0
        self.unverified = False

    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        if self.unverified:  # the last draft was dropped (n-min) or another drafter's was used instead
            self.accept(0)
        self.unverified = True
        sequence_len = len(history) + 1
        pending = history[self.n_cached :] + [last]
        logits = self.context.decode(pending, self.n_cached)
        self.n_base = self.n_cached = sequence_len
        limit = min(self.n_max, n_max)
        drafted: list[int] = []
        while len(drafted) < limit:
            token = self.sampler.sample(self.context, -1)
            if self.p_min > 0 and _top_k_probability(logits[-1]) < self.p_min:
                break
            drafted.append(token)
            if len(drafted) == limit:
                break
            logits = self.context.decode([token], self.n_cached)
            self.n_cached += 1
        if len(drafted) < self.n_min:
            drafted = []
        return drafted

    def accept(self, n_accepted: int, is_other: bool = False) -> None:
        if is_other:  # not this drafter's draft: its own tokens are rolled back at the next draft()
            return
        self.unverified = False
        # keep the accepted draft tokens that were decoded; the target's bonus token comes next time
        keep = min(self.n_base + n_accepted, self.n_cached)
        if keep < self.n_cached:
            self.context.truncate(keep)
            self.n_cached = keep


_BLOCK = 256


def _top_k_probability(logits: np.ndarray) -> float:
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
