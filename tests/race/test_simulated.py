"""The race's decision (autotune.measure.sequential.decide, what race.py calls at every look) on synthetic
rounds, thousands of races a scenario, no llama.cpp: false winners at no more than the nominal rate at
the A/A and at the 2 % edge with every spread of prompts, a 2 % instance sd and slow instances; a real
1.10x found within 4 rounds whatever its spread; the 1.20x picked over a uniform 1.08x. Each rate is
asserted with its binomial tolerance: the test fails only where the rate is significantly (p < 0.01)
beyond the target."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from autotune.measure.sequential import ALPHA
from autotune.measure.simulation import scenarios, simulate

FAMILY = 3
NOMINAL = ALPHA / FAMILY
POWER = 0.95
RACES = {"error": 3000, "power": 1000}


@pytest.mark.parametrize("scenario, entrant, kind", scenarios(), ids=lambda value: getattr(value, "name", None))
def test_the_rate_meets_its_target(scenario, entrant, kind):
    races = RACES[kind]
    found = simulate(scenario, races, family=FAMILY, seed=11)
    hits = found.rate(entrant)
    if kind == "error":
        assert binomtest(hits, races, NOMINAL, alternative="greater").pvalue > 0.01, f"{hits}/{races} false winners"
    else:
        assert binomtest(hits, races, POWER, alternative="less").pvalue > 0.01, f"{hits}/{races} found"
        assert found.rounds[found.pick == entrant].max() <= 4


def test_a_void_round_is_replayed_and_counted():
    slow = next(s for s, _, _ in scenarios() if "slow instances" in s.name)
    found = simulate(slow, 500, family=FAMILY, seed=12)
    assert found.voids.sum() > 0 and found.voids.max() <= 3
