"""A search that waited on its key's lease answers from the run that just finished, where that run measured
what this one would: a user who started the same search twice, or a cron job that overlapped a manual
run, gets the answer at once instead of measuring it again (`--again` measures anew).

"The same" is the run's own record against this search's inputs: the files (with their hub commits), the
search space, the prompts, the tokens a prompt, the sampling; "just finished" is a race stored after this
search began to wait.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import optuna

from autotune.hardware import hardware_key
from autotune.search.inputs import SearchInputs, SearchSettings
from autotune.spec.space import SearchSpace
from autotune.study.catalog import study_name
from autotune.study.records import PREDICTED_ENGINE, StudyRecord
from autotune.study.runs import newest_answer
from autotune.study.verdict import STOPPED


def space_digest(space: SearchSpace) -> str:
    """What a run stores of its search space: a digest of everything parsed from it but its path."""
    return hashlib.sha256(repr(replace(space, path=Path())).encode()).hexdigest()[:16]


def finished_since(
    storage: optuna.storages.BaseStorage, inputs: SearchInputs, settings: SearchSettings, since: datetime
) -> optuna.Study | None:
    """The predicted run of this key whose race was stored after `since` and that measured `inputs` as
    `settings` would (module docstring); None where there is none."""
    name = newest_answer(storage, study_name(settings.model, hardware_key(), PREDICTED_ENGINE))
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
    record = StudyRecord.of(study)
    race = record.confirmation
    if not race or race.get("ended") == STOPPED or datetime.fromisoformat(race["date"]) < since:
        return None
    measured = record.measurement
    same = (
        record.files == inputs.candidates.fingerprint()
        and record.space == space_digest(inputs.space)
        and measured.get("prompts") == [p.id for p in inputs.mix]
        and measured.get("max_tokens") == settings.max_tokens
        and measured.get("sampling") == settings.sampling.as_dict()
    )
    return study if same else None
