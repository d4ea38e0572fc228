"""llama.cpp's ngram-mod drafter (common/ngram-mod.cpp), ported for the in-process engine.

Kept from llama.cpp, because the counts must equal llama-server's: ngram-mod stores one token per 22-bit
hash of an n-gram, collisions overwrite (its 4M-entry table is a dict here); it resets after 5 drafts in
a row with under 25% of the (uncut) draft accepted.
"""

from __future__ import annotations

from typing import Sequence

from autotune.engines.drafters.base import Drafter
from autotune.spec.config import SpecConfig

MOD_TABLE_BITS = 22  # 4*1024*1024 entries: size_t % 2^22 keeps the low 22 bits
_MOD_MASK = (1 << MOD_TABLE_BITS) - 1
_MOD_LCG = 6364136223846793005 & _MOD_MASK
_MOD_TABLE_SIZE = 1 << MOD_TABLE_BITS
_MOD_OCCUPANCY_RESET = 0.25
_MOD_CHUNK = 32  # generated n-grams are added once 32 are pending


class NgramModDrafter(Drafter):
    """`ngram-mod`: a hash of every n-gram seen (n = `n_match`) maps to the token that followed it;
    drafting chains lookups from the last n tokens, up to `n_max` tokens, none if fewer than `n_min`.

    The hash is llama.cpp's polynomial (multiplier 6364136223846793005) modulo the table size, kept
    as a rolling hash here: each lookup and each added n-gram costs O(1) instead of O(n)."""

    def __init__(self, config: SpecConfig):
        self.n = int(config.value("ngram_mod_n_match"))
        self.n_min = int(config.value("ngram_mod_n_min"))
        self.n_max = int(config.value("ngram_mod_n_max"))
        self.entries: dict[int, int] = {}  # hash -> token (absent: EMPTY)
        self._lead = pow(_MOD_LCG, self.n - 1, _MOD_TABLE_SIZE)  # weight of a window's first token
        self.i_last = 0
        self.n_draft_last = 0
        self.n_low = 0

    def _hash(self, tokens: Sequence[int], start: int) -> int:
        h = 0
        for i in range(start, start + self.n):
            h = (h * _MOD_LCG + tokens[i]) & _MOD_MASK
        return h

    def _add(self, tokens: Sequence[int], start: int, stop: int) -> None:
        """mod.add(tokens + i) for i in [start, stop): the n-gram at i maps to the token after it."""
        if start >= stop:
            return
        n, lead, entries = self.n, self._lead, self.entries
        h = self._hash(tokens, start)
        for i in range(start, stop):
            entries[h] = tokens[i + n]
            h = ((h - tokens[i] * lead) * _MOD_LCG + tokens[i + n]) & _MOD_MASK

    def begin(self, prompt: list[int]) -> None:
        self.i_last = 0
        self.n_draft_last = 0
        n = self.n
        if len(prompt) < n:
            return
        self._add(prompt, 0, len(prompt) - n)
        self.i_last = len(prompt) - n
        if len(self.entries) / _MOD_TABLE_SIZE > _MOD_OCCUPANCY_RESET:
            self.entries.clear()  # i_last stays: the prompt's n-grams are gone

    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        self.n_draft_last = 0
        n = self.n
        cur_len = len(history)
        if cur_len < n:
            return []
        if self.i_last + _MOD_CHUNK < cur_len:
            self._add(history, self.i_last, cur_len - n)
            self.i_last = cur_len - n
        window = history[cur_len - n + 1 :] + [last]
        h = self._hash(window, 0)
        entries, lead = self.entries, self._lead
        drafted: list[int] = []
        for i in range(self.n_max):
            token = entries.get(h)
            if token is None:
                if i < self.n_min:
                    return []
                break
            drafted.append(token)
            window.append(token)
            h = ((h - window[i] * lead) * _MOD_LCG + token) & _MOD_MASK
        self.n_draft_last = len(drafted)
        return drafted

    def accept(self, n_accepted: int, is_other: bool = False) -> None:
        if is_other or self.n_draft_last == 0:
            return
        if n_accepted / self.n_draft_last < 0.25:
            self.n_low += 1
            if self.n_low >= 5:
                self.entries.clear()
                self.n_low = 0
                self.i_last = 0
        else:
            self.n_low = 0
