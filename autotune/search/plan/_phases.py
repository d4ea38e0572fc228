"""What a predicted search will cost, before it runs: the plan of `autotune search --plan`, the first line
of a real search, and the ETA a search keeps current (issue 40).

The plan counts each phase's work as the search does it (autotune.search.predicted; the ledger of
autotune.measure.ledger counts the same phases once they ran) and prices it at one measured pace:

* the baseline's decode tok/s on the arbiter (one prompt of it for `--plan`; the whole mix in a real
  search) and the seconds a server takes to start and warm up;
* every generation at that pace: the baseline, the in-process trajectory (llama-server as the arbiter),
  the calibration's references and the race's entrants. A speculative entrant is faster than the
  baseline, so its phases are upper bounds, and the race's is the bound its budget sets (it stops
  earlier once decided);
* a recording decode (a draft model's token, a DFlash/DSpark block, a feature injection) or a cost-curve
  batch at one step of the model that runs it: the target's step times the draft's file size over the
  target's. A GPU decodes a batch of a few dozen rows in about the time of one row (it is memory-bound);
  a CPU does not, so on a CPU the in-process phases are lower bounds. Where the pace is stated and this
  machine has prices (autotune.search.prices), a DFlash/DSpark block or injection costs `Pace.block_s`.

Each target runs at its own pace: measured where the search measured its baseline, else the measured
target's pace scaled by the two files' sizes (a decode step reads every weight once), never faster. A
draft's recordings are priced against the target they are recorded for. Every generation also costs its
prompt's processing and first token (`Pace.request_s`, the baseline's mean).

The plan is an upper bound of the search's `cost:` line: the race counts every entrant it starts (each
target's baseline, its control and `--spec-default`, the finalists priced at the slowest target) for
every round of its budget, and the round run on fresh servers after the decision.

A DFlash/DSpark draft records its largest block at every position and each smaller size at a sample
that checks the cut largest block stands for it (autotune.predict.block_drafts), and a second quant of a
draft (the same [drafts.<type>] table, another {quant}) only its largest block at that sample, to check
that it drafts as the first: the plan prices that, the expected case; a size or quant whose check fails
is recorded on its own, past the plan, and the ETA says so.

A file whose size is unknown (not on disk, the hub out of reach) is priced as large as the largest
target, and its DFlash/DSpark block sizes as every n_max the space allows (the file would clamp them).

A search's budget is sized to these phases by autotune.search.budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fnmatch import fnmatch
from pathlib import Path

from autotune.engines.base import WARMUP_TOKENS
from autotune.gguf.info import read_gguf_info
from autotune.measure.ledger import Ledger
from autotune.predict.block_drafts import CHECK_POSITIONS, BlockPlan
from autotune.predict.block_sample import SAMPLE_POSITIONS, WINDOW
from autotune.predict.chains import chain_length
from autotune.predict.cost import REPEATS, grid_sizes
from autotune.predict.target import MAX_BATCH
from autotune.race.race import RaceBudget
from autotune.race.rounds import target_blocks
from autotune.spec.space import SearchSpace
from autotune.spec.types import DFLASH_TYPES, DRAFT_MODEL_TYPES, family_of

#: the most prompts a calibration reference is measured on before its fit is taken as it stands
#: (autotune.search.predicted's calibration stops there)
MAX_FIT_PROMPTS = 8
#: depths each cost curve is measured at (autotune.predict.target.measure_target)
_CURVE_DEPTHS = 2
#: entrants of the round run after the decision: the winner, its baseline and its control
_AFTER_DECISION_ENTRANTS = 3
#: how much slower a divergence check's prefill (64 positions a batch, every row's logits) runs than the
#: server's prompt processing (a batch of up to 512, one row's logits): measured on Gemma 3 270M here
PREFILL_CHUNK_FACTOR = 2.0
#: the replay's time, in seconds: a fixed part (the study, the trajectories' tables) and a predicted
#: configuration's; measured on the demo on 2 cores, with room for a loaded box: 153 configurations in 5-6 s
#: (2025), 1,413 (every grid point, 400 TPE trials at 6.5 ms of TPE's own each) in 16 s quiet, 23 s noisy
REPLAY_FIXED_S = 5.0
REPLAY_S_PER_CONFIGURATION = 0.025


@dataclass(frozen=True)
class PlannedFile:
    """A model file the search uses: its name and size (None: unknown)."""

    name: str
    size_bytes: int | None = None
    block_sizes: int = 0  # a DFlash/DSpark draft: the block sizes recorded
    other_quant: bool = False  # a DFlash/DSpark draft whose blocks are another quant's (checked at a sample)


@dataclass(frozen=True)
class Shape:
    """A run of the mix: its prompts and tokens a prompt."""

    prompts: int
    tokens: int

    @property
    def mix_tokens(self) -> int:
        return self.prompts * self.tokens

    @property
    def run_tokens(self) -> int:
        """The most one run of the mix generates: the mix and the engine's warm-up request before it."""
        return self.mix_tokens + min(WARMUP_TOKENS, self.tokens)

    def run_s(self, pace: "Pace", step_s: float) -> float:
        """One entrant's run of the mix at `step_s` a token."""
        return self.mix_tokens * step_s + self.prompts * pace.request_s

    def describe(self) -> str:
        return f"{self.prompts} prompts x {self.tokens} tokens"


