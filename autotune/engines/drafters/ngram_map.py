"""llama.cpp's ngram-simple and ngram-map drafters (common/ngram-map.cpp), ported for the in-process
engine.

Kept from llama.cpp, because the counts must equal llama-server's: ngram-map looks keys up in a
2^18-entry hash index first (first writer wins), then linearly; ngram-map-k ignores `min_hits` (key-only
mode drafts before the check); the draft length after a key is what was accepted the last time that key
drafted (and 0 sticks).
"""

from __future__ import annotations

from typing import Sequence

from autotune.engines.drafters.base import Drafter
from autotune.spec.config import SpecConfig


class NgramSimpleDrafter(Drafter):
    """`ngram-simple`: find the latest earlier occurrence of the last n tokens, copy what followed.

    `min_hits` is accepted by llama-server but unused by this type (common_ngram_simple_config has
    only the two sizes)."""

    def __init__(self, config: SpecConfig):
        self.size_n = int(config.value("ngram_simple_size_n"))
        self.size_m = int(config.value("ngram_simple_size_m"))

    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        n, m = self.size_n, self.size_m
        cur_len = len(history)
        if cur_len <= n + m + 1:
            return []
        pattern = history[cur_len - n + 1 :] + [last]
        # search backwards, skipping the current position; position 0 means "no match" as in llama.cpp
        start = _rfind(history, pattern, cur_len - n - 1, 0)
        if start == 0:
            return []
        copy = min(m, cur_len - (start + n))
        if copy < n:
            return []
        return history[start + n : start + n + copy]


# -- ngram-map-k and ngram-map-k4v (common_ngram_map_*) ----------------------------------------------

MAP_MAX_VALUES = 4  # COMMON_NGRAM_MAX_VALUES: m-grams remembered per key
MAP_HASH_BITS = 18  # COMMON_NGRAM_HASH_MAP_SIZE = 262144 entries
_MAP_HASH_MASK = (1 << MAP_HASH_BITS) - 1
_MAP_LCG = 2654435761  # LCG_FACTOR; the hash is uint32, its index the low 18 bits
_MAP_MAX_VALUE_COUNT = 16380


def _map_hash(tokens: Sequence[int], start: int, n: int) -> int:
    h = 0
    for i in range(start, start + n):
        h = (h * _MAP_LCG + tokens[i]) & _MAP_HASH_MASK
    return h


class _MapKey:
    """common_ngram_map_key; each value is [value_idx, value_num, n_accepted] (value_idx 0: unused)."""

    __slots__ = ("key_idx", "stat_idx", "key_num", "values")

    def __init__(self, key_idx: int, m: int):
        self.key_idx = key_idx
        self.stat_idx = 0
        self.key_num = 0
        self.values = [[0, 0, m] for _ in range(MAP_MAX_VALUES)]


