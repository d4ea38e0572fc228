"""What a trial measures: a speculative-decoding configuration, and the parameters each spec type has.

Parameter names are the llama-server flag stems with underscores (`draft_n_max` is
`--spec-draft-n-max`), so a search-space file, an Optuna parameter and a command-line flag
all use one spelling. Defaults are llama.cpp's own (common/arg.cpp).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class SpecParam:
    """One tunable parameter of a spec type.

    A `bool` parameter is a switch (the flag alone turns it on); a `str` parameter takes one of
    `choices`; a parameter that `requires` a switch only exists while that switch is on (PCTree's k
    and n need `--spec-dspark-pctree`).
    """

    name: str
    kind: type  # int, float, bool or str
    default: int | float | bool | str
    requires: str | None = None
    choices: tuple[str, ...] = ()
    at_most: str | None = None  # never above this parameter's value (a draft's n-min above its n-max drafts nothing)
    at_least: str | None = None  # never below it (an n-gram lookup copying fewer tokens than it matches drafts nothing)

    @property
    def flag(self) -> str:
        return "--spec-" + self.name.replace("_", "-")


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
    return _params(
        SpecParam(f"{prefix}_size_n", int, 12),
        # ngram-simple copies a continuation only when it is at least as long as the match (common/ngram-map.cpp)
        SpecParam(f"{prefix}_size_m", int, 48, at_least=f"{prefix}_size_n" if prefix == "ngram_simple" else None),
        SpecParam(f"{prefix}_min_hits", int, 1),
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
    "ngram-mod": _params(
        SpecParam("ngram_mod_n_min", int, 48, at_most="ngram_mod_n_max"),
        SpecParam("ngram_mod_n_max", int, 64),
        SpecParam("ngram_mod_n_match", int, 24),
    ),
    "ngram-cache": {},
}

#: Spec types that need a draft model file (`-md`).
DRAFT_MODEL_TYPES = frozenset(t for t in SPEC_TYPE_PARAMS if t.startswith("draft-"))

BASELINE = "none"


@dataclass(frozen=True)
class SpecConfig:
    """One configuration to measure: target file, spec type, draft file and parameter values.

    `params` holds only the parameters the user (or the study) set; `value()` falls back to
    llama.cpp's default for the others, so the engines and the command line agree.
    """

    target: Path
    spec_type: str = BASELINE
    draft: Path | None = None
    params: Mapping[str, int | float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = SPEC_TYPE_PARAMS.get(self.spec_type)
        if known is None:
            raise ValueError(f"unknown spec type {self.spec_type!r}")
        unknown = set(self.params) - set(known)
        if unknown:
            raise ValueError(f"{self.spec_type} has no parameter {sorted(unknown)[0]!r}")
        if (self.spec_type in DRAFT_MODEL_TYPES) != (self.draft is not None):
            raise ValueError(f"{self.spec_type} {'needs' if self.draft is None else 'takes no'} draft model")

    @property
    def is_baseline(self) -> bool:
        return self.spec_type == BASELINE

    def value(self, name: str) -> int | float | bool | str:
        """The parameter's value as llama.cpp will use it (set, or llama.cpp's default)."""
        spec = SPEC_TYPE_PARAMS[self.spec_type][name]
        return spec.kind(self.params.get(name, spec.default))

    def describe(self) -> str:
        """Short human label, e.g. `ngram-simple size_n=3 size_m=16`."""
        parts = [self.spec_type]
        if self.draft is not None and self.draft != self.target:
            parts.append(f"draft={self.draft.name}")
        prefix = self.spec_type.replace("-", "_") + "_"
        for name, value in sorted(self.params.items()):
            shown = name.removeprefix(prefix).removeprefix("draft_").removeprefix("dspark_")
            if isinstance(value, bool):
                parts.append(f"{shown}={'on' if value else 'off'}")
            elif isinstance(value, str):
                parts.append(f"{shown}={value}")
            else:
                parts.append(f"{shown}={value:g}" if isinstance(value, float) else f"{shown}={value}")
        return " ".join(parts)