@dataclass(frozen=True)
class Workload:
    """What a predicted search measures: the mix, the targets, their drafts, the race. `prompts` and
    `max_tokens` are the race's (the user's); the prediction runs on as many, or on fewer where a budget
    shortened it (`predict_prompts`, `predict_tokens`: one prompt a category, fewer tokens a prompt)."""

    prompts: int
    max_tokens: int
    targets: tuple[PlannedFile, ...]
    draft_models: tuple[PlannedFile, ...] = ()  # draft-simple (chains)
    block_drafts: tuple[PlannedFile, ...] = ()  # draft-dflash / draft-dspark (blocks)
    families: int = 1  # the calibration's references per target besides the baseline and --spec-default
    race_top: int = 4
    race_budget: RaceBudget = field(default_factory=lambda: RaceBudget(rounds=4))
    server_arbiter: bool = True
    replayed: int = 0  # configurations the replay predicts at most
    chain_length: int = 1  # the draft-simple chains' length (autotune.predict.chains.chain_length)
    categories: int = 0  # the mix's categories: the fewest prompts a prediction runs on
    predict_prompts: int = 0  # 0: the race's
    predict_tokens: int = 0  # 0: the race's
    replicate_per_category: bool = False  # the round after the decision runs one prompt a category, not the mix

    @property
    def predicted(self) -> Shape:
        """The prediction's prompts and tokens a prompt."""
        return Shape(self.predict_prompts or self.prompts, self.predict_tokens or self.max_tokens)

    @property
    def raced(self) -> Shape:
        return Shape(self.prompts, self.max_tokens)

    def predicting(self, shape: Shape) -> "Workload":
        """This workload with its prediction on `shape` (the race's own: as long as the race)."""
        same = shape == self.raced
        return replace(self, predict_prompts=0 if same else shape.prompts, predict_tokens=0 if same else shape.tokens)

    @classmethod
    def of(
        cls,
        space: SearchSpace,
        files: dict[str, list[Path | str]],
        *,
        prompts: int,
        max_tokens: int,
        race_top: int,
        race_budget: RaceBudget,
        server_arbiter: bool,
        sizes: dict[str, int] | None = None,
        replayed: int = 0,
        categories: int = 0,
    ) -> "Workload":
        """The workload of `space`'s predicted search over `files` (by role: "target", or a spec type:
        its draft files; a path on disk gives its size and block size, a bare name takes `sizes`)."""
        sizes = sizes or {}

        def planned(entry: Path | str, spec_type: str | None = None) -> PlannedFile:
            path = Path(entry)
            on_disk = path.is_file()
            size = path.stat().st_size if on_disk else sizes.get(path.name)
            blocks = 0
            if spec_type is not None:
                plan = BlockPlan.of(space, spec_type)
                limit = _block_limit(path, spec_type) if on_disk else None
                blocks = len({min(n, limit) if limit else n for n in plan.n_maxes})
            return PlannedFile(
                path.name,
                size,
                blocks,
                spec_type is not None and path.name in _other_quants(space, spec_type, files[spec_type]),
            )

        types = [t for t in space.spec_types if t in files]
        families = {family_of(t) for t in space.spec_types}
        chained = {Path(d).name: d for t in types if t in DRAFT_MODEL_TYPES and t not in DFLASH_TYPES for d in files[t]}
        return cls(
            prompts,
            max_tokens,
            tuple(planned(t) for t in files.get("target", ())),
            tuple(planned(d) for d in chained.values()),  # a draft's chains serve every type it drafts for
            tuple(planned(d, t) for t in types if t in DFLASH_TYPES for d in files[t]),
            families=max(1, len(families)),
            race_top=race_top,
            race_budget=race_budget,
            server_arbiter=server_arbiter,
            replayed=replayed,
            chain_length=chain_length(space),
            categories=categories,
        )


