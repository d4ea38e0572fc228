"""Every spec type llama-server knows, the parameters each one has, how types combine (`--spec-type a,b`),
and what autotune knows of each: one row a type (SPEC_TYPES), from which every other module derives its
facts. Defaults are llama.cpp's own (common/arg.cpp).
"""

from __future__ import annotations

from dataclasses import dataclass
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
        SpecParam(
            f"{prefix}_size_m",
            int,
            48,
            at_least=f"{prefix}_size_n" if prefix == "ngram_simple" else None,
            minimum=1,
            maximum=1024,
        ),
        SpecParam(f"{prefix}_min_hits", int, 1, minimum=1),
    )


#: The families whose costs differ in kind: n-gram lookups draft for free on the host, a draft model
#: decodes its own tokens, a block draft decodes a whole block from the target's features (and PCTree
#: verifies a tree). A combination belongs to its draft member's family.
NGRAM_FAMILY, DRAFT_MODEL_FAMILY, BLOCK_FAMILY = "n-gram", "draft model", "block draft"


@dataclass(frozen=True)
class SpecType:
    """One single spec type llama-server knows, and what autotune knows of it: a row of SPEC_TYPES."""

    name: str  # as `--spec-type` spells it
    params: dict[str, SpecParam]  # its tunable parameters, with llama.cpp's defaults
    family: str | None  # NGRAM_FAMILY, DRAFT_MODEL_FAMILY or BLOCK_FAMILY; None for the baseline
    #: The in-process engine runs it in its one generation loop, alone or combined with the other chained
    #: types (autotune.engines.drafters.build, through ChainDrafter).
    chained_in_process: bool = False
    #: Why the in-process engine leaves it to llama-server. llama-cpp-python 0.3.36's llama.cpp does expose
    #: what each needs, so these are ports not yet made, not limits of the library.
    in_process_gap: str | None = None

    @property
    def block_draft(self) -> bool:
        """DFlash and DSpark: one decode of the draft drafts a block from the target's layer features. The
        in-process engine runs them in their own loop (autotune.engines.dflash), which chains with nothing."""
        return self.family == BLOCK_FAMILY


#: Every single spec type llama-server knows, by name: what each reader of a type's facts derives them from
#: (SPEC_TYPE_PARAMS, CHAINABLE_TYPES, DFLASH_TYPES, family_of, replayable, `autotune models`' coverage).
#: A new type is one row here and its place in SPEC_TYPE_PRECEDENCE.
SPEC_TYPES: dict[str, SpecType] = {
    row.name: row
    for row in (
        SpecType("none", {}, None),
        SpecType("draft-simple", _SAMPLED_DRAFT, DRAFT_MODEL_FAMILY, chained_in_process=True),
        SpecType(
            "draft-eagle3",
            _DRAFT,
            DRAFT_MODEL_FAMILY,
            in_process_gap=(
                "no in-process EAGLE-3 loop: the bindings have the target's layer inputs (llama_set_embeddings_layer_inp) "
                "and the eagle3 graph, but feeding the draft its three fused layers is not ported"
            ),
        ),
        SpecType(
            "draft-mtp",
            _SAMPLED_DRAFT,
            DRAFT_MODEL_FAMILY,
            in_process_gap=(
                "no in-process MTP loop: the bindings have what it needs (LLAMA_CONTEXT_TYPE_MTP, load_mtp, the NextN "
                "embeddings and llama_batch_ext_set_embd_state), but the draft context sharing the target's memory is "
                "not ported"
            ),
        ),
        SpecType("draft-dflash", _DRAFT, BLOCK_FAMILY),
        # PCTree (parent-conditioned drafting trees) exists only in a community fork of llama-server
        SpecType(
            "draft-dspark",
            {
                **_DRAFT,
                **_params(
                    SpecParam("dspark_pctree", bool, False),
                    SpecParam("dspark_pctree_k", int, 3, requires="dspark_pctree"),
                    SpecParam("dspark_pctree_n", int, 16, requires="dspark_pctree"),
                ),
            },
            BLOCK_FAMILY,
        ),
        SpecType("ngram-simple", _ngram_map("ngram_simple"), NGRAM_FAMILY, chained_in_process=True),
        SpecType("ngram-map-k", _ngram_map("ngram_map_k"), NGRAM_FAMILY, chained_in_process=True),
        SpecType("ngram-map-k4v", _ngram_map("ngram_map_k4v"), NGRAM_FAMILY, chained_in_process=True),
        # n-min above n-max drafts only full n-max drafts, which n-min = n-max already does: not searched
        SpecType(
            "ngram-mod",
            _params(
                SpecParam("ngram_mod_n_min", int, 48, at_most="ngram_mod_n_max", minimum=0, maximum=1024),
                SpecParam("ngram_mod_n_max", int, 64, minimum=0, maximum=1024),
                SpecParam("ngram_mod_n_match", int, 24, minimum=1, maximum=1024),
            ),
            NGRAM_FAMILY,
            chained_in_process=True,
        ),
        # 1- to 4-grams, 8 tokens a draft: fixed in llama.cpp (create_state_ngram_cache)
        SpecType("ngram-cache", {}, NGRAM_FAMILY, chained_in_process=True),
    )
}

BASELINE = "none"

#: The order llama.cpp asks the members of a combined type for a draft (common_speculative_init):
#: the first non-empty draft is used.
SPEC_TYPE_PRECEDENCE = (
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
)

#: Spec types the in-process engine runs in its one generation loop, alone or combined (ChainDrafter).
CHAINABLE_TYPES = tuple(t for t in SPEC_TYPE_PRECEDENCE if SPEC_TYPES[t].chained_in_process)
#: The block-draft types (DFlash, DSpark): their own in-process loop, their own replay (recorded blocks).
DFLASH_TYPES = tuple(t for t in SPEC_TYPE_PRECEDENCE if SPEC_TYPES[t].block_draft)


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


def family_of(spec_type: str | None) -> str | None:
    """The cost family of `spec_type` (None for the baseline)."""
    if spec_type in (None, BASELINE):
        return None
    draft = draft_member(spec_type)
    return SPEC_TYPES[draft].family if draft else NGRAM_FAMILY


def replayable(spec_type: str) -> bool:
    """Whether a predicted search's replay covers `spec_type`. It replays through the in-process engine's
    drafters and the block drafts' recorded blocks, so it covers what that engine runs: the chained types
    and their combinations, and a block-draft type alone (its own loop chains with nothing)."""
    return spec_type in DFLASH_TYPES or all(
        member in CHAINABLE_TYPES or member == BASELINE for member in spec_members(spec_type)
    )


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


_SINGLE_TYPES = frozenset(SPEC_TYPES)
#: Every spec type llama-server knows, with its tunable parameters.
SPEC_TYPE_PARAMS: dict[str, dict[str, SpecParam]] = _SpecTypeTable(
    {name: row.params for name, row in SPEC_TYPES.items()}
)

#: Spec types that need a draft model file (`-md`), and the combinations that include one.
DRAFT_MODEL_TYPES = _DraftModelTypes(t for t in SPEC_TYPE_PARAMS if t.startswith("draft-"))
