from pathlib import Path

import pytest

from autotune.engines.drafters.chain import ChainDrafter
from autotune.engines.drafters.ngram_cache import NgramCacheDrafter, _libstdcxx_order
from autotune.engines.drafters.ngram_map import NgramMapDrafter, NgramSimpleDrafter
from autotune.engines.drafters.ngram_mod import NgramModDrafter
from autotune.spec.config import SpecConfig


def ngram(n, m):
    config = SpecConfig(Path("t.gguf"), "ngram-simple", params={"ngram_simple_size_n": n, "ngram_simple_size_m": m})
    return NgramSimpleDrafter(config)


def test_copies_what_followed_the_latest_earlier_occurrence():
    history = [7, 1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 6, 8, 8, 8, 8, 1]
    # pattern = history[-1:] + [2]  -> "1 2" last seen at index 7, followed by 3 4 6 ...
    assert ngram(2, 3).draft(history, 2, n_max=10) == [3, 4, 6]


def test_no_match_or_too_short_history_drafts_nothing():
    assert ngram(2, 3).draft([1, 2, 3, 4, 5, 6, 7, 8], 99, n_max=10) == []
    assert ngram(2, 3).draft([1, 2, 1], 2, n_max=10) == []


def test_draft_is_cut_to_the_room_left_by_the_caller():
    """common_speculative_draft cuts a draft to the room left after the drafter made it."""
    history = [7, 1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 6, 8, 8, 8, 8, 1]
    assert ngram(2, 3).draft(history, 2, n_max=1) == [3, 4, 6]
    assert ChainDrafter([ngram(2, 3)]).draft(history, 2, n_max=1) == [3]


# -- llama.cpp's other n-gram drafters, on hand-written token sequences ----------------------------
#
# Expected drafts follow common/ngram-mod.cpp, ngram-map.cpp, ngram-cache.cpp and speculative.cpp;
# the scenario totals at the end were produced by those C++ files themselves (compiled with a driver
# that runs llama-server's draft / verify / accept loop over the same token lists).

T = Path("t.gguf")


def mod(n_match, n_min, n_max):
    return NgramModDrafter(SpecConfig(T, "ngram-mod", params={
        "ngram_mod_n_match": n_match, "ngram_mod_n_min": n_min, "ngram_mod_n_max": n_max}))


def ngram_map(spec_type, n, m, min_hits=1):
    prefix = spec_type.replace("-", "_")
    config = SpecConfig(T, spec_type, params={f"{prefix}_size_n": n, f"{prefix}_size_m": m, f"{prefix}_min_hits": min_hits})
    return NgramMapDrafter(config, prefix)


def test_ngram_mod_keeps_the_latest_continuation_of_each_ngram():
    """One token per n-gram hash: (2, 3) -> 4 is overwritten by (2, 3) -> 5; the prompt's last n-gram
    has no continuation yet and generated n-grams are added only in chunks of 32."""
    prompt = [1, 2, 3, 4, 1, 2, 3, 5]
    drafter = mod(2, 1, 16)
    drafter.begin(prompt)
    assert drafter.draft(prompt + [7, 1], 2, 16) == [3, 5]  # (1,2)->3, (2,3)->5, (3,5) unknown
    strict = mod(2, 3, 16)
    strict.begin(prompt)
    assert strict.draft(prompt + [7, 1], 2, 16) == []  # stopped after 2 tokens, fewer than n_min


def test_ngram_mod_stops_at_n_max_and_resets_after_five_weak_drafts():
    prompt = [4, 5, 6] * 5
    drafter = mod(2, 0, 4)
    drafter.begin(prompt)
    assert drafter.draft(prompt, 4, 16) == [5, 6, 4, 5]  # a cycle, cut by n_max (uncut by the room: 16)
    for _ in range(4):
        drafter.accept(0)
    drafter.accept(1)  # 1/4 is not below a quarter: the streak ends
    for _ in range(4):
        drafter.accept(0)
    assert drafter.entries and drafter.n_low == 4
    drafter.accept(0, is_other=True)  # another member drafted: no effect
    assert drafter.n_low == 4
    drafter.accept(0)
    assert not drafter.entries and drafter.n_low == 0 and drafter.i_last == 0


