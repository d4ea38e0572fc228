"""The speedup of one configuration over another, measured on the same prompts in the same rounds, with
bounds that stay valid at every look: a race may look after every prompt and stop whenever it likes.

The speedup is the user's ratio: the mix's decode time of the reference over the entrant's, summed over
the units both measured, `S = sum(a) / sum(b)`. (Each entrant unit is first scaled to the reference's
tokens, so a near-tie that changes an output's length does not change the work compared; at
temperature 0 the token counts are equal and S is the plain ratio of decode times, the ratio of mix
tok/s.)

Its bounds come from inverting a test of E[a - r b] = 0 over r, which is linear in the data and needs
no delta method: for a candidate r the units' differences X_i(r) = a_i - r b_i are summed, and r is
rejected where that sum, in units of its standard deviation, crosses the one-sided normal-mixture
boundary of autotune.measure.anytime. That boundary holds at every look at once (Ville's inequality), so
the interval printed wherever a race stopped is as valid as one planned for that look. Assumptions,
stated: the differences of a unit are independent given the past and near Gaussian (a prompt's decode
time is a sum over hundreds of tokens), and their variance is estimated as the race goes, shrunk
towards a prior per-unit noise (PRIOR_UNIT_SD, worth PRIOR_DF units) so that two or three lucky prompts
cannot make it small; with the variance estimated the guarantee is asymptotic (Waudby-Smith et al.
2023, "Time-uniform central limit theory"), and the prior is what keeps the early looks honest. The
prompt order of each round is shuffled by the race, so the prompts seen so far are a random part of the
mix, not one category.

What a unit is follows how it was measured. Prompt by prompt (the race's live servers, each prompt on
every entrant seconds apart), a unit is one prompt: the box's drift cancels inside the pair. But every
server instance carries a speed of its own, shared by every prompt it answers, which pairing cannot
cancel: measured on this 2-core box, an A/A (the plain command against itself, 8 rounds x 44 prompts,
servers started afresh each round) had per-round ratios 0.978-1.011, sd of log 0.0109, 4.8 times the
variance its prompt-to-prompt spread predicts (sd 0.0049): about 1 % (INSTANCE_PAIR_SD) for a fresh
pair of instances. So the bounds add, on the log scale, a second anytime-valid term for the mean of
the rounds' instance effects (a normal mixture over rounds with that sd, known; the race's own rounds
raise it where their spread says more), and the error rate is split between the two terms
(INSTANCE_SHARE). One round can then prove a 1.2x, never a 1.01x: more rounds average more instances.
Whole mixes one configuration at a time (one server at a time, the in-process engine, several streams),
a unit is one round: its own instance and the drift of its minutes are in the unit's spread already.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from autotune.measure.anytime import mixture_bound

#: a difference smaller than this is never a win (pyperf never calls a 1 % difference significant)
MIN_EFFECT = 0.02
#: sd of log(ratio) that a fresh pair of server instances adds (the A/A of the module docstring)
INSTANCE_PAIR_SD = 0.01
#: the share of the error rate spent on the instances' term where units are prompts
INSTANCE_SHARE = 0.2
#: the prior noise of one unit's difference, relative to the reference unit's mean, and its weight in units
PRIOR_UNIT_SD = 0.03
PRIOR_DF = 2.0
#: units before any bound is finite
MIN_UNITS = 3
#: where the prompt term's boundary is tightest: about one mix of prompts
V_OPT_UNITS = 11.0


@dataclass(frozen=True)
class Units:
    """One configuration's measured units: per round, the decode ms and decode tokens of each prompt in the
    order they ran, and which prompt of the mix each was (`order`; empty: the mix's own order)."""

    decode_ms: tuple[tuple[float, ...], ...]
    tokens: tuple[tuple[int, ...], ...]
    order: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(
        cls, decode_ms: Sequence[Sequence[float]], tokens: Sequence[Sequence[int]], order: Sequence[Sequence[int]] = ()
    ) -> "Units":
        return cls(
            tuple(tuple(float(v) for v in r) for r in decode_ms),
            tuple(tuple(int(v) for v in r) for r in tokens),
            tuple(tuple(int(v) for v in r) for r in order),
        )

    @property
    def rounds(self) -> int:
        return len(self.decode_ms)

    def prompt_order(self, round_: int) -> tuple[int, ...]:
        """The mix index of each unit of round `round_`."""
        return self.order[round_] if round_ < len(self.order) else tuple(range(len(self.decode_ms[round_])))

    def columns(self, indices: Sequence[int]) -> "Units":
        """These units restricted to the prompts at `indices` of the mix (a category)."""
        wanted = set(indices)
        keep = [[j for j, p in enumerate(self.prompt_order(k)) if p in wanted] for k in range(self.rounds)]
        return Units(
            tuple(tuple(r[j] for j in js) for r, js in zip(self.decode_ms, keep)),
            tuple(tuple(r[j] for j in js) for r, js in zip(self.tokens, keep)),
            tuple(tuple(self.prompt_order(k)[j] for j in js) for k, js in enumerate(keep)),
        )

    def tok_s(self) -> float:
        """Mix tok/s over every unit: sum of tokens over sum of decode time."""
        ms = sum(map(sum, self.decode_ms))
        return sum(map(sum, self.tokens)) * 1000.0 / ms if ms > 0 else 0.0


@dataclass(frozen=True)
class Speedup:
    """The paired speedup of an entrant over a reference, and its anytime-valid bounds (module docstring)."""

    ratio: float
    reference_ms: tuple[float, ...]  # per unit
    entrant_ms: tuple[float, ...]  # per unit, scaled to the reference's tokens
    unit_rounds: tuple[int, ...]  # the round of each unit
    instance_sd: float  # the instances' term (0: units are whole rounds, which carry it already)
    rounds: int
    prompts: int  # prompts a full round

    @property
    def units(self) -> int:
        return len(self.reference_ms)

    def lower_bound(self, alpha: float) -> float:
        """A lower bound of the speedup that holds with probability 1 - alpha at every look at once."""
        return self._bound(alpha, -1)

    def upper_bound(self, alpha: float) -> float:
        """An upper bound of the speedup that holds with probability 1 - alpha at every look at once."""
        return self._bound(alpha, 1)

    def interval(self, alpha: float = 0.025) -> tuple[float, float]:
        """(lower_bound(alpha), upper_bound(alpha)): each side holds at 1 - alpha (by default a 95 % interval
        valid at every look)."""
        return (self.lower_bound(alpha), self.upper_bound(alpha))

    def p_faster(self, than: float = 1.0) -> float:
        """The anytime-valid p-value of `speedup <= than`: the least alpha whose lower bound is above `than`."""
        return self._p(lambda alpha: self.lower_bound(alpha) > than)

    def p_slower(self, than: float = 1.0) -> float:
        """The anytime-valid p-value of `speedup >= than`: the least alpha whose upper bound is below `than`."""
        return self._p(lambda alpha: self.upper_bound(alpha) < than)

    def _p(self, rejects) -> float:
        if self.ratio <= 0 or self.units < MIN_UNITS or not rejects(0.5):
            return 1.0
        low, high = -36.0, math.log(0.5)  # bisection on log alpha: rejects() is monotone in alpha
        if rejects(math.exp(low)):
            return math.exp(low)
        for _ in range(40):
            middle = (low + high) / 2
            low, high = (low, middle) if rejects(math.exp(middle)) else (middle, high)
            if high - low < 1e-3:
                break
        return math.exp(high)

    def _bound(self, alpha: float, side: int) -> float:
        if self.ratio <= 0 or self.units < MIN_UNITS:
            return 0.0 if side < 0 else math.inf
        a, b = np.array(self.reference_ms), np.array(self.entrant_ms)
        share = INSTANCE_SHARE if self.instance_sd > 0 else 0.0
        n = float(len(a))
        bound = float(prompt_term(*sums(a, b), mixture_bound(n, alpha * (1 - share), V_OPT_UNITS), side))
        if share == 0 or not math.isfinite(bound) or bound <= 0:
            return bound
        rounds = np.array(self.unit_rounds)
        full_round = float(a.mean()) * max(self.prompts, 1)
        weights = np.array([a[rounds == k].sum() for k in np.unique(rounds)]) / full_round
        sd = max(self.instance_sd, _between_round_sd(a, np.array(self.entrant_ms), rounds, self.prompts))
        v = float(np.sum(weights**2))
        return bound * math.exp(side * sd * mixture_bound(v, alpha * share, 1.0) / float(weights.sum()))


def sums(a: np.ndarray, b: np.ndarray, axis=None) -> tuple[np.ndarray, ...]:
    """What the prompt term reads of paired units (`a` the reference's, `b` the entrant's; zeros where a
    unit was not run, along `axis`): their count, sums, and centred sums of squares and products."""
    run = (a > 0) & (b > 0)
    n = np.sum(run, axis=axis)
    safe = np.maximum(n, 1)
    total_a, total_b = np.sum(a, axis=axis), np.sum(b, axis=axis)
    return (
        n,
        total_a,
        total_b,
        np.sum(a * a, axis=axis) - total_a**2 / safe,
        np.sum(a * b, axis=axis) - total_a * total_b / safe,
        np.sum(b * b, axis=axis) - total_b**2 / safe,
    )


def prompt_term(
    n,
    total_a,
    total_b,
    saa,
    sab,
    sbb,
    u,
    side: int,
    *,
    prior_sd: float = PRIOR_UNIT_SD,
    prior_df: float = PRIOR_DF,
    min_units: int = MIN_UNITS,
) -> np.ndarray:
    """The prompt term: the least (side -1) or greatest (side 1) r the test of E[a - r b] = 0 keeps, where
    the standardised sum sum(a - r b) / sd(r) reaches the boundary `u`. The unit variance sd(r)^2 =
    (centred sum of squares of a - r b + the prior's) / (n - 1 + prior_df) is quadratic in r, so the
    bound is a root of a quadratic (Fieller's): q2 r^2 - 2 q1 r + q0 = 0. Arrays of pairs at once; no
    bound (0 or inf) below `min_units` units, or where the entrant's own sum is lost in its noise (q2 <= 0)."""
    n = np.asarray(n, dtype=float)
    safe = np.maximum(n, 1.0)
    c = np.asarray(u, dtype=float) ** 2 / np.maximum(n - 1 + prior_df, 1e-9)
    prior = prior_df * (prior_sd * total_a / safe) ** 2
    q2 = total_b**2 - c * sbb
    q1 = total_a * total_b - c * sab
    q0 = total_a**2 - c * (saa + prior)
    disc = q1 * q1 - q2 * q0
    ok = (n >= min_units) & (q2 > 0) & (disc >= 0) & (total_b > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        root = (q1 + side * np.sqrt(np.where(ok, disc, 0.0))) / np.where(ok, q2, 1.0)
    return np.where(ok, np.maximum(root, 0.0), 0.0 if side < 0 else np.inf)


def _between_round_sd(a: np.ndarray, b: np.ndarray, rounds: np.ndarray, prompts: int) -> float:
    """The sd of log(ratio) between rounds beyond what each round's prompt spread explains, from the complete
    rounds (0 with fewer than three): a busy box's rounds say more than the quiet-box prior."""
    complete = [k for k in np.unique(rounds) if np.sum(rounds == k) >= max(prompts, 2)]
    if len(complete) < 3:
        return 0.0
    logs, within = [], []
    for k in complete:
        ak, bk = a[rounds == k], b[rounds == k]
        ratio = ak.sum() / bk.sum()
        logs.append(math.log(ratio))
        x = ak - ratio * bk
        within.append(len(x) / (len(x) - 1) * float(np.sum(x**2)) / float(ak.sum()) ** 2)
    excess = float(np.var(logs, ddof=1)) - float(np.mean(within))
    return math.sqrt(excess) if excess > 0 else 0.0


def paired_speedup(
    reference: Units, entrant: Units, *, pair_by_unit: bool, instance_sd: float = INSTANCE_PAIR_SD
) -> Speedup:
    """`entrant`'s speedup over `reference` on the units both measured: per round, the prompts both ran
    (the first of each round's order: an entrant that left mid-round ran a prefix of it).

    `pair_by_unit`: the two ran each prompt back to back, so every prompt is a unit and the instances'
    term is added (`instance_sd`); otherwise every round is one unit (see the module docstring)."""
    rounds = min(reference.rounds, entrant.rounds)
    prompts = max((len(r) for r in reference.decode_ms[:rounds]), default=0)
    a_units, b_units, unit_rounds = [], [], []
    for k in range(rounds):
        n = min(len(reference.decode_ms[k]), len(entrant.decode_ms[k]))
        if n == 0:
            continue
        a = np.array(reference.decode_ms[k][:n], dtype=float)
        own_tokens = np.maximum(np.array(entrant.tokens[k][:n], dtype=float), 1.0)
        b = (
            np.array(entrant.decode_ms[k][:n], dtype=float)
            * np.array(reference.tokens[k][:n], dtype=float)
            / own_tokens
        )
        if pair_by_unit:
            a_units += a.tolist()
            b_units += b.tolist()
            unit_rounds += [k] * n
        else:
            a_units.append(float(a.sum()))
            b_units.append(float(b.sum()))
            unit_rounds.append(k)
    total_b = sum(b_units)
    ratio = sum(a_units) / total_b if total_b > 0 else 0.0
    return Speedup(
        ratio, tuple(a_units), tuple(b_units), tuple(unit_rounds), instance_sd if pair_by_unit else 0.0, rounds, prompts
    )
