"""Everything the prediction knows of one target, measured in-process: the trajectories (with where the
in-process output parts from the arbiter's), the step costs of the target and its drafts, the draft
models' greedy chains and the DFlash/DSpark drafts' blocks, and the calibration to the arbiter's
measurements: at first the baseline's alone, then the references of every family (autotune.search.predicted).
`measure_target` is what the worker process runs (llama.cpp never runs in the search's own process)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from autotune.engines.drafters.build import build_drafter
from autotune.engines.python import PythonEngine
from autotune.gguf.info import read_gguf_info
from autotune.measure.ledger import Ledger, charge
from autotune.measure.measurement import Measurement
from autotune.measure.prompts import PromptMix
from autotune.predict.block_cost import measure_block_costs
from autotune.predict.block_drafts import BlockDraft, BlockPlan, other_quant
from autotune.predict.chains import DraftChains
from autotune.predict.cost import CostModel, fill_tokens, measure_curve, measure_sampler
from autotune.predict.predictor import Calibration, DraftCharge, Prediction, fit_calibration, predict
from autotune.predict.replay import Replay, replay
from autotune.predict.trajectory import Trajectories, Trajectory
from autotune.spec.config import SpecConfig
from autotune.spec.types import DFLASH_TYPES

#: the largest verify batch the cost curves measure (a longer draft is charged as this)
MAX_BATCH = 65
#: output positions a divergence check decodes at once (its logits: this many rows of the vocabulary)
DIVERGENCE_CHUNK = 64


@dataclass
class TargetModel:
    """What the prediction knows of one target: its trajectories, costs, references, draft-simple chains
    (by draft file name) and DFlash/DSpark blocks (by spec type and draft file name)."""

    target: SpecConfig
    trajectories: Trajectories
    cost: CostModel
    baseline: Measurement
    chains: dict[str, DraftChains]
    block_drafts: dict[tuple[str, str], BlockDraft] = field(default_factory=dict)
    calibration: Calibration = Calibration()
    baseline_tok_s: float = 0.0
    ledger: Ledger = field(default_factory=Ledger)  # what measuring it cost in the worker, per phase

    def replay(self, config: SpecConfig) -> tuple[Replay, DraftCharge]:
        """`config`'s replayed counts and the draft costs its steps pay; TrialFailure where the engine would
        refuse it or what it needs was not recorded."""
        draft = config.draft.name if config.draft is not None else None
        if config.spec_type in DFLASH_TYPES:
            block_draft = self.block_drafts[(config.spec_type, draft)]
            pctree = config.spec_type == "draft-dspark" and bool(config.value("dspark_pctree"))
            return (
                block_draft.replay(config, self.trajectories),
                DraftCharge(draft, block_draft.blocks_for(config).size, pctree),
            )
        drafter = build_drafter(config, lambda: self.chains[draft].drafter(config))
        return replay(drafter, self.trajectories), DraftCharge(draft)

    def prediction(self, config: SpecConfig) -> Prediction:
        return self.predicted(*self.replay(config))

    def predicted(self, replayed: Replay, charge: DraftCharge) -> Prediction:
        """A replayed configuration's prediction under the current calibration."""
        return predict(replayed, self.cost, self.calibration, charge=charge, baseline_tok_s=self.baseline_tok_s)

    def calibrate(self, measured: list[tuple[SpecConfig, list[float]]]) -> Calibration:
        """Fit the calibration to llama-server's per-prompt decode ms of these configurations."""
        self.calibration = fit_calibration(
            [(*self.replay(config), decode_ms) for config, decode_ms in measured], self.cost
        )
        self.baseline_tok_s = self.prediction(self.target).tok_s
        return self.calibration


