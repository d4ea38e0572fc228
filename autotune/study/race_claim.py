"""One race per study, however many workers share it: the first worker to finish its trials claims the
race in the storage, and the others leave it to that one.

Optuna's storage offers no compare-and-set, so the claim is one: read the study's `race_claim`; where a
live claim stands (its worker still runs, or it was made less than CLAIM_HOLDS_S ago on another host, or
its race is done), leave it; else write ours, wait SETTLE_S, and read again: of two workers that wrote
at nearly the same time, both read the later write, so exactly one goes on. (That holds while a worker's
read and write lie closer together than SETTLE_S, as one storage round trip each does.)
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone

import optuna

from autotune.engines.orphans import is_gone, this_process
from autotune.study.records import StudyRecord, store_study

SETTLE_S = 2.0
#: how long a claim made on another host holds while its race is not done (its worker may have died)
CLAIM_HOLDS_S = 6 * 3600


def claim_race(study: optuna.Study, *, settle_s: float = SETTLE_S) -> str | None:
    """Claim the study's race; None when this process holds it, else who does, in words."""
    standing = _live_claim(study)
    if standing is not None:
        return standing
    token = uuid.uuid4().hex
    store_study(study, race_claim={"token": token, "owner": this_process(), "done": False,
                                   "claimed": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    time.sleep(settle_s)
    now = _reloaded(study).race_claim or {}
    return None if now.get("token") == token else _holder(now)


def race_done(study: optuna.Study) -> None:
    """Mark the claimed race finished: later workers of the study leave it alone."""
    claim = dict(StudyRecord.of(study).race_claim or {})
    store_study(study, race_claim={**claim, "done": True})


def _live_claim(study: optuna.Study) -> str | None:
    claim = _reloaded(study).race_claim
    if not claim:
        return None
    if claim.get("done"):
        return _holder(claim) + " (done)"
    if is_gone(claim.get("owner", {})):
        return None
    claimed = datetime.fromisoformat(claim.get("claimed", "1970-01-01T00:00:00+00:00"))
    return _holder(claim) if datetime.now(timezone.utc) - claimed < timedelta(seconds=CLAIM_HOLDS_S) else None


def _holder(claim: dict) -> str:
    owner = claim.get("owner", {})
    return f"the worker on {owner.get('host', '?')} (pid {owner.get('pid', '?')})"


def _reloaded(study: optuna.Study) -> StudyRecord:
    """The study's record as the storage has it now (another worker may have written since)."""
    return StudyRecord.of(optuna.load_study(study_name=study.study_name, storage=study._storage))
