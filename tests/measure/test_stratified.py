"""The stratified test over complete rounds, against its formula computed here apart (a two-way fit by
least squares, the control's rounds by hand); the noise it reads from the control; the void-round guard."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.measure.anytime import mixture_bound
from autotune.measure.stratified import (
    PRIOR_PAIR_DF,
    PRIOR_PAIR_SD,
    TAU_FLOOR,
    V_OPT_ROUNDS,
    Evidence,
    Noise,
    control_noise,
    void_rounds,
)

RNG = np.random.default_rng(4)
LENGTHS = RNG.uniform(48, 400, 11) * 20
SPEEDUPS = np.linspace(0.9, 1.6, 11)  # a prompt's own speedup: the same every round


def rounds(speedups: np.ndarray, count: int, noise: float, seed: int, instance: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    own = np.exp(rng.normal(0, instance, (count, 1)))
    return LENGTHS / speedups * own * (1 + rng.normal(0, noise, (count, len(LENGTHS))))


def test_the_bound_is_the_mean_round_log_ratio_with_tau_and_the_residual_sd():
    a, b = rounds(np.ones(11), 3, 0.03, 1), rounds(SPEEDUPS, 3, 0.03, 2)
    noise = Noise(np.array(0.012**2), np.array(0.0001))
    evidence = Evidence(a, b, noise)
    logs = np.log(a.sum(1) / b.sum(1))
    d = np.log(a / b)
    design = np.hstack([np.kron(np.eye(3), np.ones((11, 1))), np.kron(np.ones((3, 1)), np.eye(11))[:, 1:]])
    fitted = design @ np.linalg.lstsq(design, d.ravel(), rcond=None)[0]
    sigma2 = np.sum((d.ravel() - fitted) ** 2) / (2 * 10)
    v = 0.012**2 + sigma2 * np.mean(np.sum((a / a.sum(1, keepdims=True)) ** 2, 1))
    low = math.exp(logs.mean() - math.sqrt(v) * mixture_bound(3.0, 0.01, V_OPT_ROUNDS) / 3)
    assert float(evidence.stratified_bound(0.01, -1)) == pytest.approx(low, rel=1e-4)
    assert float(evidence.stratified_ratio) == pytest.approx(math.exp(logs.mean()))


def test_a_prompts_own_speedup_is_no_noise_to_the_stratified_test_but_is_to_the_per_prompt_one():
    a, b = rounds(np.ones(11), 2, 0.02, 3), rounds(SPEEDUPS, 2, 0.02, 4)
    evidence = Evidence(a, b, Noise(np.array(TAU_FLOOR**2), np.array(0.02**2 * 2)))
    stratified = float(evidence.stratified_bound(0.0125, 1) / evidence.stratified_bound(0.0125, -1))
    by_prompt = float(evidence.prompt_bound(0.0125, 1) / evidence.prompt_bound(0.0125, -1))
    assert stratified < 1.15 < 1.3 < by_prompt


def test_no_stratified_bound_before_a_complete_round():
    a, b = rounds(np.ones(11), 1, 0.02, 5), rounds(np.ones(11) * 1.5, 1, 0.02, 6)
    b[0, 7:] = np.nan  # the entrant has run 7 prompts of the round
    evidence = Evidence(a, b, Noise(np.array(TAU_FLOOR**2), np.array(0.001)))
    assert float(evidence.stratified_bound(0.05, -1)) == 0 and math.isinf(evidence.stratified_bound(0.05, 1))
    assert float(evidence.prompt_bound(0.05, -1)) > 1.2  # a clear 1.5x is bounded by its first prompts


def test_tau_is_read_from_the_control_and_never_below_its_floor():
    quiet = control_noise(rounds(np.ones(11), 4, 0.02, 7), rounds(np.ones(11), 4, 0.02, 8))
    assert float(quiet.tau2) == pytest.approx(TAU_FLOOR**2)
    moving = control_noise(rounds(np.ones(11), 8, 0.02, 9), rounds(np.ones(11), 8, 0.02, 10, instance=0.04))
    assert 0.025 < math.sqrt(float(moving.tau2)) < 0.07
    none_yet = control_noise(np.full((1, 11), np.nan), np.full((1, 11), np.nan))
    assert float(none_yet.sigma2) == pytest.approx(PRIOR_PAIR_SD**2)  # the prior alone (PRIOR_PAIR_DF units)
    assert PRIOR_PAIR_DF > 0


def test_a_round_whose_control_moved_is_void_and_the_others_are_not():
    baseline, control = rounds(np.ones(11), 4, 0.02, 11), rounds(np.ones(11), 4, 0.02, 12)
    control[2] *= 0.85  # the control ran 1.18x in round 3: something took the baseline's cores
    assert void_rounds(baseline, control).tolist() == [False, False, True, False]
    control[3, 5:] = np.nan  # a round under way is judged on the prompts it has
    assert not void_rounds(baseline, control)[3]
