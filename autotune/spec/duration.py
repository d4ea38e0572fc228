"""Durations as a user writes them (`15m`, `1h`, `900s`, `4.5m`): `--budget` and a search space's
`model.budget_per_target`."""

from __future__ import annotations

import re

_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600}


def duration_s(text: str) -> float | None:
    """The seconds `text` says, or None where it is no positive duration with a unit."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)\s*", str(text))
    if not match or float(match.group(1)) <= 0:
        return None
    return float(match.group(1)) * _UNITS[match.group(2)]
