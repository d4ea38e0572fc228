from pathlib import Path

from autotune.engines.ngram_drafters import ChainDrafter, NgramSimpleDrafter
from autotune.spec import SpecConfig


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