class NgramMapDrafter(Drafter):
    """`ngram-map-k` (key_only: draft what followed the key) and `ngram-map-k4v` (keep up to four
    m-grams seen after each key; draft only when the most frequent one is at least twice as frequent
    as the others together, and the key was hit `min_hits` times).

    The parameters are shared with ngram-simple's (common_params_speculative_ngram_map): `prefix` is
    `ngram_map_k` or `ngram_map_k4v`."""

    def __init__(self, config: SpecConfig, prefix: str):
        self.n = int(config.value(f"{prefix}_size_n"))
        self.m = int(config.value(f"{prefix}_size_m"))
        self.min_hits = int(config.value(f"{prefix}_min_hits"))
        self.key_only = prefix == "ngram_map_k"
        self.keys: list[_MapKey] = []
        self.key_first: list[int] = []  # the first token of each key, for a fast scan (refreshed at begin)
        self.size_last_begin = 0
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0
        self.idx_last_check = 0
        self.key_map: dict[int, int] = {}  # hash -> index of an n-gram in the history (absent: 0)
        self.key_map_last_idx = 0
        self._lead = pow(_MAP_LCG, self.n - 1, 1 << MAP_HASH_BITS)  # weight of an n-gram's first token

    def begin(self, prompt: list[int]) -> None:
        """common_ngram_map_begin: a history shorter than the last check drops what lay past its start."""
        size_begin = len(prompt)
        n, m = self.n, self.m
        cleanup = self.size_last_begin
        if cleanup > size_begin:
            cleanup = size_begin - n - m if size_begin > n + m else 0
        if size_begin < self.idx_last_check:
            self.key_map = {h: idx for h, idx in self.key_map.items() if idx < cleanup}
            self.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
            if self.keys:
                for i in range(len(self.keys) - 1, -1, -1):
                    key = self.keys[i]
                    if key.key_idx >= cleanup:
                        del self.keys[i]
                        continue
                    if self.key_only:
                        continue
                    values = key.values
                    for j in range(MAP_MAX_VALUES - 1, -1, -1):
                        if values[j][0] != 0 and values[j][0] >= cleanup:
                            for k in range(j, MAP_MAX_VALUES - 1):
                                values[k] = list(values[k + 1])
                            values[-1] = [0, 0, values[-1][2]]  # n_accepted is left as it was
                    if values[0][0] == 0:
                        del self.keys[i]
        self.idx_last_check = size_begin
        self.size_last_begin = size_begin
        # every key kept points into the prompt (key_idx < size_begin)
        self.key_first = [prompt[k.key_idx] if k.key_idx < size_begin else -1 for k in self.keys]

    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        """common_ngram_map_draft."""
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0
        inp = history
        cur_len = len(inp)
        n, m = self.n, self.m
        if cur_len < 2 * n + m:
            return []
        self.idx_last_check = cur_len
        key_tokens = inp[cur_len - n + 1 :] + [last]
        top = cur_len - n - m - 1  # the last position a key may start at
        begin = self.size_last_begin

        match_pos = 0
        idx_key = self.key_map.get(_map_hash(key_tokens, 0, n), 0)
        if idx_key != 0 and idx_key < top and inp[idx_key : idx_key + n] == key_tokens:
            match_pos = idx_key
        if match_pos == 0 and begin > n + m + 1:
            match_pos = _rfind(inp, key_tokens, begin - n - m - 1, self.key_map_last_idx)
        if match_pos == 0:
            match_pos = _rfind(inp, key_tokens, top, max(begin, self.key_map_last_idx))

        # add the hashes of the new n-grams, in the same (descending) order: the first writer keeps a slot
        if begin > n + m + 1:
            self._index(inp, begin - n - m - 1, self.key_map_last_idx)
        self._index(inp, top, max(begin, self.key_map_last_idx))
        self.key_map_last_idx = max(top, self.key_map_last_idx)

        if match_pos == 0:
            return []

        key_offset = self._key_offset(inp, key_tokens)
        if key_offset == len(self.keys):
            self.keys.append(_MapKey(match_pos, m))
            self.key_first.append(inp[match_pos])
        key = self.keys[key_offset]
        key.key_num = min(key.key_num + 1, _MAP_MAX_VALUE_COUNT)

        if self.key_only:
            n_draft = min(m, key.values[0][2])
            self.last_draft_created = True
            self.last_draft_key_idx = key_offset
            self.last_draft_value_idx = 0
            return inp[match_pos + n : match_pos + n + n_draft] if n_draft > 0 else []

        if key.key_num < self.min_hits:
            return []
        self._count_values(inp, key, key_tokens, match_pos)
        counts = [v[1] for v in key.values]
        max_occur, slot_max = 0, 0
        for v, occur in enumerate(counts):
            if occur > max_occur:
                max_occur, slot_max = occur, v
        sum_occur = sum(counts) - counts[slot_max]
        if sum_occur > 0 and max_occur < 2 * sum_occur:
            return []
        n_draft = min(m, key.values[slot_max][2])
        self.last_draft_created = True
        self.last_draft_key_idx = key_offset
        self.last_draft_value_idx = slot_max
        # llama.cpp drafts what followed match_pos, whichever value was the most frequent
        return inp[match_pos + n : match_pos + n + n_draft] if n_draft > 0 else []

    def accept(self, n_accepted: int, is_other: bool = False) -> None:
        """common_ngram_map_accept: the key's value drafts that many tokens next time."""
        if is_other or not self.last_draft_created:
            return
        self.keys[self.last_draft_key_idx].values[self.last_draft_value_idx][2] = n_accepted

    def _index(self, inp: list[int], high: int, low: int) -> None:
        """key_map[hash of the n-gram at j] = j where the slot is free, for j from `high` down to `low` + 1."""
        if high <= low:
            return
        n, lead = self.n, self._lead
        hashes = []
        h = _map_hash(inp, low + 1, n)
        for j in range(low + 1, high + 1):  # rolling: O(1) per position
            hashes.append(h)
            h = ((h - inp[j] * lead) * _MAP_LCG + inp[j + n]) & _MAP_HASH_MASK
        key_map = self.key_map
        for j in range(high, low, -1):
            key_map.setdefault(hashes[j - low - 1], j)

    def _key_offset(self, inp: list[int], key_tokens: list[int]) -> int:
        """The first key whose n-gram (read from the history now) equals `key_tokens`, else len(keys)."""
        first, n, firsts = key_tokens[0], self.n, self.key_first
        i = -1
        while True:
            try:
                i = firsts.index(first, i + 1)
            except ValueError:
                return len(self.keys)
            idx = self.keys[i].key_idx
            if inp[idx : idx + n] == key_tokens:
                return i

    def _count_values(self, inp: list[int], key: _MapKey, key_tokens: list[int], match_pos: int) -> None:
        """The statistics loop of common_ngram_map_draft: every occurrence of the key in
        [stat_idx, match_pos] (both ends included) counts its following m-gram."""
        n, m, first = self.n, self.m, key_tokens[0]
        i = key.stat_idx - 1
        while True:
            try:
                i = inp.index(first, i + 1, match_pos + 1)
            except ValueError:
                break
            if inp[i : i + n] != key_tokens:
                continue
            begin_value = i + n
            value_tokens = inp[begin_value : begin_value + m]
            for slot in key.values:
                if slot[0] == 0:
                    slot[0], slot[1], slot[2] = begin_value, 0, m
                    break
                if inp[slot[0] : slot[0] + m] == value_tokens:
                    break
            else:
                continue
            slot[1] = min(slot[1] + 1, _MAP_MAX_VALUE_COUNT)
        key.stat_idx = match_pos


def _rfind(inp: list[int], pattern: list[int], high: int, low: int) -> int:
    """The largest j in (low, high] with inp[j:j+n] == pattern, else 0 (llama.cpp's descending scans).

    Scans a reversed copy with list.index, at C speed: a Python loop over a 4k-token history costs
    a quarter of a millisecond a step."""
    if high <= low:
        return 0
    first, n = pattern[0], len(pattern)
    segment = inp[low + 1 : high + 1]
    segment.reverse()
    k = -1
    while True:
        try:
            k = segment.index(first, k + 1)
        except ValueError:
            return 0
        j = high - k
        if inp[j : j + n] == pattern:
            return j
