"""What a predicted search measured of each target before it was stopped, kept until its answer is stored,
so that the same search run again resumes instead of measuring it all again.

A target's baseline on the arbiter and its model (trajectories, step costs, draft chains, DFlash/DSpark
blocks: autotune.predict.target.TargetModel, the worker's own result) are written to the user data
directory as soon as they are measured, under a key of everything that shaped them: the target's and
its drafts' contents, the search space, the prompts, the length, the sampling, the runtime and the
llama.cpp build. A search whose key matches takes them and says so; one whose answer is stored deletes
its files, so only an unfinished search resumes. The files are pickles of autotune's own dataclasses,
written and read by autotune alone in the user's own directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path

from autotune.measure.measurement import Measurement
from autotune.measure.prompts import PromptMix
from autotune.models.files import file_sha256
from autotune.predict.target import TargetModel
from autotune.search.inputs import SearchInputs, SearchSettings
from autotune.search.predicted._answered import space_digest
from autotune.settings import home_dir

FOLDER = "unfinished"


def resume_key(inputs: SearchInputs, settings: SearchSettings, target: Path, build: str) -> str:
    """The key of what a search of `inputs` measures of `target` (module docstring)."""
    drafts = sorted(
        {
            str(file_sha256(draft))
            for pairs in inputs.candidates.pairs.values()
            for owner, draft in pairs
            if owner == target
        }
    )
    shaped_by = {
        "target": file_sha256(target),
        "drafts": drafts,
        "space": space_digest(inputs.space),
        "prompts": _prompts(inputs.mix),
        "max_tokens": settings.max_tokens,
        "sampling": settings.sampling.as_dict(),
        "threads": settings.threads,
        "build": build,
    }
    return hashlib.sha256(json.dumps(shaped_by, sort_keys=True).encode()).hexdigest()[:24]


def load(key: str) -> tuple[Measurement, TargetModel | None] | None:
    """The baseline (and the model, once measured) an unfinished search kept under `key`; None: nothing, or
    a file this version cannot read (it is measured again)."""
    path = _path(key)
    try:
        with path.open("rb") as file:
            return pickle.load(file)
    except FileNotFoundError:
        return None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        path.unlink(missing_ok=True)
        return None


def keep(key: str, baseline: Measurement, model: TargetModel | None = None) -> None:
    """Keep `baseline` (and `model`) under `key`, atomically: a stop mid-write leaves the last whole file."""
    path = _path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    with partial.open("wb") as file:
        pickle.dump((baseline, model), file, protocol=pickle.HIGHEST_PROTOCOL)
    partial.replace(path)


def forget(keys) -> None:
    """The answer is stored: nothing under `keys` resumes any more."""
    for key in keys:
        _path(key).unlink(missing_ok=True)


def _path(key: str) -> Path:
    return home_dir() / FOLDER / f"{key}.pickle"


def _prompts(mix: PromptMix) -> list[list[str]]:
    return [[p.id, p.text] for p in mix]
