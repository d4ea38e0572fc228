"""The predicted pipeline (the default strategy at temperature 0 with one stream): each target's baseline and
trajectory, the step costs, draft chains and blocks (`_targets`), every configuration replayed (`_space`), the
calibration's references (`_calibration`), the finalists by their chance of being the fastest
(`_finalist_cover`, `_prediction_error`), then the race (`run_predicted_search`, `predict_and_race`); and
`search --plan` (`plan_search`).

It may import every other room of search/: inputs, plan, fleet, and measured (a search it cannot predict is
measured instead, and the references are the measured study's).
"""

from autotune.search.predicted._calibration import calibrate
from autotune.search.predicted._pipeline import (
    PREDICT_TRIALS,
    cannot_predict,
    measured_only_refused,
    predict_and_race,
    run_predicted_search,
)
from autotune.search.predicted._plan_command import plan_search
from autotune.search.predicted._space import Replayed, replays_at_most

__all__ = [
    "PREDICT_TRIALS",
    "Replayed",
    "calibrate",
    "cannot_predict",
    "measured_only_refused",
    "plan_search",
    "predict_and_race",
    "replays_at_most",
    "run_predicted_search",
]
