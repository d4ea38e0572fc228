"""llama.cpp's ngram-cache drafter (common/ngram-cache.cpp), ported for the in-process engine.

Kept from llama.cpp, because the counts must equal llama-server's: ngram-cache adds to its context cache
only the n-grams that lie inside each step's new tokens (`common_ngram_cache_update` is given only the
new tokens), and breaks ties between equally frequent continuations by the iteration order of
libstdc++'s `std::unordered_map<llama_token, int32_t>`, which `_libstdcxx_order` reproduces (buckets,
prime rehash policy).

The cache outlives requests and so does its size (`seq_info::cache_size`, common/speculative.cpp, never
reset: `begin` is a no-op): a request adds only the tokens of its context past the longest context an
earlier request drafted from, and one whose context never gets that far adds nothing and drafts from
earlier requests' text, their generated tokens included. A replay over the baseline's output therefore counts
what llama-server counts only while llama-server's ngram-cache output has been the baseline's in every
request so far. It often is not: ngram-cache verifies batches of up to 9 tokens at nearly every step,
and on CPU a batch's logits differ slightly from the one-token decodes of the baseline, enough to break
near-ties the other way.
"""

from __future__ import annotations

from typing import Iterable

from autotune.engines.drafters.base import Drafter
from autotune.spec.config import SpecConfig

CACHE_NGRAM_MIN, CACHE_NGRAM_MAX = 1, 4  # LLAMA_NGRAM_MIN / LLAMA_NGRAM_MAX
CACHE_N_DRAFT = 8  # create_state_ngram_cache: "TODO get from config?"
_MIN_SAMPLE_SIZE_LAX = (2, 2, 1, 1)
_MIN_PERCENT_LAX = (66, 50, 50, 50)

#: The bucket counts libstdc++'s _Prime_rehash_policy (max load factor 1) moves through as elements
#: are inserted one at a time: (element count that triggers the rehash, new bucket count). Read from
#: `std::unordered_map<int, int>::bucket_count()` after each insert (GCC 12's libstdc++).
#: A part never holds more distinct tokens than the context has positions, far below the last step.
_LIBSTDCXX_GROWTH: tuple[tuple[int, int], ...] = (
    (1, 13),
    (14, 29),
    (30, 59),
    (60, 127),
    (128, 257),
    (258, 541),
    (542, 1109),
    (1110, 2357),
    (2358, 5087),
    (5088, 10273),
    (10274, 20753),
    (20754, 42043),
    (42044, 85229),
    (85230, 172933),
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
