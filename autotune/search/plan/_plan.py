"""One predicted search's plan, made once from its options (`make_plan`) and handed to the predicted pipeline
and the race: the workload (the race's prompts and tokens, the prediction's shorter shape where the budget
asks for one, the race's finalists and budget, and what set that budget), the pace it is priced at, and the
search's budget.

A plan with no budget is not priced until the baselines are measured (`SearchPlan.priced`); one with a budget
is priced first, by one prompt of the baseline, so that a budget too small for a verdict is refused before
anything else is measured.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from autotune.engines import choose_engine
from autotune.measure.prompts import PromptMix
from autotune.models.hub import HubFile
from autotune.race.race import RaceBudget
from autotune.search.inputs import RaceOptions, SearchInputs, SearchOptions
from autotune.search.plan._budget import SearchBudget, finalists_within, fit_budget, race_budget_left, search_budget
from autotune.search.plan._pace import measure_pace, search_workload
from autotune.search.plan._phases import Pace, PlannedPhase, Shape, Workload, plan_phases
from autotune.spec.space import SearchSpace


@dataclass(frozen=True)
class SearchPlan:
    """What a predicted search measures and races (module docstring); `pace` is None until it is priced."""

    work: Workload
    arbiter: str
    pace: Pace | None = None
    pace_line: str = ""  # how the pace was found
    budget: SearchBudget | None = None  # the search's cap (None: none)

    @property
    def predicted(self) -> Shape:
        """The prediction's prompts and tokens a prompt: the race's, or fewer where the budget asked."""
        return self.work.predicted

    @property
    def raced(self) -> Shape:
        """The race's prompts and tokens a prompt: the user's mix and --max-tokens, whatever the budget."""
        return self.work.raced

    @property
    def race_budget(self) -> RaceBudget:
        return self.work.race_budget

    @property
    def race_top(self) -> int:
        return self.work.race_top

    def predicted_mix(self, mix: PromptMix) -> PromptMix:
        """The prompts of `mix` the prediction runs on: all of them, or one a category where it is shorter."""
        return mix.take(per_category=1) if self.predicted.prompts < len(mix) else mix

    def phases(self) -> list[PlannedPhase]:
        return plan_phases(self.work, self.pace)

    def priced(self, inputs: SearchInputs, space: SearchSpace, replayed: int, pace: Pace) -> "SearchPlan":
        """This plan over what the prediction measures (`inputs`: its prompts; `space`: the types the engine runs,
        `replayed` configurations at most) at the measured `pace`: the shapes, the race's finalists, its budget
        and its round after the decision stay the plan's."""
        asked = RaceOptions(top=self.race_top, budget=self.race_budget)
        work = search_workload(inputs, space, asked, self.arbiter, self.predicted.tokens, replayed)
        kept = replace(
            work,
            prompts=self.work.prompts,
            max_tokens=self.work.max_tokens,
            replicate_per_category=self.work.replicate_per_category,
        )
        return replace(self, work=kept.predicting(Shape(len(inputs.mix), self.predicted.tokens)), pace=pace)

    def racing_within(self, left_s: float) -> tuple["SearchPlan", int]:
        """This plan with the race's budget and finalists for the `left_s` seconds the phases before it left of the
        search's budget, and the finalists it asked for (autotune.search.plan.race_budget_left, finalists_within)."""
        left = race_budget_left(self.work, self.pace, left_s, cap=self.budget.race_cap)
        top = finalists_within(self.work, self.pace, left)
        return replace(self, work=replace(self.work, race_budget=left, race_top=top)), self.work.race_top


def make_plan(
    options: SearchOptions,
    inputs: SearchInputs,
    race_options: RaceOptions,
    budget: SearchBudget | None,
    *,
    server_bin: str | None,
    replayed: int,
    note: Callable[[str], None],
    priced: bool = False,
    assume_tok_s: float | None = None,
    missing: list[HubFile] = (),
    sizes: dict[str, int] | None = None,
) -> SearchPlan:
    """The plan of a predicted search of `inputs` (and of the hub files still `missing`, `sizes` their bytes):
    `budget` is --budget's (None: the space's default, autotune.search.plan.search_budget), `replayed` the
    configurations the replay predicts at most. Priced where it is capped or `priced` asks, by one prompt of the
    baseline (or `assume_tok_s`, or the space's stated pace), and then fitted to its budget; UsageError where a
    given budget is too small for a verdict."""
    arbiter = choose_engine(None, server_bin=server_bin)
    work = search_workload(
        inputs, inputs.space, race_options, arbiter, options.settings.max_tokens, replayed, missing=missing, sizes=sizes
    )
    capped = search_budget(budget, inputs.space, len(work.targets))
    if capped is None and not priced:
        return SearchPlan(work, arbiter)
    pace, how = measure_pace(options, inputs, arbiter, server_bin, assume_tok_s, note)
    if capped is not None:
        work, capped = fit_budget(work, pace, capped)
    return SearchPlan(work, arbiter, pace, how, capped)
