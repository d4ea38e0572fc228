"""The plan: what a predicted search will measure and how long each phase takes on this machine (`Workload`,
`Pace`, `plan_phases`), the budget it runs within and how the phases are sized to it (`SearchBudget`,
`fit_budget`), and this machine's measured prices (`Prices`).

It may import `autotune.search.inputs`; the predicted pipeline imports it, never the other way.
"""

from autotune.search.plan._budget import (
    SearchBudget,
    budget_line,
    finalists_within,
    fit_budget,
    race_budget_left,
    search_budget,
)
from autotune.search.plan._pace import draft_step_floor_s, search_workload
from autotune.search.plan._phases import (
    MAX_FIT_PROMPTS,
    Pace,
    Shape,
    Workload,
    eta_line,
    files_by_role,
    plan_line,
    plan_phases,
)
from autotune.search.plan._plan import SearchPlan, make_plan
from autotune.search.plan._prices import Prices, load_prices, prices_path, write_prices

__all__ = [
    "MAX_FIT_PROMPTS",
    "Pace",
    "Prices",
    "SearchBudget",
    "SearchPlan",
    "make_plan",
    "search_workload",
    "Shape",
    "Workload",
    "budget_line",
    "draft_step_floor_s",
    "eta_line",
    "files_by_role",
    "finalists_within",
    "fit_budget",
    "load_prices",
    "plan_line",
    "plan_phases",
    "prices_path",
    "race_budget_left",
    "search_budget",
    "write_prices",
]
