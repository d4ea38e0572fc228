"""The evidence a race's look reads of one configuration against another, for a batch of pairs at once: two
anytime-valid tests of the user's ratio, and the noise both assume, estimated from the race's control.

The data of a pair: per round k and prompt j of the mix, the reference's decode ms a_kj and the
entrant's b_kj (scaled to the reference's tokens), paired prompt by prompt on servers started afresh
each round; nan where a prompt has not run (yet). Two tests read them:

- **The per-prompt sequence** (autotune.measure.paired's test of E[a - r b] = 0, a unit per prompt, a
  look per prompt, and its instance term): it decides a large effect within the first round. Before a
  round is complete the prompts seen are a random part of the mix, but a few of them can miss the
  prompts where an entrant is slow (an n-gram drafter that loses on two prompts of eleven); so the
  race runs it with a strong prior on the unit noise (PROMPT_PRIOR_SD, worth PROMPT_PRIOR_DF units) and
  no bound before PROMPT_MIN_UNITS prompts, and spends only a share of its error rate on it.
- **The stratified test**, a unit per complete round: L_k = log(sum_j a_kj / sum_j b_kj), the user's
  time-weighted ratio on that round. Each round holds every prompt, so a prompt's own speedup is the
  same in every round and is no noise: with d_kj = log(a_kj / b_kj) = mu_j + eta_k + e_kj (a prompt
  effect, the round's pair of instances, the measurement), L_k ~ sum_j w_kj d_kj has variance
  tau^2 + sigma^2 sum_j w_kj^2, w_kj the prompt's share of the reference's time in the round. sigma^2 is
  the prompt x round residual of d (prompt and round effects removed), never below the control's own
  within-round spread (the pair noise of the plain command against itself); tau^2 is estimated from
  the control's complete rounds (the plain command raced against itself, its true L is 0), never
  below TAU_FLOOR^2. One variance (the mean over rounds) and one normal-mixture boundary over rounds
  (autotune.measure.anytime) give bounds on the mean of L_k valid at every round's end.

Assumptions, stated: the rounds' instance effects are independent across rounds and alike for every
configuration (the control's stand for all); the measurement noise of an entrant is no smaller than
the plain command's; with the variance estimated, the guarantee is asymptotic (Waudby-Smith et al.
2023). The simulations in tests/race check the error rates where these bend (a 2 % instance sd, slow
instances, rare-slow prompts). A round whose control lies VOID_SD sd from 1.00 is void (`void_rounds`):
the machine moved under it, and the race plays another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.measure.anytime import mixture_bounds
from autotune.measure.paired import INSTANCE_PAIR_SD, INSTANCE_SHARE, V_OPT_UNITS, prompt_term, sums

#: the per-prompt sequence's prior unit noise (relative to the reference's mean unit), its weight, and the
#: prompts before it bounds anything: chosen on the rare-slow simulations (tests/race/test_simulated.py)
PROMPT_PRIOR_SD = 0.10
PROMPT_PRIOR_DF = 6.0
PROMPT_MIN_UNITS = 6
#: the least instance sd a race assumes (the 2-core box's A/A: autotune.measure.paired)
TAU_FLOOR = INSTANCE_PAIR_SD
#: the pair noise assumed before the control has a round, and its weight in rounds' degrees of freedom
PRIOR_PAIR_SD = 0.03
PRIOR_PAIR_DF = 2.0
#: where the stratified boundary is tightest: the default budget's rounds
V_OPT_ROUNDS = 4.0
#: complete rounds before the stratified test bounds anything: with one, its instance variance would be the
#: floor's alone (one round of the control is one degree of freedom), and an instance that runs slow in
#: the baseline's server and the control's at once passes unseen (the slow-instance simulation)
MIN_ROUNDS = 2
#: a round whose control lies this many sd from 1.00 is void; a race replays at most MAX_VOID of them before
#: it ends with no winner (the machine keeps moving)
VOID_SD = 4.0
MAX_VOID = 2


@dataclass(frozen=True)
class Noise:
    """The race's noise, per race: tau2 the variance of a fresh pair of instances' log ratio, sigma2 the
    per-prompt pair noise of the plain command against itself (both on the log scale)."""

    tau2: np.ndarray
    sigma2: np.ndarray


def _masked(reference: np.ndarray, entrant: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(run, a, b): where both ran, and their times with 0 elsewhere."""
    run = np.isfinite(reference) & np.isfinite(entrant) & (reference > 0) & (entrant > 0)
    return run, np.where(run, reference, 0.0), np.where(run, entrant, 0.0)