def measure_target(
    local: PythonEngine,
    target: Path,
    baseline: Measurement,
    mix: PromptMix,
    *,
    arbiter: str,
    max_tokens: int,
    drafts: list[Path],
    chain_length: int,
    block_drafts: list[tuple[BlockPlan, Path]],
    note: Callable[[str], None],
) -> TargetModel:
    """`target`'s model from the arbiter's baseline measurement (its output is the trajectory, its decode
    times the first calibration: no second decode of the mix) and what `local` measures of it; its `ledger`
    has the phases "trajectory" (where the in-process greedy output would part from it), "step costs",
    "chains" and "blocks"."""
    ledger = Ledger()
    with ledger.phase("trajectory"):
        local.prepare(SpecConfig(target), mix, max_tokens=max_tokens)
        prompt_tokens = [local.prompt_tokens(target, prompt, max_tokens) for prompt in mix]
        is_eog = local.model(target).is_eog
        trajectories = Trajectories.from_measurement(str(target), arbiter, baseline, prompt_tokens, max_tokens, is_eog)
        if arbiter != "python":
            context = local.context("target", target)
            trajectories = replace(
                trajectories,
                divergence=tuple(greedy_divergence(context, t, is_eog, max_tokens) for t in trajectories.prompts),
            )
            parted = sum(d is not None for d in trajectories.divergence)
            if parted:
                note(
                    f"the in-process greedy output parts from llama-server's on {parted} of {len(prompt_tokens)} "
                    "prompts: the replay follows llama-server's"
                )
    note(f"measuring the step costs of {target.name} in-process")
    lengths = sorted(len(t) for t in prompt_tokens)
    depths = [lengths[len(lengths) // 2], lengths[len(lengths) // 2] + max_tokens]
    largest = max(2, min(MAX_BATCH, max_tokens))
    fill = fill_tokens([list(t.prompt_tokens) + list(t.tokens) for t in trajectories.prompts], depths[-1] + MAX_BATCH)
    with ledger.phase("step costs"):
        context = local.context("target", target)
        cost = CostModel(
            measure_curve(context, fill, depths=depths, max_size=largest),
            measure_sampler(context, local.sampler("target", target), fill[0]),
        )
    chains = {}
    for draft in drafts:
        with ledger.phase("step costs"):
            local.load(SpecConfig(target, "draft-simple", draft))
            draft_context, draft_sampler = local.context("draft", draft), local.sampler("draft", draft)
            cost.drafts[draft.name] = measure_curve(draft_context, fill, depths=depths, max_size=largest)
            cost.draft_sampler_ms[draft.name] = measure_sampler(draft_context, draft_sampler, fill[0])
        with ledger.phase("chains"):
            chains[draft.name] = DraftChains.record(draft_context, draft_sampler, trajectories, chain_length)
            charge(decodes=chains[draft.name].draft_decodes)
        note(
            f"recorded {draft.name}'s greedy chains along the trajectories ({chains[draft.name].draft_decodes} "
            "draft decodes)"
        )
    recorded = {}
    for plan, draft in block_drafts:
        other = next(
            (
                (d, recorded[(plan.spec_type, d.name)])
                for _, d in block_drafts
                if (plan.spec_type, d.name) in recorded
                and recorded[(plan.spec_type, d.name)].shared_from is None
                and other_quant(read_gguf_info(d), read_gguf_info(draft))
            ),
            None,
        )
        recorded[(plan.spec_type, draft.name)] = _record_block_draft(
            local,
            SpecConfig(target, plan.spec_type, draft),
            plan,
            trajectories,
            cost,
            fill,
            depths,
            note,
            ledger,
            other,
        )
    found = TargetModel(SpecConfig(target), trajectories, cost, baseline, chains, recorded, ledger=ledger)
    found.calibrate([(SpecConfig(target), [r.decode_ms for r in baseline.results])])
    note(f"cost model of {target.name}: spread {cost.target.spread:.0%} over repeats")
    return found


def greedy_divergence(context, trajectory: Trajectory, is_eog: Callable[[int], bool], max_tokens: int) -> int | None:
    """Where the in-process target's greedy choice first differs from `trajectory`'s output (None: never),
    from one batched prefill of the prompt and the output: teacher-forced, every choice before the first
    difference follows the trajectory's own tokens, so that is where a greedy decode in-process would part
    from it. A trajectory that stopped early must choose an end-of-generation token there."""
    prompt, tokens = list(trajectory.prompt_tokens), list(trajectory.tokens)
    context.clear()
    choices = [int(context.decode(prompt, 0)[-1].argmax())]
    for start in range(0, len(tokens), DIVERGENCE_CHUNK):
        chunk = tokens[start : start + DIVERGENCE_CHUNK]
        choices += context.decode(chunk, len(prompt) + start, n_outputs=len(chunk)).argmax(axis=1).tolist()
    found = next((i for i, (chosen, token) in enumerate(zip(choices, tokens)) if chosen != token), None)
    if found is None and len(tokens) < max_tokens and not is_eog(choices[len(tokens)]):
        return len(tokens)
    return found


def _record_block_draft(
    local: PythonEngine,
    config: SpecConfig,
    plan: BlockPlan,
    trajectories: Trajectories,
    cost: CostModel,
    fill: list[int],
    depths: list[int],
    note: Callable[[str], None],
    ledger: Ledger,
    other: tuple[Path, BlockDraft] | None,
) -> BlockDraft:
    """A DFlash/DSpark draft's blocks along the trajectories (the ledger's "blocks" phase): `other`'s (another
    quant of it, already recorded) where they agree with its own at a sample, else its own; and (once per
    draft file) its step costs."""
    with ledger.phase("blocks"):
        local.load(config)
        pair = local.dflash_pair(config)
        block_draft = BlockDraft.shared(pair, plan, trajectories, other[1], other[0].name) if other else None
        left_out = None
        if block_draft is None:
            block_draft, left_out = BlockDraft.record(pair, plan, trajectories)
        charge(decodes=block_draft.draft_decodes)
    derived = ""
    if block_draft.derived:
        shares = [share for share, _ in block_draft.derived.values()]
        derived = (
            f"; n_max {', '.join(map(str, block_draft.derived))} cut from n_max {max(block_draft.by_n_max)}'s "
            f"blocks, whose chains agreed with their own at {min(shares):.1%}-{max(shares):.1%} of "
            f"{min(c for _, c in block_draft.derived.values())}+ sampled positions"
        )
    if block_draft.shared_from is not None:
        name, share, compared = block_draft.shared_from
        note(
            f"{config.draft.name}'s {plan.spec_type} blocks are {name}'s (another quant of it): its own largest "
            f"block agreed with them at {share:.1%} of {compared} sampled positions ({block_draft.draft_decodes} "
            "draft decodes); its cost is its own"
        )
    else:
        note(
            f"recorded {config.draft.name}'s {plan.spec_type} blocks along the trajectories "
            f"(n_max {', '.join(map(str, block_draft.by_n_max))}: {block_draft.draft_decodes} draft decodes, "
            f"{block_draft.fraction:.0%} of the positions{derived})"
        )
    if left_out:
        note(left_out)
    name = config.draft.name
    markov = block_draft.markov if block_draft.replays_trees else None
    if name not in cost.blocks or (markov is not None and name not in cost.trees):
        with ledger.phase("step costs"):
            curves = measure_block_costs(
                pair,
                fill,
                spec_type=plan.spec_type,
                depths=depths,
                markov=markov,
                k=plan.tree_k,
                n=plan.tree_n,
                in_process=trajectories.engine == "python",
            )
        for kind, curve in curves.items():
            getattr(cost, kind)[name] = curve
    return block_draft
