"""The predicted study's DFlash and DSpark drafts: which blocks a search space needs recorded, recording
them for one (target, draft) pair along the target's trajectories, and replaying a configuration from
them (linear cuts, or PCTree trees).

Every `draft_n_max` the space allows is its own block size, and a block is decoded non-causally (see
autotune.predict.blocks): a block of n rows need not be the largest block cut to n. It nearly always is
(examples/benchmarks/block_replay.py: 99.3-100 % of the positions on the fixtures), so a draft is
recorded once, at its largest size, and each smaller size is checked at a sample of `CHECK_POSITIONS`
positions: where its chains agree with the cut largest block's at `AGREEMENT` of them or more it is
derived from that block, else recorded on its own. The target's layer inputs are decoded once for all. PCTree reads 256 candidates per block row (2 KiB): over a long mix and many sizes that is
gigabytes, so candidates are kept for the smallest sizes that fit `CANDIDATE_BUDGET` (the most sizes)
and the trees of the larger ones are said not predicted (a TrialFailure the predicted study skips).

A draft's quant changes mostly its cost, not what it drafts (llama.cpp #27383): a second quant of a draft
already recorded (`other_quant`: the same header but for its file type) takes the first one's blocks where
its own largest block, at the same sample of CHECK_POSITIONS positions, agrees with them at AGREEMENT or
more (`BlockDraft.shared`); its cost is always its own step curve. Where it does not agree, it is
recorded on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.engines.dflash.contexts import DFlashPair
from autotune.engines.dflash.pctree import MarkovHead
from autotune.errors import TrialFailure
from autotune.gguf.info import GGUFInfo
from autotune.predict.block_sample import SAMPLE_POSITIONS, sample_fraction
from autotune.predict.blocks import DraftBlocks, replay_linear, replay_tree
from autotune.predict.replay import Replay
from autotune.predict.trajectory import Trajectories
from autotune.spec.config import SpecConfig
from autotune.spec.space import ParamRange, SearchSpace
from autotune.spec.types import SPEC_TYPE_PARAMS

#: positions each smaller block size is recorded at to check that the largest block, cut, stands for it
CHECK_POSITIONS = 256
#: the share of those positions whose chains must agree for the cut to stand for the size
AGREEMENT = 0.99
#: what PCTree candidates may take in memory, all pairs of a target together
CANDIDATE_BUDGET = 2 * 1024**3
_CANDIDATE_ROW_BYTES = 256 * 8  # int32 ids and float32 logits of a row's leading 256 tokens


def param_values(space: SearchSpace, spec_type: str, name: str) -> list:
    """Every value the space lets `name` take under `spec_type` (its default where the space does not range it)."""
    for r in space.spec_types.get(spec_type, ()):
        if r.param.name == name:
            return _range_values(r)
    return [SPEC_TYPE_PARAMS[spec_type][name].default]


def _range_values(r: ParamRange) -> list:
    if r.choices:
        return list(r.choices)
    if r.param.kind is bool:
        return sorted({bool(r.low), bool(r.high)})
    step = int(r.step or 1)
    return list(range(int(r.low), int(r.high) + 1, step))


@dataclass(frozen=True)
class BlockPlan:
    """What to record of one DFlash/DSpark type: the n_max values, and whether PCTree is searched."""

    spec_type: str
    n_maxes: tuple[int, ...]
    pctree: bool
    p_min: bool  # some configuration cuts at a p_min (DSpark reads its confidence head then)
    tree_k: int = 0  # PCTree's largest k and n in the space (the trees its verify cost is measured on)
    tree_n: int = 0

    @classmethod
    def of(cls, space: SearchSpace, spec_type: str) -> "BlockPlan":
        pctree = spec_type == "draft-dspark" and True in param_values(space, spec_type, "dspark_pctree")
        return cls(
            spec_type,
            tuple(param_values(space, spec_type, "draft_n_max")),
            pctree,
            any(float(p) > 0 for p in param_values(space, spec_type, "draft_p_min")),
            max(param_values(space, spec_type, "dspark_pctree_k")) if pctree else 0,
            max(param_values(space, spec_type, "dspark_pctree_n")) if pctree else 0,
        )


@dataclass
class BlockDraft:
    """One DFlash/DSpark draft's recorded blocks along one target's trajectories, per (clamped) n_max."""

    spec_type: str
    by_n_max: dict[int, DraftBlocks]
    limit: int
    markov: MarkovHead | None  # DSpark's Markov head, for PCTree
    has_confidence_head: bool
    #: the sizes derived from the largest block: n_max -> (the agreement checked, positions compared)
    derived: dict[int, tuple[float, int]] = field(default_factory=dict)
    #: where these blocks are another quant's: (that draft's file name, the agreement checked, positions compared)
    shared_from: tuple[str, float, int] | None = None
    draft_decodes_own: int | None = None  # what this draft decoded itself, where it shares another's blocks

    @classmethod
    def record(
        cls,
        pair: DFlashPair,
        plan: BlockPlan,
        trajectories: Trajectories,
        *,
        budget: int = CANDIDATE_BUDGET,
        sample_positions: int | None = SAMPLE_POSITIONS,
    ) -> tuple["BlockDraft", str | None]:
        """Record `plan`'s blocks with `pair` at about `sample_positions` positions per block size (all of
        them where the mix has fewer: autotune.predict.block_sample); with a note where PCTree candidates
        did not fit `budget`."""
        limit = pair.n_draft_max(plan.spec_type)
        sizes = sorted({min(n, limit) for n in plan.n_maxes})
        fraction = sample_fraction(trajectories, sample_positions)
        kept, note, used = [], None, 0
        if plan.pctree and pair.has_markov_head:
            positions = round(sum(len(t.tokens) for t in trajectories.prompts) * fraction)
            for n in sizes:  # the smallest first: the most sizes within the budget
                cost = positions * n * _CANDIDATE_ROW_BYTES
                if used + cost > budget:
                    note = (
                        f"PCTree with draft_n_max {n}..{max(sizes)} is not predicted: its candidates would take "
                        f"more than {budget / 1024**3:.0f} GiB over {positions} positions "
                        "(fewer prompts or --max-tokens, or --strategy measure)"
                    )
                    break
                kept.append(n)
                used += cost
        dspark = plan.spec_type == "draft-dspark"  # its p_min reads the confidence head, refused without one

        def recorded(n_maxes: list[int]) -> dict[int, DraftBlocks]:
            return DraftBlocks.record(
                pair,
                trajectories,
                spec_type=plan.spec_type,
                n_maxes=n_maxes,
                p_min=plan.p_min and (pair.has_confidence_head or not dspark),
                confidence=dspark,
                candidates=[n for n in kept if n in n_maxes],
                fraction=fraction,
            )

        blocks = recorded(sizes[-1:])
        derived = _derived(
            pair,
            plan.spec_type,
            trajectories,
            blocks[sizes[-1]],
            [n for n in sizes[:-1] if n not in kept or sizes[-1] in kept],
        )
        blocks.update({n: cut for n, (cut, _) in derived.items()})
        blocks.update(recorded([n for n in sizes if n not in blocks]) if len(blocks) < len(sizes) else {})
        markov = pair.markov() if plan.pctree and pair.has_markov_head else None
        return cls(
            plan.spec_type,
            dict(sorted(blocks.items())),
            limit,
            markov,
            pair.has_confidence_head,
            {n: agreement for n, (_, agreement) in derived.items()},
        ), note

    @classmethod
    def shared(
        cls, pair: DFlashPair, plan: BlockPlan, trajectories: Trajectories, source: "BlockDraft", source_name: str
    ) -> "BlockDraft | None":
        """`source`'s blocks (another quant of this draft, recorded along the same trajectories) for `pair`,
        where its own largest block agrees with them at a sample of the positions (module docstring); None
        where it does not, or it drafts another block size."""
        if pair.n_draft_max(plan.spec_type) != source.limit:
            return None
        largest = max(source.by_n_max)
        dspark = plan.spec_type == "draft-dspark"
        positions = sum(len(t.tokens) for t in trajectories.prompts)
        check = DraftBlocks.record(
            pair,
            trajectories,
            spec_type=plan.spec_type,
            n_maxes=[largest],
            seed=1,
            fraction=min(1.0, CHECK_POSITIONS / max(positions, 1)),
        )[largest]
        share, compared = source.by_n_max[largest].agreement(check)
        if share < AGREEMENT or (dspark and pair.has_confidence_head != source.has_confidence_head):
            return None
        markov = pair.markov() if source.markov is not None and pair.has_markov_head else None
        return cls(
            plan.spec_type,
            dict(source.by_n_max),
            source.limit,
            markov,
            pair.has_confidence_head,
            dict(source.derived),
            (source_name, share, compared),
            check.draft_decodes,
        )

    @property
    def draft_decodes(self) -> int:
        if self.draft_decodes_own is not None:
            return self.draft_decodes_own
        return sum(b.draft_decodes for b in self.by_n_max.values())

    @property
    def fraction(self) -> float:
        """Of the trajectories' positions recorded (1: every one)."""
        return min((b.fraction for b in self.by_n_max.values()), default=1.0)

    @property
    def replays_trees(self) -> bool:
        """Whether PCTree configurations can be replayed: a Markov head, and candidates kept for some size."""
        return self.markov is not None and any(blocks.has_candidates for blocks in self.by_n_max.values())

    def blocks_for(self, config: SpecConfig) -> DraftBlocks:
        blocks = self.by_n_max.get(min(int(config.value("draft_n_max")), self.limit))
        if blocks is None:
            raise TrialFailure(f"{config.describe()}: its block size was not recorded")
        return blocks

    def replay(self, config: SpecConfig, trajectories: Trajectories) -> Replay:
        """`config`'s replay (what the in-process engine would count); TrialFailure where the engine refuses
        it or what it needs was not recorded."""
        blocks = self.blocks_for(config)
        dspark = config.spec_type == "draft-dspark"
        if dspark and float(config.value("draft_p_min")) > 0 and not self.has_confidence_head:
            raise TrialFailure(f"{config.describe()}: DSpark draft has no confidence head: draft_p_min must be 0")
        if dspark and config.value("dspark_pctree"):
            if self.markov is None:
                raise TrialFailure(f"{config.describe()}: PCTree needs a DSpark draft (a Markov head)")
            if not blocks.has_candidates:
                raise TrialFailure(f"{config.describe()}: PCTree candidates of this block size were not kept")
            return replay_tree(blocks, config, self.markov, trajectories)
        return replay_linear(blocks, config, trajectories)