def _other_quants(space: SearchSpace, spec_type: str, drafts: list[Path | str]) -> set[str]:
    """The names among `drafts` that are another quant of one before them: a name of the same [drafts.<type>]
    table's pattern with another {quant}."""
    seen, found = set(), set()
    for name in (Path(d).name for d in drafts):
        table = next(
            (
                i
                for i, pattern in enumerate(space.draft_files(spec_type))
                if any(q is not None and fnmatch(name, glob) for q, glob in pattern.patterns())
            ),
            None,
        )
        if table is not None and table in seen:
            found.add(name)
        seen.add(table)
    return found


def _block_limit(path: Path, spec_type: str) -> int | None:
    """The most rows a DFlash/DSpark file drafts (its trained block size, less an anchor row where it has one)."""
    block_size = read_gguf_info(path).block_size
    if block_size is None:
        return None
    return block_size if spec_type == "draft-dspark" else block_size - 1


@dataclass(frozen=True)
class Pace:
    """The pace the plan prices the work at (see the module docstring)."""

    decode_tok_s: float  # the baseline's decode tok/s on the arbiter, of `measured_on`
    server_start_s: float  # one llama-server start and its warm-up
    request_s: float = 0.0  # each generation's time besides its decode: its prompt's processing, its first token
    measured_on: str | None = None  # the target file `decode_tok_s` is of (None: every target's)
    per_target: tuple[tuple[str, float], ...] = ()  # (target file, decode tok/s) where each was measured
    prefill_tok_s: float | None = None  # the baseline's prompt processing, tokens a second (None: not measured)
    block_s: float | None = None  # a DFlash/DSpark block or injection at its most rows, as priced (None: by size)
    draft_floor_s: float | None = None  # the least a draft model's decode step costs (a GPU's launches; None: none)

    def step_s(self, target: PlannedFile, targets: tuple[PlannedFile, ...]) -> float:
        """The seconds of one decode step of `target` (module docstring)."""
        own = dict(self.per_target).get(target.name)
        if own:
            return 1.0 / own
        measured = next((t for t in targets if t.name == self.measured_on), None)
        scale = 1.0
        if measured is not None and measured.size_bytes and target.size_bytes:
            scale = max(1.0, target.size_bytes / measured.size_bytes)
        return scale / self.decode_tok_s


@dataclass(frozen=True)
class PlannedPhase:
    name: str  # as the ledger names it
    tokens: int = 0
    decodes: int = 0
    server_starts: int = 0
    seconds: float = 0.0
    bound: bool = False  # an upper bound (speculative entrants are faster; the race stops once decided)

    def describe(self) -> str:
        return f"{self.name} {'≤ ' if self.bound else ''}{minutes(self.seconds)}"


