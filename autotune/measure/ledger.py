"""What a search cost, per phase: tokens generated, draft decodes recorded, servers started, seconds.

A `Ledger` is filled from two sides. Whoever runs a phase wraps it in `ledger.phase(name)`, which
times it and makes it the active phase of this process (one per process, so that the threads of a
concurrent measurement charge it too); whoever does the work
charges the active phase without knowing which one it is:

* every generation that returns tokens (llama-server's `/completion`, the in-process engines'
  `timed_result`) charges `tokens` (warm-ups and checks included: what the hardware generated);
* every llama-server launch charges a `server_starts`;
* a recording (draft chains, DFlash/DSpark blocks) charges its `decodes`: one per draft decode or
  injection, what its own counter says.

A phase run again (the race after a calibration that shares its name, or two targets' blocks) adds to
the same row. Work done outside any phase is charged nowhere. The worker process keeps its own ledger
for what it measures and hands it back (`as_dict`), and the search adds it (`add`).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Callable, Iterator


@dataclass(eq=False)
class PhaseCost:
    """One phase's row of the ledger."""

    tokens: int = 0  # generated (measurements, warm-ups, checks)
    decodes: int = 0  # a recording's draft decodes and injections
    server_starts: int = 0
    seconds: float = 0.0

    def add(self, other: "PhaseCost") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def describe(self) -> str:
        parts = [f"{self.tokens:,} tokens"] if self.tokens else []
        parts += [f"{self.decodes:,} draft decodes"] if self.decodes else []
        parts += [f"{self.server_starts} server start{'s' * (self.server_starts != 1)}"] if self.server_starts else []
        return ", ".join(parts + [f"{self.seconds:.0f} s"])


_LOCK = threading.Lock()
_active: list[PhaseCost] = []  # the phases entered and not yet left, innermost last


class Ledger:
    """The phases of one search, in the order they first ran."""

    def __init__(self, phases: dict[str, PhaseCost] | None = None, on_phase_end: Callable[[], None] | None = None):
        self.phases: dict[str, PhaseCost] = dict(phases or {})
        #: called after each phase ends and after each `add` (a search's ETA line)
        self.on_phase_end = on_phase_end

    @contextmanager
    def phase(self, name: str) -> Iterator[PhaseCost]:
        """Time the block as phase `name` and charge it whatever the block generates; a phase inside
        another takes the charges and the seconds of its own block (the outer one keeps the rest)."""
        row = self.phases.setdefault(name, PhaseCost())
        with _LOCK:
            outer = _active[-1] if _active else None
            _active.append(row)
        started = time.perf_counter()
        try:
            yield row
        finally:
            elapsed = time.perf_counter() - started
            with _LOCK:
                del _active[max(i for i, r in enumerate(_active) if r is row)]
                row.seconds += elapsed
                if outer is not None:
                    outer.seconds -= elapsed
            if self.on_phase_end is not None:
                self.on_phase_end()

    def add(self, other: "Ledger") -> None:
        """Add `other`'s phases (a worker's ledger) to this one's."""
        for name, row in other.phases.items():
            self.phases.setdefault(name, PhaseCost()).add(row)
        if self.on_phase_end is not None:
            self.on_phase_end()

    @property
    def total(self) -> PhaseCost:
        found = PhaseCost()
        for row in self.phases.values():
            found.add(row)
        return found

    def line(self) -> str:
        """The one closing line: each phase's cost, then the total."""
        return (
            "cost: "
            + "; ".join(f"{name} {row.describe()}" for name, row in self.phases.items())
            + f" (total {self.total.describe()})"
        )

    def as_dict(self) -> dict:
        return {name: {**asdict(row), "seconds": round(row.seconds, 3)} for name, row in self.phases.items()}

    @classmethod
    def from_dict(cls, data: dict) -> "Ledger":
        return cls({name: PhaseCost(**row) for name, row in data.items()})


def charge(*, tokens: int = 0, decodes: int = 0, server_starts: int = 0) -> None:
    """Add to the active phase of this process's ledger (nothing where no phase is active)."""
    with _LOCK:
        if _active:
            row = _active[-1]
            row.tokens += tokens
            row.decodes += decodes
            row.server_starts += server_starts