def other_quant(a: GGUFInfo, b: GGUFInfo) -> bool:
    """Whether `a` and `b` are one draft in two quants: every header fact alike but the file type."""
    return a.quant != b.quant and all(
        getattr(a, f) == getattr(b, f)
        for f in (
            "architecture",
            "n_embd",
            "n_layers",
            "n_vocab",
            "token_text_hashes",
            "target_layers",
            "block_size",
            "has_markov_head",
        )
    )


def _derived(
    pair: DFlashPair, spec_type: str, trajectories: Trajectories, largest: DraftBlocks, smaller: list[int]
) -> dict[int, tuple[DraftBlocks, tuple[float, int]]]:
    """The sizes of `smaller` whose blocks at a sample of the positions agree with `largest` cut to them (module
    docstring), each as that cut with its (agreement, positions compared); its check's decodes are its cost."""
    if not smaller:
        return {}
    positions = sum(len(t.tokens) for t in trajectories.prompts)
    checks = DraftBlocks.record(
        pair,
        trajectories,
        spec_type=spec_type,
        n_maxes=smaller,
        fraction=min(1.0, CHECK_POSITIONS / max(positions, 1)),
        seed=1,
    )
    found = {}
    for n, check in checks.items():
        share, compared = largest.head(n).agreement(check)
        if share >= AGREEMENT:
            cut = largest.head(n)
            cut.draft_decodes = check.draft_decodes
            found[n] = (cut, (share, compared))
    return found
