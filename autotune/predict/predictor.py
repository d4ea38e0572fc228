"""Counts x cost: a configuration's predicted decode time per prompt, its decode tok/s and speedup, and
the calibration that maps in-process step costs to what llama-server measures.

A prompt's decode time is the sum over its steps of the target's decode of the verify batch at that
depth (a tree's verify for PCTree), the sampler chain for each emitted position, and the draft's work
(`DraftCharge`): a draft model's mirror of the batch and its single-token decodes, or a DFlash/DSpark
draft's block decodes and the kept rows fed to it. llama-server then takes `scale` x that + `per_step_ms` per step:
both are fitted, by least squares on relative error, to the per-prompt decode times llama-server
measured for the configurations it ran (the baseline and `--spec-default` at first, the race's after);
the per-step time only where those runs' steps differ enough to tell it from the scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from autotune.predict.cost import CostModel
from autotune.predict.replay import PromptReplay, Replay


#: above this condition number the runs cannot separate the scale from the per-step time
MAX_CONDITION = 20.0


@dataclass(frozen=True)
class Calibration:
    """llama-server's decode time of a prompt = scale x predicted in-process time + per_step_ms x steps."""

    scale: float = 1.0
    per_step_ms: float = 0.0
    points: int = 0  # prompts fitted
    error: float | None = None  # median |predicted / measured - 1| of the fitted configurations' mix tok/s
    worst_error: float | None = None

    def as_dict(self) -> dict:
        return {"scale": round(self.scale, 5), "per_step_ms": round(self.per_step_ms, 5), "points": self.points,
                "error": None if self.error is None else round(self.error, 4),
                "worst_error": None if self.worst_error is None else round(self.worst_error, 4)}

    @classmethod
    def from_dict(cls, data: dict) -> "Calibration":
        return cls(data["scale"], data["per_step_ms"], data.get("points", 0), data.get("error"), data.get("worst_error"))


@dataclass(frozen=True)
class Prediction:
    """A configuration's predicted figures on llama-server."""

    replay: Replay
    decode_ms: tuple[float, ...]  # per prompt, calibrated
    tok_s: float
    speedup: float | None = None

    def as_dict(self) -> dict:
        return {**self.replay.counts(), "tok_s": round(self.tok_s, 3),
                "speedup": None if self.speedup is None else round(self.speedup, 4)}


@dataclass(frozen=True)
class DraftCharge:
    """Which draft's costs a configuration's steps pay besides the target's: a draft model's (draft-simple:
    its mirror of each verify batch and its single-token decodes), or a DFlash/DSpark draft's
    (`block_rows`: the block decoded per draft, and every step's kept rows fed to it), whose verify is a
    tree's with `tree` (PCTree)."""

    draft: str | None = None
    block_rows: int = 0
    tree: bool = False


def raw_decode_ms(prompt: PromptReplay, cost: CostModel, charge: DraftCharge) -> float:
    """The in-process time of one prompt's decode steps (see the module docstring)."""
    steps = prompt.steps
    tree = cost.trees.get(charge.draft) if charge.tree else None
    build = cost.tree_builds.get(charge.draft) if charge.tree else None
    total = 0.0
    for size, position, emitted in zip(steps.batch_sizes, steps.positions, steps.emitted):
        verify = tree if tree is not None and size > 1 else cost.target
        total += verify.at(size, position) + emitted * cost.sampler_ms
        if build is not None and size > 1:
            total += build.at(size, position)
    depth = float(np.mean(steps.positions)) if steps.positions else 0.0
    if charge.block_rows:
        if charge.draft in cost.blocks:
            total += prompt.draft_decodes * cost.blocks[charge.draft].at(charge.block_rows, depth)
        if charge.draft in cost.injects:
            inject = cost.injects[charge.draft]
            total += sum(inject.at(emitted, position) for position, emitted in zip(steps.positions, steps.emitted))
    elif charge.draft in cost.drafts:
        curve = cost.drafts[charge.draft]
        total += sum(curve.at(size, position) for size, position in zip(steps.batch_sizes, steps.positions))
        total += prompt.draft_decodes * (curve.at(1, depth) + cost.draft_sampler_ms.get(charge.draft, 0.0))
    return total


def predict(replay: Replay, cost: CostModel, calibration: Calibration, *, charge: DraftCharge = DraftCharge(),
            baseline_tok_s: float | None = None) -> Prediction:
    """`replay`'s predicted llama-server figures; `charge`: the draft costs its steps pay."""
    decode_ms = tuple(calibration.scale * raw_decode_ms(p, cost, charge) + calibration.per_step_ms * len(p.steps.batch_sizes)
                      for p in replay.prompts)
    tokens = sum(p.decode_tokens for p in replay.prompts)
    tok_s = tokens * 1000.0 / sum(decode_ms) if sum(decode_ms) > 0 else 0.0
    return Prediction(replay, decode_ms, tok_s, tok_s / baseline_tok_s if baseline_tok_s else None)


def fit_calibration(runs: Sequence[tuple[Replay, DraftCharge, Sequence[float]]], cost: CostModel) -> Calibration:
    """Fit scale and per-step time to llama-server's measured per-prompt decode ms of each (replay, draft
    charge, measured) run; the error is then the fitted model's, per configuration, on mix tok/s."""
    rows, targets = [], []
    for replay_, charge, measured in runs:
        for prompt, ms in zip(replay_.prompts, measured):
            if ms > 0 and prompt.steps.batch_sizes:
                rows.append((raw_decode_ms(prompt, cost, charge) / ms, len(prompt.steps.batch_sizes) / ms))
                targets.append(1.0)
    if not rows:
        return Calibration()
    a = np.array(rows)
    b = np.array(targets)
    scale_only = float(np.sum(a[:, 0]) / np.sum(a[:, 0] ** 2))
    scale, per_step = scale_only, 0.0
    # the per-step term only where the runs tell it apart from the scale: configurations whose steps cost
    # differently (the baseline alone, or beside a reference that hardly drafts, do not)
    if len(runs) > 1 and np.linalg.cond(a / np.linalg.norm(a, axis=0)) < MAX_CONDITION:
        fitted_scale, fitted_step = np.linalg.lstsq(a, b, rcond=None)[0]
        if fitted_scale > 0 and fitted_step >= 0:
            scale, per_step = float(fitted_scale), float(fitted_step)
    calibration = Calibration(float(scale), float(per_step), len(rows))
    errors = []
    for replay_, charge, measured in runs:
        predicted = predict(replay_, cost, calibration, charge=charge).tok_s
        tokens = sum(p.decode_tokens for p in replay_.prompts)
        actual = tokens * 1000.0 / sum(measured) if sum(measured) > 0 else 0.0
        if actual > 0:
            errors.append(abs(predicted / actual - 1))
    if errors:
        calibration = Calibration(calibration.scale, calibration.per_step_ms, len(rows), float(np.median(errors)),
                                  float(np.max(errors)))
    return calibration
