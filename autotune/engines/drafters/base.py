"""What every in-process drafter answers: llama.cpp's `common_speculative_impl` interface.

Drafters follow llama.cpp's own (common/speculative.cpp) so that both engines measure the same
algorithm.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class Drafter(ABC):
    """Proposes tokens that would follow `history + [last]`: llama.cpp's `common_speculative_impl`.

    One drafter serves every generation of a measurement (llama-server keeps its drafters' state
    across requests). Each step the engine calls `draft`, cuts the draft to the room left, verifies
    it and, only when the draft was not empty, calls `accept` (common_speculative_accept)."""

    #: single-token decodes a draft model has run so far (0 for drafters without one): what the cost
    #: model charges a draft model's drafting
    draft_decodes: int = 0

    def begin(self, prompt: list[int]) -> None:
        """A new generation starts from `prompt` (the target has just processed it, and `process` has seen it)."""

    @abstractmethod
    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        """Draft tokens after `history` (every token already in the target's cache) and `last`; the
        caller keeps at most `n_max` of them."""

    def process(self, tokens: list[int], pos0: int) -> None:
        """The target decoded `tokens` at positions pos0.. (common_speculative_process): the prompt,
        then each verify batch `[last] + draft`, rejected tokens included."""

    def accept(self, n_accepted: int, is_other: bool = False) -> None:
        """The target accepted the first `n_accepted` tokens of the last draft; `is_other`: another
        member of a combined type (autotune.engines.drafters.chain.ChainDrafter) drafted it."""
