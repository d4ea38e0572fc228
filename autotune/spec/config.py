"""What a trial measures: one speculative-decoding configuration (target, spec type, draft, values)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from autotune.spec.runtime_flags import describe_runtime
from autotune.spec.types import BASELINE, DRAFT_MODEL_TYPES, SPEC_TYPE_PARAMS, combined_spec_type, is_combination


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
    #: searched runtime flags (autotune.spec.runtime_flags, the `[runtime]` table): name -> value
    runtime: Mapping[str, int | str | bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec_type", combined_spec_type(self.spec_type))  # one spelling per combination
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
        # one type: its own prefix goes (`size_n`); a combination keeps the member (`mod_n_match`, `simple_size_n`)
        prefix = "ngram_" if is_combination(self.spec_type) else self.spec_type.replace("-", "_") + "_"
        for name, value in sorted(self.params.items()):
            shown = name.removeprefix(prefix).removeprefix("draft_").removeprefix("dspark_")
            if isinstance(value, bool):
                parts.append(f"{shown}={'on' if value else 'off'}")
            elif isinstance(value, str):
                parts.append(f"{shown}={value}")
            else:
                parts.append(f"{shown}={value:g}" if isinstance(value, float) else f"{shown}={value}")
        if self.runtime:
            parts.append(describe_runtime(self.runtime))
        return " ".join(parts)
