"""Finalists that cover the top: each predicted configuration's chance of being the fastest under the
prediction's error, and the seats filled so that the race's best is as near the true best as it can be.

Why not rank: the prediction errs by region. In issue 50's demo every seat went to ngram-simple m13-18,
predicted 1.67-1.82x and raced 1.56x (all 18-20 % high together), while m3/n2, predicted lower, was the
fastest on held-out prompts. Ranking races one corner's shared error four times.

The error model (assumptions, stated): a configuration's true speedup is its prediction times exp(e), e
normal with its family's sd (autotune.search.prediction_error), the variance split in `SHARES`:
- `family`: shared by every configuration of the family on one target (the family's fitted cost factor);
- `kind`: shared by one spec type with the same files;
- `region`: shared by one kind's configurations as far as their parameters are close: a Gaussian kernel
  over the distance of their log2(value + 1) (m13 and m18 are 0.44 apart, m3 and m13 1.8), scale
  `REGION_SCALE`, so a corner moves together and distant corners do not;
- `own`: the configuration's alone.

The choice: `DRAWS` seeded draws of every candidate's true log speedup; each seat goes to the candidate
that most raises the mean, over the draws, of the best true speedup among the chosen (the expected best
of the race). A second seat in an overrated corner adds little, since its draws rise and fall with the
first's; a distinct region or type adds in the draws where that corner is overrated. Seats go first one
per region (`one_region`: closeness at least `SAME_REGION`), one configuration standing for its corner;
where the regions run out before the seats, the rest are filled the same way without near duplicates
(`near_duplicate`), so the race keeps its size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: the shares of a configuration's error variance (module docstring); they sum to 1
SHARES = {"family": 0.25, "kind": 0.25, "region": 0.3, "own": 0.2}
#: the region kernel's scale in log2(value + 1) units: a parameter 1.5x apart is about one scale away
REGION_SCALE = 0.5
#: closeness (the region kernel) from which two configurations of one kind are one region
SAME_REGION = 0.5
#: two predictions of one kind this close (relative) race as one, the better
NEAR = 0.02
#: Monte Carlo draws of the true speedups
DRAWS = 4000
#: the most candidates drawn (the best predicted): the others cannot be the fastest in any likely draw
MAX_CANDIDATES = 400
#: a candidate further than this many sd of the difference below the best predicted is not drawn
CUTOFF_Z = 4.0


@dataclass(frozen=True)
class Candidate:
    """A predicted configuration as the error model sees it."""

    speedup: float  # predicted
    error_sd: float  # its family's sd of log(predicted / true)
    family: str | None
    target: str
    kind: tuple  # (spec type, target, draft): what shares the `kind` part of the error
    params: dict = field(default_factory=dict)
    counts: tuple = ()  # its replayed drafted, accepted, verify steps (empty: unknown): equal counts race alike

    def position(self) -> dict[str, float]:
        """Its parameters as coordinates: log2(|value| + 1) of a number (False 0, True 1), a text one-hot."""
        found = {}
        for name, value in self.params.items():
            if isinstance(value, str):
                found[f"{name}={value}"] = math.sqrt(0.5)  # two texts differ by 1, as True and False
            else:
                found[name] = math.log2(abs(float(value)) + 1)
        return found


def closeness(a: Candidate, b: Candidate) -> float:
    """The region kernel of two candidates: 1 at the same parameters, towards 0 apart; 0 across kinds."""
    return float(_kernel([a, b])[0, 1]) if a.kind == b.kind else 0.0


def near_duplicate(a: Candidate, b: Candidate) -> bool:
    """Whether `b` would race as a second `a` even where regions run short of seats: of one kind, and the
    same replayed counts or a prediction within NEAR."""
    return a.kind == b.kind and (a.counts and a.counts == b.counts or abs(a.speedup / b.speedup - 1) <= NEAR)


def one_region(a: Candidate, b: Candidate) -> bool:
    """Whether `b` stands for `a`'s corner: a near duplicate, or of one kind with close parameters."""
    return near_duplicate(a, b) or a.kind == b.kind and closeness(a, b) >= SAME_REGION


def drawn(candidates: list[Candidate]) -> list[int]:
    """The indices of `candidates` worth drawing: within CUTOFF_Z of the best predicted, at most
    MAX_CANDIDATES, best predicted first."""
    order = sorted(range(len(candidates)), key=lambda i: candidates[i].speedup, reverse=True)
    if not order:
        return []
    top = candidates[order[0]]
    return [
        i
        for i in order
        if math.log(top.speedup / candidates[i].speedup) <= CUTOFF_Z * math.hypot(top.error_sd, candidates[i].error_sd)
    ][:MAX_CANDIDATES]


class TrueSpeedups:
    """Seeded draws of the candidates' true log speedups under the error model (module docstring)."""

    def __init__(self, candidates: list[Candidate], seed: int = 0):
        self.candidates = candidates
        n = len(candidates)
        families = [(c.family, c.target) for c in candidates]
        correlation = SHARES["own"] * np.eye(n) + SHARES["family"] * _same(families)
        kinds = [c.kind for c in candidates]
        for kind in set(kinds):
            members = [i for i, k in enumerate(kinds) if k == kind]
            correlation[np.ix_(members, members)] += SHARES["kind"] + SHARES["region"] * _kernel(
                [candidates[i] for i in members]
            )
        sd = np.array([c.error_sd for c in candidates])
        covariance = np.outer(sd, sd) * correlation + 1e-12 * np.eye(n)
        noise = np.linalg.cholesky(covariance) @ np.random.default_rng(seed).standard_normal((n, DRAWS))
        self.draws = np.log([c.speedup for c in candidates])[:, None] + noise

    def chances(self) -> np.ndarray:
        """Each candidate's chance of being the fastest of them all: the share of draws it is."""
        return np.bincount(self.draws.argmax(axis=0), minlength=len(self.candidates)) / DRAWS

    def cover(self, chosen: list[int], seats: int, allowed) -> list[int]:
        """`chosen` and, seat by seat up to `seats`, the candidate `allowed(i, chosen)` that most raises
        the mean over the draws of the best chosen (module docstring); fewer where none is allowed."""
        chosen = list(chosen)
        best = self.draws[chosen].max(axis=0) if chosen else np.full(DRAWS, -np.inf)
        while len(chosen) < seats:
            gains = np.maximum(self.draws, best).mean(axis=1)
            open_ = [i for i in range(len(self.candidates)) if i not in chosen and allowed(i, chosen)]
            if not open_:
                break
            pick = max(open_, key=lambda i: gains[i])
            chosen.append(pick)
            best = np.maximum(best, self.draws[pick])
        return chosen


def _same(keys: list) -> np.ndarray:
    """1 where two keys are equal, else 0."""
    index = {key: i for i, key in enumerate(set(keys))}
    codes = np.array([index[key] for key in keys])
    return (codes[:, None] == codes[None, :]).astype(float)


def _kernel(members: list[Candidate]) -> np.ndarray:
    """The region kernel (`closeness`) between every two of one kind's candidates, at once."""
    positions = [c.position() for c in members]
    names = sorted(set().union(*positions))
    at = np.array([[p.get(name, 0.0) for name in names] for p in positions]).reshape(len(members), len(names))
    distance2 = ((at[:, None, :] - at[None, :, :]) ** 2).sum(axis=2)
    return np.exp(-distance2 / (2 * REGION_SCALE**2))
