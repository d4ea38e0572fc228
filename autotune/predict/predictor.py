"""Counts x cost: a configuration's predicted decode time per prompt, its decode tok/s and speedup, and
the calibration that maps in-process step costs to what llama-server measures.

A prompt's in-process decode time splits into terms (`CostTerms`), each with its own calibration factor,
because each family of configurations spends its time differently and llama-server's overheads differ
from the in-process engine's in kind, not only in size:

- `target_ms`: the target's verify of each step's batch at its depth (a tree's verify for PCTree) and the
  sampler chain per emitted position; llama-server takes `scale` x that;
- `steps`: the decode steps; llama-server adds `per_step_ms` to each (slot bookkeeping, its own sampler
  clones, the HTTP side): the baseline and every family pay it;
- `extra_rows`: the rows of a verify batch beyond the first; llama-server adds `per_row_ms` to each, what a
  longer draft costs it that the in-process batch curve does not show (pinned by a long-draft reference,
  llama.cpp's `--spec-default`: an n-gram draft of up to 64 tokens);
- `draft_ms`: a draft model's work (draft-simple: its mirror of each verify batch, its single-token decodes
  and its sampler); llama-server takes `draft_scale` x that (the in-process draft cost had run 20-32 %
  above llama-server's);
- `block_ms`: a DFlash/DSpark draft's work (its block decodes, the kept rows fed to it, an in-process
  tree build); llama-server takes `block_scale` x that.

The factors are fitted together to the decode times llama-server measured for its references (the
baseline, `--spec-default` and one configuration per family in the space, measured in the same
interleaved rounds: autotune.search.predicted): non-negative least squares on relative error per prompt,
with a weak prior on each factor (`PRIOR`). The prior is what keeps the fit physical: a verify step's
time grows with its batch and a draft model's work with its drafts, so on a handful of references the
additive terms (per step, per row) can stand in for the multiplicative ones (seen here: a fit without
it put the whole target and draft cost into `per_step_ms` and `per_row_ms`, scale 0, and predicted every
draft model 40-56 % too fast). The prior says "llama-server runs the in-process costs at one common
pace": every scale equal to the baseline's own ratio of llama-server's time to the in-process time
(`pace`, read off the baseline's prompts, so the prior holds however much faster or slower the server
is), the additive terms 0; each held loosely, a spread of twice the term's own size (2 x pace for a
scale; twice the in-process one-token step, or one more verified row, times pace for the additive
terms). That is enough to choose between fits the references cannot tell apart and too loose to bias
the ones they can (on the fit above: scale 0.93 and draft scale 0.76, where a spread of 0.3 had pulled
them to 0.96 and 0.94). A factor whose term none of the
references exercised is not fitted: a draft or block scale then takes `scale`, the target's (the same
machine runs both), and `per_row_ms` its prior, 0.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Sequence

import numpy as np
from scipy.optimize import nnls

from autotune.predict.cost import CostModel
from autotune.predict.replay import PromptReplay, Replay

#: the calibration's factors, in the order of CostTerms' fields
FACTORS = ("scale", "per_step_ms", "per_row_ms", "draft_scale", "block_scale")
#: each factor's prior, (value, spread), in units of the baseline's pace; the additive terms' also in
#: units of the in-process cost of a one-token step (per step) and of one more verified row (per row)
PRIOR = {
    "scale": (1.0, 2.0),
    "per_step_ms": (0.0, 2.0),
    "per_row_ms": (0.0, 2.0),
    "draft_scale": (1.0, 2.0),
    "block_scale": (1.0, 2.0),
}


@dataclass(frozen=True)
class CostTerms:
    """One prompt's in-process decode time, split by what llama-server scales differently (module docstring)."""

    target_ms: float
    steps: float  # a sampled replay's steps scaled to the prompt (autotune.predict.replay.PromptReplay.scale)
    extra_rows: float
    draft_ms: float = 0.0
    block_ms: float = 0.0

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, f.name) for f in fields(self)], dtype=float)