def plan_phases(work: Workload, pace: Pace) -> list[PlannedPhase]:
    """Each phase of the predicted search over `work` at `pace` (the module docstring says how)."""
    steps = {t.name: pace.step_s(t, work.targets) for t in work.targets} or {"": 1.0 / pace.decode_tok_s}
    sizes = {t.name: t.size_bytes for t in work.targets}
    largest = max((s or 0 for s in sizes.values()), default=0)

    def ratio(draft: PlannedFile, target: str) -> float:  # a draft's step against its target's, at least its floor
        size = sizes.get(target) or largest
        by_size = min(1.0, (draft.size_bytes or size) / size) if size else 1.0
        return max(by_size, (pace.draft_floor_s or 0.0) / steps[target])

    def block_ratio(draft: PlannedFile, target: str) -> float:  # a DFlash/DSpark block's, its price where known
        return pace.block_s / steps[target] if pace.block_s else ratio(draft, target)

    shape = work.predicted
    targets, mix, server = len(work.targets), shape.mix_tokens, int(work.server_arbiter)

    def generating(name: str, runs_per_target: int, bound: bool = False, of: Shape = shape) -> PlannedPhase:
        runs = runs_per_target * targets
        started = runs * server
        seconds = sum(runs_per_target * of.run_s(pace, s) for s in steps.values())
        return PlannedPhase(
            name,
            tokens=runs * of.run_tokens,
            server_starts=started,
            seconds=seconds + started * pace.server_start_s,
            bound=bound,
        )

    def recording(name: str, decodes_of) -> PlannedPhase:  # decodes_of(target) -> [(decodes, draft's step ratio)]
        work_of = {name_: decodes_of(name_) for name_ in steps}
        return PlannedPhase(
            name,
            decodes=round(sum(n for w in work_of.values() for n, _ in w)),
            seconds=sum(steps[t] * n * r for t, w in work_of.items() for n, r in w),
        )

    curve = len(grid_sizes(max(2, min(MAX_BATCH, shape.tokens)))) * _CURVE_DEPTHS * (REPEATS + 1)
    positions = mix if SAMPLE_POSITIONS is None else min(mix, SAMPLE_POSITIONS)
    phases = [generating("baseline", 1)]
    if work.server_arbiter:  # a prefill of each prompt and its output, in chunks: no decode
        phases.append(PlannedPhase("trajectory", seconds=sum(_prefill_s(shape, pace, s) for s in steps.values())))
    phases.append(
        recording(
            "step costs",
            lambda t: (
                [(curve, 1.0)]
                + [(curve, ratio(d, t)) for d in work.draft_models]
                + [(2 * _block_curve(work, d), block_ratio(d, t)) for d in work.block_drafts]
            ),
        )
    )
    if work.draft_models:
        # each position decodes the chain's missing part: all of it where the draft parted from the trajectory
        phases.append(
            recording("chains", lambda t: [(mix * work.chain_length, ratio(d, t)) for d in work.draft_models])
        )
    if work.block_drafts:
        # the largest block at every position, each smaller size at a sample that checks the cut stands for it;
        # another quant of a draft: its largest block at that sample
        checked = min(positions, max(CHECK_POSITIONS, shape.prompts * WINDOW))
        phases.append(
            recording(
                "blocks",
                lambda t: [
                    (2 * (checked if d.other_quant else positions + checked * (d.block_sizes - 1)), block_ratio(d, t))
                    for d in work.block_drafts
                ],
            )
        )
    phases.append(
        PlannedPhase("replay", seconds=REPLAY_FIXED_S + work.replayed * REPLAY_S_PER_CONFIGURATION, bound=True)
    )
    calibration = Shape(min(shape.prompts, MAX_FIT_PROMPTS), shape.tokens)  # at most that many prompts each
    phases.append(generating("calibration", 2 + work.families, bound=True, of=calibration))
    phases.append(race_phase(work, pace))
    return phases


def race_phase(work: Workload, pace: Pace, budget: RaceBudget | None = None) -> PlannedPhase:
    """The race at its most (module docstring): every round of `budget` (the workload's) with every entrant,
    then the round after the decision."""
    budget = budget or work.race_budget
    after = after_decision_s(work, pace)
    if budget.rounds is None:
        return PlannedPhase("race", seconds=budget.seconds + after, bound=True)
    entrants = _race_entrants(work)
    starts_per_round = entrants * int(work.server_arbiter) * _blocks(work, work.raced)
    runs = budget.rounds * entrants + _AFTER_DECISION_ENTRANTS
    return PlannedPhase(
        "race",
        tokens=runs * work.raced.run_tokens,
        server_starts=budget.rounds * starts_per_round + _AFTER_DECISION_ENTRANTS * work.server_arbiter,
        seconds=budget.rounds * race_round_s(work, pace, work.raced) + after,
        bound=True,
    )


