"""The drafter of a configuration, as llama-server builds it (`common_speculative_init`): one drafter per
spec type, several chained in llama.cpp's precedence order. The in-process engine and the replay build
theirs here; only the draft model's drafter differs between them (a model, or its recorded chains)."""

from __future__ import annotations

from typing import Callable

from autotune.engines.drafters.base import Drafter
from autotune.engines.drafters.chain import ChainDrafter
from autotune.engines.drafters.ngram_cache import NgramCacheDrafter
from autotune.engines.drafters.ngram_map import NgramMapDrafter, NgramSimpleDrafter
from autotune.engines.drafters.ngram_mod import NgramModDrafter
from autotune.errors import EngineError
from autotune.spec.config import SpecConfig
from autotune.spec.types import spec_members


def build_drafter(config: SpecConfig, draft_model: Callable[[], Drafter] | None = None) -> Drafter | None:
    """The drafter of `config` (None for the baseline); `draft_model` makes draft-simple's. One drafter
    serves a whole measurement, as one llama-server does."""
    if config.is_baseline:
        return None
    members = [_member(config, member, draft_model) for member in spec_members(config.spec_type)]
    return members[0] if len(members) == 1 else ChainDrafter(members)


def _member(config: SpecConfig, spec_type: str, draft_model: Callable[[], Drafter] | None) -> Drafter:
    """The drafter of one member: one branch per type whose row in autotune.spec.types.SPEC_TYPES says
    `chained_in_process`."""
    if spec_type == "ngram-simple":
        return NgramSimpleDrafter(config)
    if spec_type in ("ngram-map-k", "ngram-map-k4v"):
        return NgramMapDrafter(config, spec_type.replace("-", "_"))
    if spec_type == "ngram-mod":
        return NgramModDrafter(config)
    if spec_type == "ngram-cache":
        return NgramCacheDrafter(config)
    if spec_type == "draft-simple" and draft_model is not None:
        return draft_model()
    raise EngineError(f"no in-process drafter for {spec_type} in {config.spec_type}")