def _rounds(run: np.ndarray, a: np.ndarray, b: np.ndarray):
    """Per round: the ratio's log, the sum of squared time shares, and the log ratios by prompt."""
    with np.errstate(divide="ignore", invalid="ignore"):
        round_a, round_b = a.sum(-1), b.sum(-1)
        logs = np.where(run.any(-1), np.log(round_a / np.where(round_b > 0, round_b, 1.0)), 0.0)
        shares = a / np.where(round_a > 0, round_a, 1.0)[..., None]
        by_prompt = np.where(run, np.log(np.where(run, a, 1.0) / np.where(run, b, 1.0)), 0.0)
    return logs, (shares**2).sum(-1), by_prompt


def control_noise(reference: np.ndarray, control: np.ndarray) -> Noise:
    """The noise of races (arrays (..., rounds, prompts) of the baseline's and the control's ms), from the
    control's rounds (module docstring)."""
    return _control(reference, control)[0]


def void_rounds(reference: np.ndarray, control: np.ndarray) -> np.ndarray:
    """(..., rounds): each round (complete or under way) whose control lies more than VOID_SD sd from 1.00,
    its sd sqrt(tau^2 + sigma^2 sum w^2) with tau estimated from the other rounds."""
    noise, run, logs, squares, excess, complete = _control(reference, control)
    others = np.maximum(complete.sum(-1, keepdims=True) - complete, 1)
    tau2 = np.maximum(TAU_FLOOR**2, (excess.sum(-1, keepdims=True) - excess) / others)
    sd = np.sqrt(tau2 + noise.sigma2[..., None] * squares)
    return run.any(-1) & (np.abs(logs) > VOID_SD * sd)


def _control(reference: np.ndarray, control: np.ndarray):
    """The control's noise, and per round: what ran, the log ratio, the sum of squared shares, each
    complete round's excess over the prompt noise (its share of tau^2), and which rounds are complete
    (sigma^2 reads the round under way too)."""
    run, a, c = _masked(reference, control)
    logs, squares, by_prompt = _rounds(run, a, c)
    counts = run.sum(-1)
    within = np.where(run, by_prompt - (by_prompt.sum(-1) / np.maximum(counts, 1))[..., None], 0.0)
    df = np.maximum(counts - 1, 0).sum(-1)
    sigma2 = ((within**2).sum((-2, -1)) + PRIOR_PAIR_DF * PRIOR_PAIR_SD**2) / (df + PRIOR_PAIR_DF)
    complete = run.all(-1)
    excess = np.where(complete, logs**2 - sigma2[..., None] * squares, 0.0)
    tau2 = np.maximum(TAU_FLOOR**2, excess.sum(-1) / np.maximum(complete.sum(-1), 1))
    return Noise(tau2, sigma2), run, logs, squares, excess, complete


