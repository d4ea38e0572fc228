"""One tunable parameter of a spec type (or, as `RuntimeParam`, of llama-server's runtime).

Parameter names are the llama-server flag stems with underscores (`draft_n_max` is
`--spec-draft-n-max`), so a search-space file, an Optuna parameter and a command-line flag
all use one spelling.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    minimum: int | None = None  # what llama-server accepts (common/arg.cpp); a value outside it stops the server
    maximum: int | None = None

    @property
    def flag(self) -> str:
        return "--spec-" + self.name.replace("_", "-")