@dataclass(frozen=True)
class Calibration:
    """llama-server's decode time of a prompt from its CostTerms (the module docstring says each factor)."""

    scale: float = 1.0
    per_step_ms: float = 0.0
    per_row_ms: float = 0.0
    draft_scale: float | None = None  # None: not fitted, `scale` stands for it
    block_scale: float | None = None
    points: int = 0  # prompts fitted
    configurations: int = 0  # measured configurations fitted
    error: float | None = None  # median |predicted / measured - 1| of the fitted configurations' mix tok/s (in sample)
    worst_error: float | None = None

    def factors(self) -> np.ndarray:
        return np.array(
            [
                self.scale,
                self.per_step_ms,
                self.per_row_ms,
                self.scale if self.draft_scale is None else self.draft_scale,
                self.scale if self.block_scale is None else self.block_scale,
            ]
        )

    def decode_ms(self, terms: CostTerms) -> float:
        return float(self.factors() @ terms.vector())

    def as_dict(self) -> dict:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 5)

        return {
            "scale": rounded(self.scale),
            "per_step_ms": rounded(self.per_step_ms),
            "per_row_ms": rounded(self.per_row_ms),
            "draft_scale": rounded(self.draft_scale),
            "block_scale": rounded(self.block_scale),
            "points": self.points,
            "configurations": self.configurations,
            "error": rounded(self.error),
            "worst_error": rounded(self.worst_error),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Calibration":
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class Prediction:
    """A configuration's predicted figures on llama-server."""

    replay: Replay
    decode_ms: tuple[float, ...]  # per prompt, calibrated
    tok_s: float
    speedup: float | None = None

    def as_dict(self, baseline: "Prediction | None" = None, categories: Sequence[str] = ()) -> dict:
        """JSON-ready figures; with the `baseline`'s prediction and each prompt's category, the predicted
        speedup of each category too."""
        found = {
            **self.replay.counts(),
            "tok_s": round(self.tok_s, 3),
            "speedup": None if self.speedup is None else round(self.speedup, 4),
        }
        if baseline is not None and categories:
            found["by_category"] = self.by_category(baseline, categories)
        return found

    def by_category(self, baseline: "Prediction", categories: Sequence[str]) -> dict[str, float]:
        """Predicted speedup of each category: the baseline's predicted decode time over this one's, summed
        over the category's prompts (the same ratio the race measures)."""
        sums: dict[str, list[float]] = {}
        for category, own, base in zip(categories, self.decode_ms, baseline.decode_ms):
            pair = sums.setdefault(category, [0.0, 0.0])
            pair[0] += base
            pair[1] += own
        return {category: round(base / own, 4) for category, (base, own) in sums.items() if own > 0}


@dataclass(frozen=True)
class DraftCharge:
    """Which draft's costs a configuration's steps pay besides the target's: a draft model's (draft-simple:
    its mirror of each verify batch and its single-token decodes), or a DFlash/DSpark draft's
    (`block_rows`: the block decoded per draft, and every step's kept rows fed to it), whose verify is a
    tree's with `tree` (PCTree)."""

    draft: str | None = None
    block_rows: int = 0
    tree: bool = False


def cost_terms(prompt: PromptReplay, cost: CostModel, charge: DraftCharge) -> CostTerms:
    """One prompt's in-process decode time, split into CostTerms."""
    steps = prompt.steps
    tree = cost.trees.get(charge.draft) if charge.tree else None
    build = cost.tree_builds.get(charge.draft) if charge.tree else None
    target = block = draft = 0.0
    for size, position, emitted in zip(steps.batch_sizes, steps.positions, steps.emitted):
        verify = tree if tree is not None and size > 1 else cost.target
        target += verify.at(size, position) + emitted * cost.sampler_ms
        if build is not None and size > 1:
            block += build.at(size, position)
    depth = float(np.mean(steps.positions)) if steps.positions else 0.0
    if charge.block_rows:
        if charge.draft in cost.blocks:
            block += prompt.draft_decodes * cost.blocks[charge.draft].at(charge.block_rows, depth)
        if charge.draft in cost.injects:
            inject = cost.injects[charge.draft]
            block += sum(inject.at(emitted, position) for position, emitted in zip(steps.positions, steps.emitted))
    elif charge.draft in cost.drafts:
        curve = cost.drafts[charge.draft]
        draft += sum(curve.at(size, position) for size, position in zip(steps.batch_sizes, steps.positions))
        draft += prompt.draft_decodes * (curve.at(1, depth) + cost.draft_sampler_ms.get(charge.draft, 0.0))
    extra_rows = sum(size - 1 for size in steps.batch_sizes)
    scale = prompt.scale
    return CostTerms(target * scale, len(steps.batch_sizes) * scale, extra_rows * scale, draft * scale, block * scale)


def raw_decode_ms(prompt: PromptReplay, cost: CostModel, charge: DraftCharge) -> float:
    """The in-process time of one prompt's decode steps (the uncalibrated sum of its terms)."""
    terms = cost_terms(prompt, cost, charge)
    return terms.target_ms + terms.draft_ms + terms.block_ms


def predict(
    replay: Replay,
    cost: CostModel,
    calibration: Calibration,
    *,
    charge: DraftCharge = DraftCharge(),
    baseline_tok_s: float | None = None,
) -> Prediction:
    """`replay`'s predicted llama-server figures; `charge`: the draft costs its steps pay."""
    decode_ms = tuple(calibration.decode_ms(cost_terms(p, cost, charge)) for p in replay.prompts)
    tokens = sum(p.decode_tokens for p in replay.prompts)
    tok_s = tokens * 1000.0 / sum(decode_ms) if sum(decode_ms) > 0 else 0.0
    return Prediction(replay, decode_ms, tok_s, tok_s / baseline_tok_s if baseline_tok_s else None)


def fit_calibration(runs: Sequence[tuple[Replay, DraftCharge, Sequence[float]]], cost: CostModel) -> Calibration:
    """Fit the factors to llama-server's measured per-prompt decode ms of each (replay, draft charge,
    measured) run, under PRIOR; a prompt measured as nan (a reference that left before it) is not fitted.
    The error is then the fitted model's, per configuration, on the tok/s of the prompts it measured
    (in sample)."""
    rows, terms_of = [], []
    for replay_, charge, measured in runs:
        terms = [cost_terms(p, cost, charge) for p in replay_.prompts]
        terms_of.append(terms)
        rows += [t.vector() / ms for t, ms in zip(terms, measured) if ms > 0 and t.steps]
    if not rows:
        return Calibration()
    a = np.array(rows)
    used = [i for i in range(a.shape[1]) if np.any(a[:, i] > 0)]
    plain = a[np.all(a[:, 2:] == 0, axis=1) & (a[:, 0] > 0), 0]  # the baseline's prompts: target / measured
    prior, spread = _prior(cost, pace=float(np.median(1.0 / plain)) if len(plain) else 1.0)
    weights = np.diag(1.0 / spread[used])
    solution, _ = nnls(
        np.vstack([a[:, used], weights]), np.concatenate([np.ones(len(rows)), prior[used] / spread[used]])
    )
    factors = {name: float(value) for name, value in zip(FACTORS, prior)}
    factors.update({FACTORS[i]: float(v) for i, v in zip(used, solution)})
    calibration = Calibration(
        factors["scale"],
        factors["per_step_ms"],
        factors["per_row_ms"],
        factors["draft_scale"] if 3 in used else None,
        factors["block_scale"] if 4 in used else None,
        len(rows),
        len(runs),
    )
    errors = []
    for (_, _, measured), terms in zip(runs, terms_of):
        pairs = [(t, ms) for t, ms in zip(terms, measured) if ms > 0]  # the prompts it was measured on
        predicted_ms = sum(calibration.decode_ms(t) for t, _ in pairs)
        measured_ms = sum(ms for _, ms in pairs)
        if measured_ms > 0 and predicted_ms > 0:
            errors.append(abs(measured_ms / predicted_ms - 1))  # equal tokens: tok/s ratio = time ratio
    if errors:
        calibration = replace(calibration, error=float(np.median(errors)), worst_error=float(np.max(errors)))
    return calibration


def _prior(cost: CostModel, pace: float) -> tuple[np.ndarray, np.ndarray]:
    """PRIOR as arrays in FACTORS order, at `pace` (llama-server's time over the in-process time of the
    baseline), the additive terms' spreads in ms of this target's costs."""
    depth = cost.target.depths[0]
    step_ms = cost.target.at(1, depth)
    largest = cost.target.sizes[-1]
    row_ms = max((cost.target.at(largest, depth) - step_ms) / max(largest - 1, 1), 1e-3)
    unit = {"per_step_ms": step_ms, "per_row_ms": row_ms}
    values = np.array([PRIOR[name][0] * pace for name in FACTORS])
    spreads = np.array([PRIOR[name][1] * pace * unit.get(name, 1.0) for name in FACTORS])
    return values, spreads
