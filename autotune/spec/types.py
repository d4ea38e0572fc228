"""Every spec type llama-server knows, the parameters each one has, and how types combine
(`--spec-type a,b`). Defaults are llama.cpp's own (common/arg.cpp).
"""

from __future__ import annotations

from itertools import combinations
from typing import Iterable

from autotune.spec.params import SpecParam


def _params(*params: SpecParam) -> dict[str, SpecParam]:
    return {p.name: p for p in params}


_DRAFT = _params(
    SpecParam("draft_n_max", int, 3),
    SpecParam("draft_n_min", int, 0, at_most="draft_n_max"),
    SpecParam("draft_p_min", float, 0.0),
)
#: `--spec-draft-sampling` (newer llama-server builds): a probabilistic draft is verified by rejection
#: sampling; at temperature 0 both are greedy, so a study searches it only when it samples.
DRAFT_SAMPLING = SpecParam("draft_sampling", str, "greedy", choices=("greedy", "probabilistic"))
_SAMPLED_DRAFT = {**_DRAFT, DRAFT_SAMPLING.name: DRAFT_SAMPLING}


def _ngram_map(prefix: str) -> dict[str, SpecParam]:
    """common_params_speculative_ngram_map, shared by ngram-simple, ngram-map-k and ngram-map-k4v.

    Only ngram-map-k4v reads min_hits: ngram-simple's config has no such field and ngram-map-k drafts
    (key-only mode) before the check (common/ngram-map.cpp), so searching it there measures noise."""
    return _params(
        SpecParam(f"{prefix}_size_n", int, 12, minimum=1, maximum=1024),
        # ngram-simple copies a continuation only when it is at least as long as the match (common/ngram-map.cpp)
        SpecParam(f"{prefix}_size_m", int, 48, at_least=f"{prefix}_size_n" if prefix == "ngram_simple" else None,
                  minimum=1, maximum=1024),
        SpecParam(f"{prefix}_min_hits", int, 1, minimum=1),
    )


#: Every spec type llama-server knows, with its tunable parameters.
SPEC_TYPE_PARAMS: dict[str, dict[str, SpecParam]] = {
    "none": {},
    "draft-simple": _SAMPLED_DRAFT,
    "draft-eagle3": _DRAFT,
    "draft-mtp": _SAMPLED_DRAFT,
    "draft-dflash": _DRAFT,
    # PCTree (parent-conditioned drafting trees) exists only in a community fork of llama-server
    "draft-dspark": {
        **_DRAFT,
        **_params(
            SpecParam("dspark_pctree", bool, False),
            SpecParam("dspark_pctree_k", int, 3, requires="dspark_pctree"),
            SpecParam("dspark_pctree_n", int, 16, requires="dspark_pctree"),
        ),
    },
    "ngram-simple": _ngram_map("ngram_simple"),
    "ngram-map-k": _ngram_map("ngram_map_k"),
    "ngram-map-k4v": _ngram_map("ngram_map_k4v"),
    # n-min above n-max drafts only full n-max drafts, which n-min = n-max already does: not searched
    "ngram-mod": _params(
        SpecParam("ngram_mod_n_min", int, 48, at_most="ngram_mod_n_max", minimum=0, maximum=1024),
        SpecParam("ngram_mod_n_max", int, 64, minimum=0, maximum=1024),
        SpecParam("ngram_mod_n_match", int, 24, minimum=1, maximum=1024),
    ),
    "ngram-cache": {},  # 1- to 4-grams, 8 tokens a draft: fixed in llama.cpp (create_state_ngram_cache)
}

BASELINE = "none"

#: The order llama.cpp asks the members of a combined type for a draft (common_speculative_init):
#: the first non-empty draft is used.
SPEC_TYPE_PRECEDENCE = (
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
    "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
)


