"""Ad-hoc models: `--target FILE [--draft FILE ...]` with no search-space file.

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
from pathlib import Path
from typing import Sequence

from autotune.gguf.compat import check_pair
from autotune.errors import ModelFileError
from autotune.gguf.header import read_header
from autotune.gguf.info import GGUFInfo, read_gguf_info
from autotune.gguf.header import check_gguf
from autotune.spec.space import DRAFT_IS_TARGET, SearchSpace, parse_space

#: Ranges each inferred spec type is searched over (TOML values of a [spec_types.<type>] table).
SPEC_TYPE_RANGES: dict[str, dict[str, list]] = {
    "ngram-simple": {"ngram_simple_size_n": [1, 6], "ngram_simple_size_m": [2, 32]},
    "ngram-map-k": {"ngram_map_k_size_n": [2, 8], "ngram_map_k_size_m": [4, 32]},  # it never reads min_hits
    "ngram-map-k4v": {"ngram_map_k4v_size_n": [2, 8], "ngram_map_k4v_size_m": [4, 24], "ngram_map_k4v_min_hits": [1, 3]},
    "ngram-mod": {"ngram_mod_n_match": [4, 32], "ngram_mod_n_max": [8, 64], "ngram_mod_n_min": [0, 8]},
    "ngram-cache": {},
    "draft-simple": {"draft_n_max": [1, 8], "draft_n_min": [0, 2], "draft_p_min": [0.0, 0.9, 0.1]},
    "draft-dspark": {"draft_n_max": [1, 8], "dspark_pctree": [False, True], "dspark_pctree_k": [2, 4],
                     "dspark_pctree_n": [8, 32]},
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
    target_info = read_gguf_info(target)
    tables: dict[str, dict] = {}
    for draft in (Path(d).resolve() for d in drafts):
        info = read_gguf_info(draft)
        spec_type = draft_type_of(info)
        verdict = check_pair(spec_type, target_info, info)
        if not verdict.runnable:
            raise ModelFileError(f"{draft.name} cannot draft for {target.name} ({spec_type}): {verdict.reason}")
        if spec_type in tables:
            raise ModelFileError(f"{draft.name} and {Path(tables[spec_type]['file']).name} are both {spec_type} "
                                 "drafts: pass one --draft per draft type")
        tables[spec_type] = {"file": str(draft)}
    if target_info.has_mtp_head and "draft-mtp" not in tables:
        tables["draft-mtp"] = {"file": DRAFT_IS_TARGET}
    types = [*NGRAM_TYPES, *tables]
    data = {
        "model": {"name": name or adhoc_name(target), "target": str(target), "context_size": DEFAULT_CONTEXT,
                  "description": f"{target.name} ({target_info.architecture}, {target_info.quant}), no search-space file"},
        "drafts": tables,
        "spec_types": {t: SPEC_TYPE_RANGES[t] for t in types},
    }
    return parse_space(target, data)

