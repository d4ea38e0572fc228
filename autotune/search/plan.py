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
  a CPU does not, so on a CPU the in-process phases are lower bounds.

A file whose size is unknown (not on disk, the hub out of reach) is priced as large as the largest
target, and its DFlash/DSpark block sizes as every n_max the space allows (the file would clamp them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autotune.engines.dflash.drafter import DFLASH_TYPES
from autotune.gguf.info import read_gguf_info
from autotune.measure.ledger import Ledger
from autotune.predict.block_drafts import BlockPlan
from autotune.predict.block_sample import SAMPLE_POSITIONS
from autotune.predict.cost import REPEATS, grid_sizes
from autotune.predict.target import MAX_BATCH
from autotune.race.race import RaceBudget
from autotune.spec.space import SearchSpace
from autotune.spec.types import DRAFT_MODEL_TYPES, family_of

#: depths each cost curve is measured at (autotune.predict.target.measure_target)
_CURVE_DEPTHS = 2


@dataclass(frozen=True)
class PlannedFile:
    """A model file the search uses: its name and size (None: unknown)."""

    name: str
    size_bytes: int | None = None
    block_sizes: int = 0  # a DFlash/DSpark draft: the block sizes recorded


@dataclass(frozen=True)
class Workload:
    """What a predicted search measures: the mix, the targets, their drafts, the race."""

    prompts: int
    max_tokens: int
    targets: tuple[PlannedFile, ...]
    draft_models: tuple[PlannedFile, ...] = ()  # draft-simple (chains)
    block_drafts: tuple[PlannedFile, ...] = ()  # draft-dflash / draft-dspark (blocks)
    families: int = 1  # the calibration's references per target besides the baseline and --spec-default
    race_top: int = 4
    race_budget: RaceBudget = field(default_factory=lambda: RaceBudget(rounds=4))
    server_arbiter: bool = True

    @property
    def mix_tokens(self) -> int:
        return self.prompts * self.max_tokens

    @classmethod
    def of(cls, space: SearchSpace, files: dict[str, list[Path | str]], *, prompts: int, max_tokens: int,
           race_top: int, race_budget: RaceBudget, server_arbiter: bool,
           sizes: dict[str, int] | None = None) -> "Workload":
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
            return PlannedFile(path.name, size, blocks)

        types = [t for t in space.spec_types if t in files]
        families = {family_of(t) for t in space.spec_types}
        chained = {Path(d).name: d for t in types if t in DRAFT_MODEL_TYPES and t not in DFLASH_TYPES for d in files[t]}
        return cls(prompts, max_tokens, tuple(planned(t) for t in files.get("target", ())),
                   tuple(planned(d) for d in chained.values()),  # a draft's chains serve every type it drafts for
                   tuple(planned(d, t) for t in types if t in DFLASH_TYPES for d in files[t]),
                   families=max(1, len(families)), race_top=race_top, race_budget=race_budget,
                   server_arbiter=server_arbiter)


def _block_limit(path: Path, spec_type: str) -> int | None:
    """The most rows a DFlash/DSpark file drafts (its trained block size, less an anchor row where it has one)."""
    block_size = read_gguf_info(path).block_size
    if block_size is None:
        return None
    return block_size if spec_type == "draft-dspark" else block_size - 1


@dataclass(frozen=True)
class Pace:
    """The measured pace the plan prices the work at."""

    decode_tok_s: float  # the baseline's, on the arbiter
    server_start_s: float  # one llama-server start and its warm-up


@dataclass(frozen=True)
class PlannedPhase:
    name: str  # as the ledger names it
    tokens: int = 0
    decodes: int = 0
    server_starts: int = 0
    seconds: float = 0.0
    bound: bool = False  # an upper bound (speculative entrants are faster; the race stops once decided)

    def describe(self) -> str:
        return f"{self.name} {'≤ ' if self.bound else ''}{_minutes(self.seconds)}"


def plan_phases(work: Workload, pace: Pace) -> list[PlannedPhase]:
    """Each phase of the predicted search over `work` at `pace` (the module docstring says how)."""
    step_s = 1.0 / pace.decode_tok_s
    largest = max((f.size_bytes or 0 for f in work.targets), default=0)

    def ratio(file: PlannedFile) -> float:  # a draft's step against the target's
        return min(1.0, (file.size_bytes or largest) / largest) if largest else 1.0

    targets, mix = len(work.targets), work.mix_tokens

    def generating(name: str, runs: int, starts: int, bound: bool = False) -> PlannedPhase:
        return PlannedPhase(name, tokens=runs * mix, server_starts=starts,
                            seconds=runs * mix * step_s + starts * pace.server_start_s, bound=bound)

    curve = len(grid_sizes(max(2, min(MAX_BATCH, work.max_tokens)))) * _CURVE_DEPTHS * (REPEATS + 1)
    step_costs = targets * (curve + sum(curve * ratio(d) for d in work.draft_models)
                            + sum(2 * _block_curve(work, d) * ratio(d) for d in work.block_drafts))
    positions = mix if SAMPLE_POSITIONS is None else min(mix, SAMPLE_POSITIONS)
    chain_decodes = [(mix, ratio(d)) for d in work.draft_models]
    block_decodes = [(2 * positions * d.block_sizes, ratio(d)) for d in work.block_drafts]
    references = targets * (2 + work.families)  # at most one mix each: most leave earlier
    entrants = work.race_top + 2 * targets
    rounds = work.race_budget.rounds
    phases = [generating("baseline", targets, targets * work.server_arbiter)]
    if work.server_arbiter:
        phases.append(generating("trajectory", targets, 0))
    phases.append(PlannedPhase("step costs", decodes=round(step_costs), seconds=step_costs * step_s))
    phases += [PlannedPhase(name, decodes=targets * sum(n for n, _ in work), seconds=targets * step_s * sum(n * r for n, r in work))
               for name, work in (("chains", chain_decodes), ("blocks", block_decodes)) if work]
    phases.append(generating("calibration", references, references * work.server_arbiter, bound=True))
    if rounds is not None:
        phases.append(generating("race", rounds * entrants, rounds * entrants * work.server_arbiter, bound=True))
    else:
        phases.append(PlannedPhase("race", seconds=work.race_budget.seconds, bound=True))
    return phases


def _block_curve(work: Workload, draft: PlannedFile) -> int:
    """The batches of one DFlash/DSpark cost curve (blocks, or injections) of `draft`."""
    return len(grid_sizes(max(2, draft.block_sizes + 1))) * _CURVE_DEPTHS * (REPEATS + 1)


def plan_line(phases: list[PlannedPhase]) -> str:
    """One line: the total, then each phase's minutes."""
    total = sum(p.seconds for p in phases)
    bound = "up to " if any(p.bound for p in phases) else ""
    return f"plan: {bound}{_minutes(total)} on this machine: " + "; ".join(p.describe() for p in phases)


def eta_line(phases: list[PlannedPhase], ledger: Ledger) -> str:
    """What is left of the plan once the ledger's phases ran: the planned time of the phases not yet run
    (a phase that ran longer than planned says so)."""
    done = ledger.phases
    left = sum(p.seconds for p in phases if p.name not in done)
    over = [f"{p.name} took {_minutes(done[p.name].seconds)} (planned {_minutes(p.seconds)})" for p in phases
            if p.name in done and done[p.name].seconds > 1.5 * p.seconds + 5]
    upcoming = next((p.name for p in phases if p.name not in done), None)
    head = f"ETA: {_minutes(left)} left" + (f", {upcoming} next" if upcoming else ", done")
    return head + (f" ({'; '.join(over)})" if over else "")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def files_by_role(targets, drafts: dict) -> dict[str, list]:
    """The `files` of `Workload.of`: the targets, then each spec type's draft files (each once)."""
    return {"target": list(dict.fromkeys(targets)), **{t: list(dict.fromkeys(found)) for t, found in drafts.items()}}
