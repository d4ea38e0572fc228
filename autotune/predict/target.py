"""Everything the prediction knows of one target, measured in-process: the trajectories (with where the
in-process output parts from the arbiter's), the step costs of the target and its drafts, the drafts'
greedy chains, and the calibration to the arbiter's reference measurements."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from autotune.engines.drafters.build import build_drafter
from autotune.engines.python import PythonEngine
from autotune.measure.measurement import Measurement
from autotune.measure.prompts import PromptMix
from autotune.predict.chains import DraftChains
from autotune.predict.cost import CostModel, fill_tokens, measure_curve, measure_sampler
from autotune.predict.predictor import Calibration, Prediction, fit_calibration, predict
from autotune.predict.replay import replay
from autotune.predict.trajectory import Trajectories
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config

#: the largest verify batch the cost curves measure (a longer draft is charged as this)
MAX_BATCH = 65


@dataclass
class TargetModel:
    """What the prediction knows of one target: its trajectories, costs, references and draft chains."""

    target: SpecConfig
    trajectories: Trajectories
    cost: CostModel
    baseline: Measurement
    spec_default: Measurement | None
    chains: dict[str, DraftChains]
    calibration: Calibration = Calibration()
    baseline_tok_s: float = 0.0

    def prediction(self, config: SpecConfig) -> Prediction:
        draft = config.draft.name if config.draft is not None else None
        drafter = build_drafter(config, lambda: self.chains[draft].drafter(config))
        replayed = replay(drafter, self.trajectories)
        return predict(replayed, self.cost, self.calibration, draft=draft, baseline_tok_s=self.baseline_tok_s)

    def calibrate(self, measured: list[tuple[SpecConfig, list[float]]]) -> Calibration:
        """Fit the calibration to llama-server's per-prompt decode ms of these configurations."""
        runs = []
        for config, decode_ms in measured:
            draft = config.draft.name if config.draft is not None else None
            drafter = build_drafter(config, lambda: self.chains[draft].drafter(config))
            runs.append((replay(drafter, self.trajectories), draft, decode_ms))
        self.calibration = fit_calibration(runs, self.cost)
        self.baseline_tok_s = self.prediction(self.target).tok_s
        return self.calibration


def measure_target(local: PythonEngine, target: Path, baseline: Measurement, spec_default: Measurement | None,
                   mix: PromptMix, *, arbiter: str, max_tokens: int, drafts: list[Path], chain_length: int,
                   note: Callable[[str], None]) -> TargetModel:
    """`target`'s model from the arbiter's reference measurements and what `local` measures of it."""
    local.prepare(SpecConfig(target), mix, max_tokens=max_tokens)
    prompt_tokens = [local.prompt_tokens(target, prompt, max_tokens) for prompt in mix]
    is_eog = local.model(target).is_eog
    trajectories = Trajectories.from_measurement(str(target), arbiter, baseline, prompt_tokens, max_tokens, is_eog)
    if arbiter != "python":
        own = local.measure(SpecConfig(target), mix, max_tokens=max_tokens)
        trajectories = trajectories.with_divergence(
            Trajectories.from_measurement(str(target), "python", own, prompt_tokens, max_tokens, is_eog))
        parted = sum(d is not None for d in trajectories.divergence)
        if parted:
            note(f"the in-process greedy output parts from llama-server's on {parted} of {len(prompt_tokens)} "
                 "prompts: the replay follows llama-server's")
    note(f"measuring the step costs of {target.name} in-process")
    lengths = sorted(len(t) for t in prompt_tokens)
    depths = [lengths[len(lengths) // 2], lengths[len(lengths) // 2] + max_tokens]
    largest = max(2, min(MAX_BATCH, max_tokens))
    fill = fill_tokens([list(t.prompt_tokens) + list(t.tokens) for t in trajectories.prompts], depths[-1] + largest)
    context = local.context("target", target)
    curve = measure_curve(context, fill, depths=depths, max_size=largest)
    sampler_ms = measure_sampler(context, local.sampler("target", target), fill[0])
    draft_curves, draft_samplers, chains = {}, {}, {}
    for draft in drafts:
        local.load(SpecConfig(target, "draft-simple", draft))
        draft_context, draft_sampler = local.context("draft", draft), local.sampler("draft", draft)
        draft_curves[draft.name] = measure_curve(draft_context, fill, depths=depths, max_size=largest)
        draft_samplers[draft.name] = measure_sampler(draft_context, draft_sampler, fill[0])
        chains[draft.name] = DraftChains.record(draft_context, draft_sampler, trajectories, chain_length)
        note(f"recorded {draft.name}'s greedy chains along the trajectories ({chains[draft.name].draft_decodes} "
             "draft decodes)")
    found = TargetModel(SpecConfig(target), trajectories, CostModel(curve, sampler_ms, draft_curves, draft_samplers),
                        baseline, spec_default, chains)
    measured = [(SpecConfig(target), [r.decode_ms for r in baseline.results])]
    if spec_default is not None:
        measured.append((spec_default_config(target), [r.decode_ms for r in spec_default.results]))
    calibration = found.calibrate(measured)
    note(f"cost model of {target.name}: spread {curve.spread:.0%} over repeats; calibrated to the {arbiter} engine: "
         f"{calibration.error or 0:.1%} error on its references")
    return found
