"""A search within a budget (`--budget`, or the search space's `model.budget_per_target` a target), sized on
the plan's arithmetic (autotune.search.plan).

The budget caps the whole search, its downloads aside. `fit_budget` sizes the phases to it: of the
predictions it may run (as long as the race, then on fewer prompts, one a category, then on fewer tokens a
prompt, halved down to PREDICT_MIN_TOKENS), each with the round after the decision over the whole mix or
over one prompt a category (`Workload.replicate_per_category`), it takes the one that leaves the race the
most time, and among those the longest prediction, then the round after the decision over the whole mix. So
a faster machine, or a larger budget, never races less, and never predicts on fewer tokens. The race always
runs the user's mix and --max-tokens, and gets what the prediction leaves (its own budget where that fits),
less the round after the decision. A budget too small for the race's first bound (PROMPT_MIN_UNITS prompts
of every entrant, where a large effect can already decide) after the shortest prediction is refused, naming
the smallest that would do; a space's default is raised to it instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autotune.errors import UsageError
from autotune.measure.stratified import MIN_ROUNDS, PROMPT_MIN_UNITS
from autotune.race.race import RaceBudget
from autotune.search.plan._phases import (
    Pace,
    Shape,
    Workload,
    after_decision_s,
    minutes,
    plan_phases,
    race_phase,
    race_round_s,
)
from autotune.spec.duration import duration_s
from autotune.spec.space import SearchSpace
from autotune.study.verdict import SEARCH_BUDGET_CAP, SPACE_BUDGET_CAP

#: the fewest tokens a prompt a prediction is shortened to (the race always runs the user's --max-tokens)
PREDICT_MIN_TOKENS = 64
#: the fewest finalists a budget leaves a race (`finalists_within`)
MIN_FINALISTS = 2


@dataclass(frozen=True)
class SearchBudget:
    """`--budget`: the most a whole search may take, its downloads aside (`15m`, `1h`, `900s`); `seconds` None
    is `--budget none`, no cap."""

    seconds: float | None
    how: str = "--budget"  # where it came from, as the lines that name it say
    given: bool = True  # the user's (--budget): refused where too small; a default is raised instead

    @classmethod
    def parse(cls, text: str) -> "SearchBudget":
        """`--budget TEXT`: a duration, or `none` (no cap: the race stops at --race-budget)."""
        if str(text).strip().lower() == "none":
            return cls(None)
        seconds = duration_s(text)
        if seconds is None:
            raise UsageError(f"--budget {text}: give a duration (15m, 1h, 900s), or none for no cap")
        return cls(seconds)

    @classmethod
    def default(cls, space: SearchSpace, targets: int) -> "SearchBudget | None":
        """The space's `model.budget_per_target` for each of `targets` (None where it states none)."""
        per_target = space.model.budget_per_target
        if per_target is None:
            return None
        return cls(
            duration_s(per_target) * max(1, targets),
            f"the space's budget_per_target of {per_target} a target x {max(1, targets)}",
            given=False,
        )

    @property
    def race_cap(self) -> str:
        """What this budget is to a race it leaves time to (autotune.study.verdict.BUDGET_CAPS)."""
        return SEARCH_BUDGET_CAP if self.given else SPACE_BUDGET_CAP

    def describe(self) -> str:
        return minutes(self.seconds)


def search_budget(given: SearchBudget | None, space: SearchSpace, targets: int) -> SearchBudget | None:
    """What a search runs under: `given` (--budget; `none` is no cap), or where none is given the space's default
    for `targets` targets; None where there is no cap."""
    budget = SearchBudget.default(space, targets) if given is None else given
    return budget if budget is not None and budget.seconds is not None else None


