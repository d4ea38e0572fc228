"""Combined spec types (`--spec-type a,b`) as `common_speculative_draft` and `_accept` run them."""

from __future__ import annotations

from typing import Sequence

from autotune.engines.drafters.base import Drafter


class ChainDrafter(Drafter):
    """Several spec types at once, as llama-server runs `--spec-type a,b`: each step the members are
    asked in llama.cpp's precedence order and the first non-empty draft is used; after verification
    that member gets `accept(n)` and the others `accept(n, is_other=True)`. Every member sees `begin`
    and `process` (draft-simple's context mirrors the target's batches whoever drafted)."""

    def __init__(self, members: Sequence[Drafter]):
        self.members = list(members)
        self._last: Drafter | None = None

    @property
    def draft_decodes(self) -> int:
        return sum(member.draft_decodes for member in self.members)

    def begin(self, prompt: list[int]) -> None:
        for member in self.members:
            member.begin(prompt)

    def process(self, tokens: list[int], pos0: int) -> None:
        for member in self.members:
            member.process(tokens, pos0)

    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        for member in self.members:
            drafted = member.draft(history, last, n_max)
            if drafted:
                self._last = member
                return drafted[:n_max]
        return []

    def accept(self, n_accepted: int, is_other: bool = False) -> None:
        for member in self.members:
            member.accept(n_accepted, is_other or member is not self._last)