def test_ngram_map_k_drafts_as_many_tokens_as_were_accepted_last_time():
    """Key-only mode: the value after the key; its length is what was accepted after that key (m at first, 0 sticks)."""
    history = [9, 1, 2, 3, 4, 5, 6, 7, 8, 1]
    drafter = ngram_map("ngram-map-k", 2, 3)
    drafter.begin(history)
    assert drafter.draft(history, 2, 16) == [3, 4, 5]
    drafter.accept(1)
    assert drafter.draft(history, 2, 16) == [3]
    drafter.accept(0)
    assert drafter.draft(history, 2, 16) == []
    assert ngram_map("ngram-map-k", 2, 3, min_hits=5).draft(history, 2, 16) == [3, 4, 5]  # min_hits unused here


def test_ngram_map_k4v_needs_hits_and_a_clear_majority():
    """k4v counts the m-grams seen after the key and drafts only when the most frequent is at least
    twice as frequent as the others together, and then what followed the match it found (llama.cpp
    reads the draft at match_pos, not at the majority value's position)."""
    tie = [0, 1, 2, 3, 1, 2, 4, 0, 0, 0, 0, 0, 1]  # key (1, 2): followed by 3 once, by 4 once (m = 1)
    drafter = ngram_map("ngram-map-k4v", 2, 1)
    drafter.begin(tie)
    assert drafter.draft(tie, 2, 16) == []  # 1 < 2 * 1
    majority = [0, 1, 2, 3, 1, 2, 3, 1, 2, 4, 0, 0, 0, 0, 0, 1]  # 3 twice, then 4 once, latest
    drafter = ngram_map("ngram-map-k4v", 2, 1)
    drafter.begin(majority)
    assert drafter.draft(majority, 2, 16) == [4]
    assert [v[:2] for v in drafter.keys[0].values[:2]] == [[3, 2], [9, 1]]  # (value index, count)
    hits = ngram_map("ngram-map-k4v", 2, 1, min_hits=2)
    hits.begin(majority)
    assert hits.draft(majority, 2, 16) == []  # the key's first hit is below min_hits


def test_ngram_cache_breaks_ties_in_libstdcxx_order():
    """(5, 6) was followed once by 7, then once by 8: 50% each passes the 2-gram threshold, and the
    first of the two in std::unordered_map's iteration order wins: the newer key. The 1-gram (6)
    needs 66%, and the 4- and 3-grams were never seen."""
    drafter = NgramCacheDrafter()
    history = [5, 6, 7, 1, 5, 6, 8, 2, 9, 5]
    assert drafter.draft(history, 6, 1)[:1] == [8]


def test_libstdcxx_order_groups_keys_by_bucket():
    """13 buckets after the first insert: 14 shares 1's bucket and goes before it; 2 opened a bucket later."""
    assert _libstdcxx_order([1, 2, 14]) == [2, 14, 1]
    assert _libstdcxx_order([1, 2, 3]) == [3, 2, 1]
    # 0..12 fill 13 buckets (12 first); the 14th insert rehashes to 29, re-inserting 12, 11, .., 0
    assert _libstdcxx_order(range(20)) == [19, 18, 17, 16, 15, 14, 13, *range(13)]


def test_ngram_cache_learns_only_inside_each_steps_new_tokens():
    """common_ngram_cache_update is given only the tokens new since the last draft, so an n-gram that
    spans two steps is never added, and a later, shorter history adds nothing."""
    drafter = NgramCacheDrafter()
    drafter.draft([1, 2, 3], 4, 8)  # learns 1 2 3 4
    assert drafter.cache_size == 4 and (3,) in drafter.cache
    drafter.draft([1, 2, 3, 4], 5, 8)  # new tokens: just [5]: nothing inside it
    assert (4,) not in drafter.cache
    drafter.draft([7, 7], 7, 8)  # shorter than the cache's size: not added
    assert (7,) not in drafter.cache