def prediction_shapes(work: Workload) -> list[Shape]:
    """The prediction as long as the race, then shorter in the order a budget shortens it: one prompt a
    category, then fewer tokens a prompt, halved down to PREDICT_MIN_TOKENS."""
    tokens = [work.max_tokens]
    while tokens[-1] // 2 >= PREDICT_MIN_TOKENS:
        tokens.append(tokens[-1] // 2)
    shapes = [work.raced]
    fewest = work.categories if 0 < work.categories < work.prompts else work.prompts
    shapes += [Shape(fewest, t) for t in tokens if Shape(fewest, t) != work.raced]
    return shapes


def fit_budget(work: Workload, pace: Pace, budget: SearchBudget) -> tuple[Workload, SearchBudget]:
    """`work` sized to `budget`, and the budget it is sized to (module docstring): of the predictions that leave
    the race its first bound, the one that leaves the race the most time (to the second), then the longest,
    then the one whose round after the decision runs the whole mix; its race of its own budget where that fits
    what the prediction leaves, else of those seconds less the round after the decision. Where none fits, a
    user's budget is refused (UsageError, naming the smallest that would do) and a default one raised to that
    smallest."""
    fitted = [work.predicting(shape) for shape in prediction_shapes(work)]
    if 0 < work.categories < work.prompts:  # then the same with the round after the decision on a category's prompt
        fitted += [replace(w, replicate_per_category=True) for w in fitted]
    before = [sum(p.seconds for p in plan_phases(w, pace) if p.name != "race") for w in fitted]
    least = [first_bound_s(w, pace) for w in fitted]
    fits = [i for i, b in enumerate(before) if b + least[i] <= budget.seconds]
    smallest = math.ceil(min(b + first for b, first in zip(before, least)) / 60)
    if not fits and not budget.given:  # a default too small for this machine is raised, never refused
        return fit_budget(
            work,
            pace,
            SearchBudget(
                smallest * 60.0, f"{budget.how}, raised to the smallest that gives a verdict here", given=False
            ),
        )
    if not fits:
        raise UsageError(
            f"--budget {budget.describe()} is too small for a verdict here: the shortest prediction "
            f"({fitted[-1].predicted.describe()}) takes up to {minutes(before[-1])}, and the race needs "
            f"{minutes(least[-1])} for its first bound; give at least --budget {smallest}m (or fewer "
            "prompts or tokens: --per-category, --max-tokens)"
        )
    chosen = max(
        fits,
        key=lambda i: (
            round(racing_s(fitted[i], pace, budget.seconds - before[i])),
            fitted[i].predicted.mix_tokens,
            not fitted[i].replicate_per_category,
        ),
    )
    work, before_s = fitted[chosen], before[chosen]
    if before_s + race_phase(work, pace).seconds <= budget.seconds:
        return work, budget
    left = budget.seconds - before_s - after_decision_s(work, pace)
    return replace(work, race_budget=RaceBudget(seconds=left, cap=budget.race_cap)), budget


def racing_s(work: Workload, pace: Pace, left_s: float) -> float:
    """The seconds `work`'s race rounds get where `left_s` of the budget is left for the race: its own budget
    where that fits, else what is left less the round after the decision."""
    after = after_decision_s(work, pace)
    return min(race_phase(work, pace).seconds - after, left_s - after)


def first_bound_s(work: Workload, pace: Pace) -> float:
    """The least race that can give a verdict: PROMPT_MIN_UNITS prompts of every entrant on fresh servers (the
    per-prompt sequence's first bound, where a large effect can decide), then the round after the decision."""
    first = Shape(min(PROMPT_MIN_UNITS, work.prompts), work.max_tokens)
    return race_round_s(work, pace, first) + after_decision_s(work, pace)


def budget_line(budget: SearchBudget, work: Workload) -> str:
    """`budget: 30.0 min (...): the prediction on 11 prompts x 128 tokens (the race's 44 x 512), the race up to
    12.0 min`: how a search spends its budget."""
    prediction = (
        "the prediction as long as the race"
        if work.predicted == work.raced
        else f"the prediction on {work.predicted.describe()} (the race's {work.prompts} x {work.max_tokens})"
    )
    after = ", its round after the decision on one prompt a category" if work.replicate_per_category else ""
    return (
        f"budget: {budget.describe()} ({budget.how}; downloads aside): {prediction}, the race up to "
        f"{work.race_budget.describe()}{after}"
    )


def finalists_within(work: Workload, pace: Pace, budget: RaceBudget) -> int:
    """The most finalists (at most the workload's, at least MIN_FINALISTS) whose race plays MIN_ROUNDS complete
    rounds within a race `budget` of seconds, where the stratified test first bounds anything: a race cut
    before them decides on a large effect only, and a round of every entrant buys more than a seat does."""
    top = work.race_top
    if budget.seconds is None:
        return top
    while top > MIN_FINALISTS and (
        MIN_ROUNDS * race_round_s(replace(work, race_top=top), pace, work.raced) > budget.seconds
    ):
        top -= 1
    return top


def race_budget_left(work: Workload, pace: Pace, left_s: float, cap: str = SEARCH_BUDGET_CAP) -> RaceBudget:
    """The race's budget once the phases before it ran, `left_s` seconds of the search's budget left: its
    rounds where they still fit, else the seconds left less the round after the decision, however few or many
    the plan gave it (the phases before it are priced at their most, and a race gets what they did not
    spend; one round's worth at least: a race that cannot finish a round still gives its standing result)."""
    if work.race_budget.rounds is not None and race_phase(work, pace).seconds <= left_s:
        return work.race_budget
    return RaceBudget(seconds=max(left_s - after_decision_s(work, pace), 1.0), cap=cap)