class Evidence:
    """Both tests of each pair of a batch: `reference` and `entrant` (..., rounds, prompts) decode ms, nan
    where not run; `noise` broadcast to the batch's shape. `per_prompt` False: whole mixes one
    configuration at a time, where a round is the unit (its instance and drift are inside it) and only the
    paired test runs, on per-round sums, with autotune.measure.paired's own prior."""

    def __init__(self, reference: np.ndarray, entrant: np.ndarray, noise: Noise, *, per_prompt: bool = True):
        run, a, b = _masked(reference, entrant)
        self.per_prompt = per_prompt
        if not per_prompt:
            a, b = a.sum(-1, keepdims=True), b.sum(-1, keepdims=True)
            run = run.any(-1, keepdims=True)
        self._sums = sums(a, b, axis=(-2, -1))
        n, total_a, total_b = self._sums[:3]
        with np.errstate(divide="ignore", invalid="ignore"):
            self.ratio = np.where(total_b > 0, total_a / np.where(total_b > 0, total_b, 1.0), 0.0)
            shares = a.sum(-1) / (total_a / np.maximum(n, 1) * run.shape[-1])[..., None]
        self._shares = np.nan_to_num(shares)
        self._tau = np.sqrt(noise.tau2) if per_prompt else np.zeros_like(noise.tau2)
        complete = run.all(-1) & run.any(-1)
        self.rounds = complete.sum(-1)
        logs, squares, by_prompt = _rounds(run, a, b)
        k = np.maximum(self.rounds, 1)
        self.log_ratio = np.where(complete, logs, 0.0).sum(-1) / k
        self.variance = (
            noise.tau2 + self._sigma2(complete, by_prompt, noise) * np.where(complete, squares, 0).sum(-1) / k
        )

    @staticmethod
    def _sigma2(complete: np.ndarray, by_prompt: np.ndarray, noise: Noise) -> np.ndarray:
        """The prompt x round residual variance of the log ratios on the complete rounds, at least the control's."""
        rounds = np.maximum(complete.sum(-1), 1)[..., None]
        d = np.where(complete[..., None], by_prompt, 0.0)
        prompts = d.shape[-1]
        row = d.sum(-1, keepdims=True) / prompts
        column = d.sum(-2, keepdims=True) / rounds[..., None]
        grand = row.sum(-2, keepdims=True) / rounds[..., None]
        residual = np.where(complete[..., None], d - row - column + grand, 0.0)
        df = (complete.sum(-1) - 1) * (prompts - 1)
        own = (residual**2).sum((-2, -1)) / np.maximum(df, 1)
        return np.maximum(noise.sigma2, np.where(df > 0, own, 0.0))

    @property
    def stratified_ratio(self) -> np.ndarray:
        """exp of the mean of the complete rounds' log ratios: the stratified test's point."""
        return np.exp(self.log_ratio)

    def prompt_bound(self, alpha, side: int) -> np.ndarray:
        """The per-prompt sequence's bound at one-sided level `alpha` (a number, or one per pair)."""
        n = self._sums[0]
        share = INSTANCE_SHARE if self.per_prompt else 0.0
        if self.per_prompt:
            prior = dict(prior_sd=PROMPT_PRIOR_SD, prior_df=PROMPT_PRIOR_DF, min_units=PROMPT_MIN_UNITS)
        else:
            prior = {}
        u = _at_levels(lambda level: mixture_bounds(np.maximum(n, 1), level * (1 - share), V_OPT_UNITS), alpha, n)
        bound = prompt_term(*self._sums, u, side, **prior)
        if share == 0:
            return bound
        weight = self._shares.sum(-1)
        v = np.maximum((self._shares**2).sum(-1), 1e-4)
        term = _at_levels(lambda level: mixture_bounds(v, level * share, 1.0), alpha, v)
        with np.errstate(invalid="ignore", over="ignore"):
            return np.where(
                np.isfinite(bound) & (bound > 0),
                bound * np.exp(side * self._tau * term / np.maximum(weight, 1e-9)),
                bound,
            )

    def stratified_bound(self, alpha, side: int) -> np.ndarray:
        """The stratified test's bound at one-sided level `alpha`; none (0 or inf) before MIN_ROUNDS complete
        rounds."""
        k = np.maximum(self.rounds, 1).astype(float)
        u = _at_levels(lambda level: mixture_bounds(k, level, V_OPT_ROUNDS), alpha, k)
        bound = np.exp(self.log_ratio + side * np.sqrt(self.variance) * u / k)
        return np.where(self.rounds >= MIN_ROUNDS, bound, 0.0 if side < 0 else np.inf)


def _at_levels(compute, alpha, like: np.ndarray) -> np.ndarray:
    """`compute(level)` for each pair at its own `alpha` (a number, or an array with few distinct values)."""
    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), np.shape(like))
    out = np.zeros(np.shape(like))
    for level in np.unique(alpha):
        chosen = alpha == level
        out = np.where(chosen, compute(float(level)), out)
    return out
