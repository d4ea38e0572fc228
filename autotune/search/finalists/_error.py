"""How far off a predicted speedup is, per family: the error the finalists are chosen under
(autotune.search.finalist_cover) and the band `autotune trials` prints beside each prediction.

A prediction's error is read in logs, log(predicted / raced): normal with a standard deviation per
family, because each family's cost is fitted to its own reference (autotune.search.calibration) and
misses in its own way. Where it comes from:
- a prior per family (`PRIOR_ERROR_SD`): the worst errors seen on llama-server (issues 22 and 25,
  examples/benchmarks/predictor.py: n-gram types up to 15 %, draft-simple up to 32 %) read as about 1.5 sd;
  block drafts, with no llama-server figure yet, take the draft model's;
- the finalists this key's earlier runs raced (`past_errors`): each one's predicted speedup against what
  the race measured after it was predicted, out of sample. The prior counts as `PRIOR_WEIGHT` of these, so
  a run or two moves it and many replace it;
- never below the calibration's own in-sample error (what its references missed by after the fit): out
  of sample it can only be worse.
"""

from __future__ import annotations

import math

import optuna

from autotune.spec.types import BLOCK_FAMILY, DRAFT_MODEL_FAMILY, NGRAM_FAMILY
from autotune.study.records import TrialRecord
from autotune.study.runs import base_name, runs_of
from autotune.study.verdict import RaceVerdict

#: the error sd of log(predicted / raced) a family has before any run of this key has raced (module docstring)
PRIOR_ERROR_SD = {NGRAM_FAMILY: 0.10, DRAFT_MODEL_FAMILY: 0.20, BLOCK_FAMILY: 0.20}
#: how many raced finalists the prior counts as
PRIOR_WEIGHT = 4
#: the earlier runs read (the newest raced ones): older ones measured another build or calibration
PAST_RUNS = 5
#: the band `trials` prints holds the raced speedup with this probability, two-sided, under the family's sd
BAND_LEVEL = 0.90
_BAND_Z = 1.6449  # the normal quantile of (1 + BAND_LEVEL) / 2


def family_error_sds(study: optuna.Study) -> dict[str, float]:
    """Each family's error sd (module docstring) for a new run of `study`'s key: the prior shrunk toward
    the root mean square of the earlier runs' raced errors."""
    past = past_errors(study)
    sds = {}
    for family, prior in PRIOR_ERROR_SD.items():
        errors = past.get(family, [])
        sds[family] = math.sqrt((PRIOR_WEIGHT * prior**2 + sum(e * e for e in errors)) / (PRIOR_WEIGHT + len(errors)))
    return sds


def floored(error_sd: float, calibration_error: float | None) -> float:
    """`error_sd`, or the calibration's in-sample error where larger (a relative error, as
    autotune.predict.predictor.Calibration keeps it: out of sample the prediction can only do worse)."""
    return round(max(error_sd, math.log1p(calibration_error or 0.0)), 4)


def past_errors(study: optuna.Study, runs: int = PAST_RUNS) -> dict[str, list[float]]:
    """log(predicted / raced) of every finalist the newest `runs` earlier raced runs of `study`'s key
    measured, by family (a finalist that failed or measured nothing is no error of the prediction's)."""
    storage = study._storage
    earlier = [r for r in runs_of(storage, base_name(study.study_name)) if r.raced and r.name != study.study_name]
    errors: dict[str, list[float]] = {}
    for run in earlier[-runs:]:
        study_id = storage.get_study_id_from_name(run.name)
        data = storage.get_study_user_attrs(study_id).get("confirmation") or {}
        if "baselines" not in data:  # a measured study's confirm, or a record from before races
            continue
        for row in RaceVerdict.from_dict(data).configs:
            if row.trial is None or row.failure is not None or not row.speedup or row.family is None:
                continue
            trial = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, row.trial))
            predicted = TrialRecord.of(trial).predicted.get("speedup")
            if predicted:
                errors.setdefault(row.family, []).append(math.log(predicted / row.speedup))
    return errors


def band(speedup: float, error_sd: float) -> list[float]:
    """The speedup's `BAND_LEVEL` band under its family's error sd: [low, high]."""
    return [round(speedup * math.exp(-_BAND_Z * error_sd), 4), round(speedup * math.exp(_BAND_Z * error_sd), 4)]
