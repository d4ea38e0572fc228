"""What keeps a race's verdict honest beyond its statistics (autotune.race.race): the control says whether the
machine's speed moved under the race, and the server's own counts say whether a speedup is possible at
all. Each guard is asked at every look and again of the round run after the decision."""

from __future__ import annotations

from autotune.measure.paired import Speedup
from autotune.measure.sequential import ALPHA
from autotune.race.entrants import Entrant, baseline_of, speedup_of
from autotune.study.records import BASELINE_ROLE, CONTROL_ROLE

#: the one-sided level of each side of the control's test (the plain command against itself)
CONTROL_ALPHA = 0.005
#: how far above the counts' ceiling a lower bound may lie before it is called an artefact (step costs
#: are measured with noise; a verify step is never cheaper than a plain one by more than this)
CEILING_SLACK = 0.05


def machine_moved(entrants: list[Entrant], figure: str, pairing: str) -> str | None:
    """Why the race cannot be believed, where a control's bounds exclude 1: the plain command ran at two
    speeds in the same race (None: the controls agree with their baselines)."""
    for control in (e for e in entrants if e.role == CONTROL_ROLE and e.rounds and e.failure is None):
        if (reason := control_moved(speedup_of(control, entrants, figure, pairing))) is not None:
            return reason
    return None


def control_moved(speedup: Speedup) -> str | None:
    """Why the control's speedup (the plain command over itself) says the machine moved: its bounds at
    CONTROL_ALPHA each side exclude 1 (None: they hold 1)."""
    low, high = speedup.interval(CONTROL_ALPHA)
    if low > 1.0 or high < 1.0:
        return (
            f"the machine's speed moved during the race: the plain command against itself measured "
            f"{speedup.ratio:.3f}x [{low:.3f}-{high:.3f}], which rules out 1.00x"
        )
    return None


def baseline_slowed(entrants: list[Entrant], figure: str, pairing: str) -> str | None:
    """Why an entrant's impossible speedup is its baseline's doing (None: it is not): a control measures the
    plain command faster than its baseline beyond CEILING_SLACK, at the level an artefact is judged at. The
    baseline's server alone ran slow (a neighbour's load on it), so every speedup over it is too high and
    the race cannot be believed: the machine moved, whatever the control's stricter test says yet."""
    for control in (e for e in entrants if e.role == CONTROL_ROLE and e.rounds and e.failure is None):
        speedup = speedup_of(control, entrants, figure, pairing)
        if speedup.lower_bound(ALPHA) > 1 + CEILING_SLACK:
            return (
                f"the machine's speed moved during the race: the plain command against itself measured "
                f"{speedup.ratio:.3f}x (at least {speedup.lower_bound(ALPHA):.3f}x), so its baseline's server "
                "ran slow and every speedup over it reads too high"
            )
    return None


def artefact(
    entrant: Entrant, entrants: list[Entrant], figure: str, pairing: str, rounds: slice = slice(None)
) -> str | None:
    """Why `entrant`'s speedup on `rounds` is a timing artefact (None: its server's own counts allow it): a
    lower bound more than CEILING_SLACK above the most its accepted drafts allow (each target step costs
    at least a plain decode step). Only where it runs the baseline's runtime settings: other threads or
    batch sizes change the cost of a step itself."""
    if (
        entrant.role in (BASELINE_ROLE, CONTROL_ROLE)
        or not entrant.in_race
        or figure != "mix_tok_s"
        or entrant.config.runtime != baseline_of(entrant, entrants).config.runtime
    ):
        return None
    low = speedup_of(entrant, entrants, figure, pairing, rounds).lower_bound(ALPHA)
    ceiling = count_ceiling(entrant, baseline_of(entrant, entrants), rounds)
    if ceiling is None or low <= ceiling * (1 + CEILING_SLACK):
        return None
    return (
        f"a timing artefact: at least {low:.2f}x measured, while its server's own counts (accepted drafts per "
        f"target step) allow at most {ceiling:.2f}x"
    )


def count_ceiling(entrant: Entrant, baseline: Entrant, rounds: slice = slice(None)) -> float | None:
    """The fastest `entrant` can be over `baseline` on the prompts both ran in `rounds`, given its accepted
    drafts."""
    spent = saved = 0.0
    for own, base in list(zip(entrant.rounds, baseline.rounds))[rounds]:
        for result, reference in zip(own.results, base.results):
            if result.n_generated <= 1:
                continue
            steps = max(result.n_generated - result.n_accepted, 1)
            spent += reference.decode_ms * steps / result.n_generated
            saved += reference.decode_ms
    return saved / spent if spent > 0 else None