def test_chain_asks_in_precedence_order_and_tells_the_others():
    history = [9, 1, 2, 3, 4, 5, 6, 7, 8, 1]
    first, second = ngram(2, 3), mod(2, 1, 4)
    chain = ChainDrafter([first, second])
    chain.begin(history)
    assert chain.draft(history, 2, 2) == [3, 4]  # ngram-simple's, cut to the room
    chain.accept(0)  # ngram-mod did not draft: is_other, no weak streak
    assert second.n_low == 0
    assert chain.draft(history, 99, 8) == []  # nobody knows 99


def repetitive_text(n, vocab=50, seed=7):
    """A token list that often copies earlier stretches of itself (an LCG, so the totals below stay fixed)."""
    state = seed

    def next_int(k):
        nonlocal state
        state = (state * 1103515245 + 12345) % 2**31
        return state % k

    text = [next_int(vocab) for _ in range(3)]
    while len(text) < n:
        if next_int(10) < 6:
            start = next_int(len(text))
            text += text[start:start + 2 + next_int(19)]
        else:
            text += [next_int(vocab) for _ in range(1 + next_int(4))]
    return text[:n]


def serve(drafter, requests):
    """llama-server's loop with a target that generates `output`: per request (drafted, accepted, drafts)."""
    totals = []
    for prompt, output, max_tokens in requests:
        drafter.begin(list(prompt))
        history, last, n_generated = list(prompt), output[0], 1
        drafted = accepted = steps = 0
        while n_generated < max_tokens:
            room = max_tokens - n_generated - 1
            draft = drafter.draft(history, last, room)[:room] if room > 0 else []
            n_ok = 0
            while n_ok < len(draft) and n_generated + n_ok < len(output) and draft[n_ok] == output[n_generated + n_ok]:
                n_ok += 1
            if draft:
                drafter.accept(n_ok)
                drafted, accepted, steps = drafted + len(draft), accepted + n_ok, steps + 1
            history += [last] + draft[:n_ok]
            n_generated += n_ok + 1
            if n_generated > len(output):
                break
            last = output[n_generated - 1]
        totals.append((drafted, accepted, steps))
    return totals


#: (drafted, accepted, verify steps) per request, from llama.cpp's own ngram-*.cpp through the same loop
CPP_TOTALS = {
    "ngram-simple": [(124, 56, 32), (136, 56, 35), (184, 65, 48)],
    "ngram-map-k": [(114, 58, 28), (77, 36, 19), (87, 28, 23)],
    "ngram-map-k4v": [(40, 21, 15), (12, 7, 5), (23, 9, 9)],
    "ngram-mod": [(188, 53, 24), (230, 68, 30), (264, 72, 36)],
    "ngram-mod n_min=4": [(314, 62, 27), (334, 66, 30), (449, 68, 40)],
    "ngram-cache": [(242, 66, 34), (127, 78, 19), (272, 77, 39)],
    "chain": [(218, 67, 37), (157, 72, 27), (290, 87, 48)],
}


def scenario_drafter(name):
    return {
        "ngram-simple": lambda: ngram(2, 4),
        "ngram-map-k": lambda: ngram_map("ngram-map-k", 2, 5),
        "ngram-map-k4v": lambda: ngram_map("ngram-map-k4v", 2, 3, min_hits=2),
        "ngram-mod": lambda: mod(3, 1, 8),
        "ngram-mod n_min=4": lambda: mod(2, 4, 12),
        "ngram-cache": NgramCacheDrafter,
        "chain": lambda: ChainDrafter([ngram(3, 6), ngram_map("ngram-map-k4v", 2, 4), mod(2, 1, 6), NgramCacheDrafter()]),
    }[name]()


@pytest.mark.parametrize("name", list(CPP_TOTALS))
def test_three_requests_count_what_the_cpp_counts(name):
    """Three requests on one drafter (state carries over; the second prompt is shorter than the first
    history, which makes ngram-map clean up and ngram-cache learn nothing from it)."""
    text = repetitive_text(600)
    requests = [(text[:200], text[200:400], 120), (text[:150], text[150:400], 100), (text[300:420], text[420:600], 150)]
    assert serve(scenario_drafter(name), requests) == CPP_TOTALS[name]