def _race_entrants(work: Workload) -> int:
    """Every entrant of the race: each target's baseline, its control and (on llama-server) --spec-default, and
    the finalists."""
    return (2 + int(work.server_arbiter)) * max(1, len(work.targets)) + work.race_top


def _blocks(work: Workload, shape: Shape) -> int:
    """The blocks a race round over `shape` plays, each on servers started afresh: with two targets or more the
    plan takes their servers to load in turn, the targets alternating in blocks (autotune.race.rounds), which
    starts the most servers (where they load together, the race starts fewer)."""
    return target_blocks(shape.prompts, len(work.targets))


def race_round_s(work: Workload, pace: Pace, shape: Shape) -> float:
    """A race round of every entrant over `shape` on fresh servers (afresh each block where the targets
    alternate), the finalists at the slowest target's pace."""
    steps = [pace.step_s(t, work.targets) for t in work.targets] or [1.0 / pace.decode_tok_s]
    per_target = 2 + int(work.server_arbiter)
    return (
        sum(per_target * shape.run_s(pace, s) for s in steps)
        + work.race_top * shape.run_s(pace, max(steps))
        + _race_entrants(work) * work.server_arbiter * _blocks(work, shape) * pace.server_start_s
    )


def after_decision_s(work: Workload, pace: Pace) -> float:
    """The round after the decision: the winner, its baseline and its control on fresh servers, at the slowest
    target's pace, over the mix or one prompt a category."""
    slowest = max((pace.step_s(t, work.targets) for t in work.targets), default=1.0 / pace.decode_tok_s)
    shape = Shape(work.categories, work.max_tokens) if work.replicate_per_category else work.raced
    return _AFTER_DECISION_ENTRANTS * (shape.run_s(pace, slowest) + work.server_arbiter * pace.server_start_s)


def _prefill_s(shape: Shape, pace: Pace, step_s: float) -> float:
    """A prefill of the mix's prompts and outputs at a target's `step_s`: its prompts as the baseline processed
    them, its outputs at the prompt-processing pace (`Pace.prefill_tok_s`), never slower than decoding."""
    per_token = min(step_s, PREFILL_CHUNK_FACTOR / pace.prefill_tok_s) if pace.prefill_tok_s else step_s
    return shape.mix_tokens * per_token + shape.prompts * pace.request_s


def _block_curve(work: Workload, draft: PlannedFile) -> int:
    """The batches of one DFlash/DSpark cost curve (blocks, or injections) of `draft`."""
    return len(grid_sizes(max(2, draft.block_sizes + 1))) * _CURVE_DEPTHS * (REPEATS + 1)


def plan_line(phases: list[PlannedPhase]) -> str:
    """One line: the total, then each phase's minutes."""
    total = sum(p.seconds for p in phases)
    bound = "up to " if any(p.bound for p in phases) else ""
    return f"plan: {bound}{minutes(total)} on this machine: " + "; ".join(p.describe() for p in phases)


def eta_line(phases: list[PlannedPhase], ledger: Ledger) -> str:
    """What is left of the plan once the ledger's phases ran: the planned time of the phases not yet run
    (the phase that just ran says so where it took longer than planned)."""
    done = ledger.phases
    left = sum(p.seconds for p in phases if p.name not in done)
    last = next(reversed(done), None)
    over = [
        f"{p.name} took {minutes(done[p.name].seconds)} (planned {minutes(p.seconds)})"
        for p in phases
        if p.name == last and done[p.name].seconds > 1.5 * p.seconds + 5
    ]
    upcoming = next((p.name for p in phases if p.name not in done), None)
    head = f"ETA: {minutes(left)} left" + (f", {upcoming} next" if upcoming else ", done")
    return head + (f" ({'; '.join(over)})" if over else "")


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def files_by_role(targets, drafts: dict) -> dict[str, list]:
    """The `files` of `Workload.of`: the targets, then each spec type's draft files (each once)."""
    return {"target": list(dict.fromkeys(targets)), **{t: list(dict.fromkeys(found)) for t, found in drafts.items()}}
