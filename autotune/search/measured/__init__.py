"""The measured strategy (`--strategy measure`): an Optuna study of measured trials (`Tuner`, `run_study`), the
references it measures beside them (the baseline and `--spec-default`), then the race of its top trials
(`run_search`).

It may import `autotune.search.inputs` and `autotune.search.fleet`; the predicted pipeline imports it (for a
search it cannot predict, and for the references).
"""

from autotune.search.measured._references import measures_spec_default, requeue_stale_trial
from autotune.search.measured._strategy import run_search, run_study
from autotune.search.measured._suggest import suggest_config
from autotune.search.measured._tuner import Tuner

__all__ = ["Tuner", "measures_spec_default", "requeue_stale_trial", "run_search", "run_study", "suggest_config"]
