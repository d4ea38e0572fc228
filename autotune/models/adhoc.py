"""Ad-hoc models: `--target FILE [--draft FILE ...]` with no search-space file (and, through the same
inference, a hub repo's files: autotune.models.hub_space).

The space is inferred from the GGUF headers. Each draft's spec type follows from its architecture,
as llama.cpp's `common_speculative_types_from_gguf` reads it: a dflash draft with a Markov head is
DSpark, one without is DFlash, an eagle3 draft is EAGLE-3, a file with NextN layers drafts by MTP,
and anything else is a draft-simple model. A target with NextN layers also drafts for itself by
MTP. The n-gram types need no draft and are always searched. A draft the target cannot use is
refused with llama.cpp's reason (autotune.gguf.compat), before anything is measured. The ranges are
those of the bundled search spaces, and the strict parser of search-space files checks the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from autotune.errors import ModelFileError
from autotune.gguf.compat import check_pair
from autotune.gguf.header import check_gguf, read_header
from autotune.gguf.info import GGUFInfo, read_gguf_info
from autotune.spec.space import DRAFT_IS_TARGET, SearchSpace, parse_space

#: Ranges each inferred spec type is searched over (TOML values of a [spec_types.<type>] table).
SPEC_TYPE_RANGES: dict[str, dict[str, list]] = {
    "ngram-simple": {"ngram_simple_size_n": [1, 6], "ngram_simple_size_m": [2, 32]},
    "ngram-map-k": {"ngram_map_k_size_n": [2, 8], "ngram_map_k_size_m": [4, 32]},  # it never reads min_hits
    "ngram-map-k4v": {
        "ngram_map_k4v_size_n": [2, 8],
        "ngram_map_k4v_size_m": [4, 24],
        "ngram_map_k4v_min_hits": [1, 3],
    },
    "ngram-mod": {"ngram_mod_n_match": [4, 32], "ngram_mod_n_max": [8, 64], "ngram_mod_n_min": [0, 8]},
    "ngram-cache": {},
    "draft-simple": {"draft_n_max": [1, 8], "draft_n_min": [0, 2], "draft_p_min": [0.0, 0.9, 0.1]},
    "draft-dspark": {
        "draft_n_max": [1, 8],
        "dspark_pctree": [False, True],
        "dspark_pctree_k": [2, 4],
        "dspark_pctree_n": [8, 32],
    },
    "draft-dflash": {"draft_n_max": [1, 8]},
    "draft-eagle3": {"draft_n_max": [1, 8]},
    "draft-mtp": {"draft_n_max": [1, 4]},
}
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
DEFAULT_CONTEXT = 4096


def draft_type_of(draft: GGUFInfo) -> str:
    """The spec type a draft file is for, read from its architecture and heads."""
    if draft.architecture == "dflash":
        return "draft-dspark" if draft.has_markov_head else "draft-dflash"
    if draft.architecture == "eagle3":
        return "draft-eagle3"
    if draft.has_mtp_head:
        return "draft-mtp"
    return "draft-simple"


def adhoc_name(target: Path) -> str:
    """The study's model name: the target's `general.name` (else its file stem) as a lower-case slug."""
    name = read_header(target).get("general.name") or target.stem
    slug = re.sub(r"[^a-z0-9.]+", "-", str(name).lower()).strip("-.")
    return slug or "model"


def adhoc_space(target: Path, drafts: Sequence[Path] = (), *, name: str | None = None) -> SearchSpace:
    """The search space of `target` and `drafts`, its model named `name` (default: adhoc_name); raises
    ModelFileError for a missing or broken file, a draft the target cannot use (llama.cpp's reason)
    and two drafts of one type."""
    target = target.resolve()
    for path in (target, *drafts):
        check_gguf(path)
    typed: dict[str, Path] = {}
    for draft in (Path(d).resolve() for d in drafts):
        spec_type = draft_type_of(read_gguf_info(draft))
        if spec_type in typed:
            raise ModelFileError(
                f"{draft.name} and {typed[spec_type].name} are both {spec_type} drafts: pass one --draft per draft type"
            )
        typed[spec_type] = draft
    info = read_gguf_info(target)
    return inferred_space(
        name or adhoc_name(target),
        target,
        {"target": str(target)},
        [SpaceDraft(path, {"file": str(path)}, spec_type) for spec_type, path in typed.items()],
        description=f"{target.name} ({info.architecture}, {info.quant}), no search-space file",
    )


@dataclass(frozen=True)
class SpaceDraft:
    """A draft file of an inferred space: where it lies, its `[drafts.<type>]` table, and its spec type
    (None: read from its header)."""

    path: Path
    table: dict
    spec_type: str | None = None


def inferred_space(
    name: str, target: Path, target_table: dict, drafts: Sequence[SpaceDraft], *, description: str
) -> SearchSpace:
    """The space of a target and its drafts: each draft's spec type (given, else from its header) checked
    against `target`'s header, several drafts of one type searched side by side, the target's own MTP head
    where it has one, the n-gram types always. `target_table`: the [model] table's file keys (`target`,
    and `quants`, `hf` for a hub repo's targets). A draft the target cannot use raises ModelFileError with
    llama.cpp's reason."""
    target_info = read_gguf_info(target)
    tables: dict[str, list[dict]] = {}
    for draft in drafts:
        info = read_gguf_info(draft.path)
        spec_type = draft.spec_type or draft_type_of(info)
        verdict = check_pair(spec_type, target_info, info)
        if not verdict.runnable:
            raise ModelFileError(f"{draft.path.name} cannot draft for {target.name} ({spec_type}): {verdict.reason}")
        tables.setdefault(spec_type, []).append(draft.table)
    if target_info.has_mtp_head and "draft-mtp" not in tables:
        tables["draft-mtp"] = [{"file": DRAFT_IS_TARGET}]
    types = [*NGRAM_TYPES, *tables]
    data = {
        "model": {"name": name, **target_table, "context_size": DEFAULT_CONTEXT, "description": description},
        "drafts": tables,
        "spec_types": {t: SPEC_TYPE_RANGES[t] for t in types},
    }
    return parse_space(target, data)