def combined_spec_type(types: str | Iterable[str]) -> str:
    """The canonical name of a spec type or of a combination (`--spec-type a,b`): its members in
    llama.cpp's precedence order, comma-separated (`draft-simple,ngram-mod` -> `ngram-mod,draft-simple`).

    A combination has no `none`, no member twice and at most one draft-* type (one draft model);
    anything else is a ValueError."""
    members = [t.strip() for t in types.split(",")] if isinstance(types, str) else [str(t) for t in types]
    for member in members:
        if member not in _SINGLE_TYPES:
            raise ValueError(f"unknown spec type {member!r}")
    if len(members) == 1:
        return members[0]
    if len(set(members)) != len(members):
        raise ValueError(f"spec type {','.join(members)!r} lists a type twice")
    if BASELINE in members:
        raise ValueError(f"{BASELINE!r} cannot be combined with other spec types")
    drafts = [m for m in members if m.startswith("draft-")]
    if len(drafts) > 1:
        raise ValueError(f"{' and '.join(drafts)} cannot be combined: there is one draft model")
    return ",".join(sorted(members, key=SPEC_TYPE_PRECEDENCE.index))


def spec_members(spec_type: str) -> tuple[str, ...]:
    """The single spec types of `spec_type` (itself when it is not a combination)."""
    return tuple(spec_type.split(","))


def is_combination(spec_type: str) -> bool:
    return "," in spec_type


def draft_member(spec_type: str) -> str | None:
    """The member of `spec_type` that needs a draft model (`-md`), if any."""
    return next((m for m in spec_members(spec_type) if m.startswith("draft-")), None)


#: The families whose costs differ in kind: n-gram lookups draft for free on the host, a draft model
#: decodes its own tokens, a block draft decodes a whole block from the target's features (and PCTree
#: verifies a tree). A combination belongs to its draft member's family.
NGRAM_FAMILY, DRAFT_MODEL_FAMILY, BLOCK_FAMILY = "n-gram", "draft model", "block draft"
_FAMILY_OF_DRAFT = {"draft-simple": DRAFT_MODEL_FAMILY, "draft-eagle3": DRAFT_MODEL_FAMILY,
                    "draft-mtp": DRAFT_MODEL_FAMILY, "draft-dflash": BLOCK_FAMILY, "draft-dspark": BLOCK_FAMILY}


def family_of(spec_type: str | None) -> str | None:
    """The cost family of `spec_type` (None for the baseline)."""
    if spec_type in (None, BASELINE):
        return None
    draft = draft_member(spec_type)
    return _FAMILY_OF_DRAFT[draft] if draft else NGRAM_FAMILY


def combinations_of(types: Iterable[str]) -> frozenset[str]:
    """Every combination (two or more members, at most one draft type) of the single `types`."""
    pool = sorted((t for t in set(types) if t in SPEC_TYPE_PRECEDENCE), key=SPEC_TYPE_PRECEDENCE.index)
    found = set()
    for size in range(2, len(pool) + 1):
        for members in combinations(pool, size):
            if sum(m.startswith("draft-") for m in members) <= 1:
                found.add(",".join(members))
    return frozenset(found)


class _SpecTypeTable(dict):
    """SPEC_TYPE_PARAMS: each spec type's parameters. A combination is looked up as well, by its
    canonical name (`combined_spec_type`), as the union of its members' parameters (their names never
    clash: each carries its type's prefix, and there is one draft type); iterating lists the single types."""

    def __missing__(self, spec_type: str) -> dict[str, SpecParam]:
        if not isinstance(spec_type, str) or not is_combination(spec_type):
            raise KeyError(spec_type)
        try:
            canonical = combined_spec_type(spec_type)
        except ValueError:
            raise KeyError(spec_type) from None
        if canonical != spec_type:
            raise KeyError(spec_type)  # one spelling per combination
        return {name: param for member in spec_members(spec_type) for name, param in self[member].items()}

    def __contains__(self, spec_type: object) -> bool:
        return self.get(spec_type) is not None

    def get(self, spec_type, default=None):
        try:
            return self[spec_type]
        except KeyError:
            return default


class _DraftModelTypes(frozenset):
    """DRAFT_MODEL_TYPES; a combination is in it when one of its members is."""

    def __contains__(self, spec_type: object) -> bool:
        return isinstance(spec_type, str) and any(frozenset.__contains__(self, m) for m in spec_type.split(","))


_SINGLE_TYPES = frozenset(SPEC_TYPE_PARAMS)
SPEC_TYPE_PARAMS = _SpecTypeTable(SPEC_TYPE_PARAMS)

#: Spec types that need a draft model file (`-md`), and the combinations that include one.
DRAFT_MODEL_TYPES = _DraftModelTypes(t for t in SPEC_TYPE_PARAMS if t.startswith("draft-"))
