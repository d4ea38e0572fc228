"""Which configurations a predicted search replays: every point of each spec type whose own grid is small,
and TPE trials only across the types whose grids are too large to replay point by point."""

from __future__ import annotations

from autotune.search.inputs import SearchOptions, SearchSettings, check_inputs
from autotune.search.predicted._space import BRUTE_FORCE_LIMIT, replays_at_most, type_grids

LARGE = """
[spec_types.ngram-mod]
ngram_mod_n_match = [4, 32]
ngram_mod_n_max = [8, 64]
ngram_mod_n_min = [0, 8]
"""


def test_small_types_are_replayed_in_full_and_tpe_is_left_to_the_large_one(tiny_space, models_dir):
    tiny_space.write_text(tiny_space.read_text() + LARGE)
    options = SearchOptions(
        SearchSettings("tiny", trials=1, max_tokens=4, seed=0), models_dir=models_dir, space_file=tiny_space
    )
    inputs = check_inputs(options, lambda line: None)
    grids = type_grids(inputs.space, inputs)
    # draft-simple: n_max 1-6 with its one draft; ngram-simple: n 1-3 x m 2-8; ngram-mod: 29 x 57 x 9
    assert grids == {"draft-simple": 6, "ngram-simple": 21, "ngram-mod": 29 * 57 * 9}
    assert grids["ngram-mod"] > BRUTE_FORCE_LIMIT
    assert replays_at_most(inputs.space, inputs, 50) == 6 + 21 + 50
    assert replays_at_most(inputs.space.restricted_to({"draft-simple", "ngram-simple"}), inputs, 50) == 6 + 21
