"""What a predicted search measures of each target before it predicts: the baseline on the arbiter (its
output the trajectory), then in the worker process the target's model (autotune.predict.target). Each
is kept as soon as it is measured (autotune.search.resume), so a search stopped later resumes from it."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from autotune.engines.base import Engine
from autotune.engines.worker import WorkerEngine
from autotune.errors import WorkerDied
from autotune.measure.ledger import Ledger
from autotune.measure.measurement import Measurement
from autotune.predict.block_drafts import BlockPlan
from autotune.predict.chains import chain_length
from autotune.predict.target import TargetModel, measure_target
from autotune.search.inputs import SearchInputs, SearchSettings
from autotune.search.predicted import _resume as resume
from autotune.spec.config import SpecConfig
from autotune.spec.space import SearchSpace
from autotune.spec.types import DFLASH_TYPES, DRAFT_MODEL_TYPES


class MeasuredTargets:
    """The targets of one search: their baselines, then their models, each resumed where an unfinished
    search of the same key kept it."""

    def __init__(self, inputs: SearchInputs, settings: SearchSettings, build: str, note: Callable[[str], None]):
        self.inputs, self.settings, self.note = inputs, settings, note
        self.keys = {t: resume.resume_key(inputs, settings, t, build) for t in inputs.candidates.targets}
        self.kept = {t: resume.load(key) for t, key in self.keys.items()}
        self._baselines: dict[Path, Measurement] = {}

    def baselines(self, engine: Engine, arbiter: str) -> dict[Path, Measurement]:
        """Each target's baseline on `engine` (the arbiter), measured or resumed."""
        for target in self.inputs.candidates.targets:
            kept = self.kept[target]
            if kept is not None:
                self.note(
                    f"resuming {target.name}: its baseline{' and recordings' if kept[1] else ''} from the "
                    "unfinished search of the same files, space, prompts and length"
                )
                self._baselines[target] = kept[0]
                continue
            engine.prepare(SpecConfig(target), self.inputs.mix, max_tokens=self.settings.max_tokens)
            self.note(f"measuring the baseline of {target.name} on the {arbiter} engine: its output is the trajectory")
            self._baselines[target] = engine.measure(
                SpecConfig(target), self.inputs.mix, max_tokens=self.settings.max_tokens
            )
            resume.keep(self.keys[target], self._baselines[target])
        return dict(self._baselines)

    def models(self, space: SearchSpace, arbiter: str, ledger: Ledger) -> dict[Path, TargetModel]:
        """Each target's trajectories, cost curves, draft chains and blocks, measured in the worker (their
        cost added to `ledger`) or resumed."""
        found = {t: kept[1] for t, kept in self.kept.items() if kept is not None and kept[1] is not None}
        missing = [t for t in self._baselines if t not in found]
        if not missing:
            return {t: found[t] for t in self._baselines}
        drafts_of, blocks_of = _drafts(self.inputs, space)
        model = self.inputs.space.model
        with WorkerEngine(
            context_size=model.context_size,
            threads=self.settings.threads,
            base_flags=model.base_flags,
            sampling=self.settings.sampling,
        ) as worker:
            for target in missing:
                found[target] = self._in_worker(
                    worker,
                    measure_target,
                    target,
                    self._baselines[target],
                    self.inputs.mix,
                    arbiter=arbiter,
                    max_tokens=self.settings.max_tokens,
                    drafts=sorted(drafts_of.get(target, ())),
                    chain_length=chain_length(space),
                    block_drafts=blocks_of.get(target, []),
                )
                ledger.add(found[target].ledger)
                resume.keep(self.keys[target], self._baselines[target], found[target])
        return {t: found[t] for t in self._baselines}

    def forget(self) -> None:
        """The search's answer is stored: nothing of it resumes any more."""
        resume.forget(self.keys.values())

    def _in_worker(self, worker: WorkerEngine, function, *args, **kwargs):
        """`function` run in the worker (llama.cpp never runs in this process); a worker that dies is replaced
        and the call retried once, and a second death ends the search with its one-line reason."""
        try:
            return worker.run(function, *args, on_note=self.note, **kwargs)
        except WorkerDied as exc:
            self.note(f"the in-process worker died ({exc}); retrying once in a fresh worker")
        return worker.run(function, *args, on_note=self.note, **kwargs)


def _drafts(inputs: SearchInputs, space: SearchSpace) -> tuple[dict, dict]:
    """Per target, its draft-simple drafts (chains) and its DFlash/DSpark drafts with their block plans."""
    drafts_of: dict = {}
    blocks_of: dict = {}
    for spec_type, pairs in inputs.candidates.pairs.items():
        if spec_type not in space.spec_types:
            continue
        for target, draft in pairs:
            if spec_type in DFLASH_TYPES:
                blocks_of.setdefault(target, []).append((BlockPlan.of(space, spec_type), draft))
            elif spec_type in DRAFT_MODEL_TYPES:
                drafts_of.setdefault(target, set()).add(draft)
    return drafts_of, blocks_of
