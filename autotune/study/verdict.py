"""What a race found, as stored with its study: each entrant's per-round, per-prompt decode times (in the
order each round ran its prompts) and the paired figures drawn from them (autotune.measure.paired), and
the verdict of its sequential rule (autotune.measure.sequential). `best`, `confirm`, `nightly`, the
presets and the report read it; every figure in it can be recomputed from the stored units.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import optuna

from autotune.llamacpp.runnable import CommandCheck
from autotune.measure.paired import MIN_EFFECT, Speedup, Units, paired_speedup
from autotune.measure.sequential import ALPHA
from autotune.study.records import BASELINE_ROLE, StudyRecord
from autotune.study.trials import baselines_of

#: why a race ended
WINNER, NONE_CAN_WIN, BUDGET_SPENT = "winner", "no entrant can reach the minimum effect", "budget spent"
#: a stop signal (Ctrl-C, SIGTERM) once the race had begun: the standing result is kept, undecided
STOPPED = "stopped before a verdict: undecided"
MACHINE_MOVED = "the machine's speed moved"


#: what set a race's budget, as its verdict stores it; only the CLI turns one into the option that races longer
RACE_BUDGET_CAP = "race-budget"  # the race's own rounds or time (search's --race-budget, nightly's)
CONFIRM_ROUNDS_CAP = "confirm-rounds"  # confirm's --repeats
SEARCH_BUDGET_CAP = "search-budget"  # what the user's --budget left the race
SPACE_BUDGET_CAP = "space-budget"  # what the search space's budget_per_target left the race
BUDGET_CAPS = (RACE_BUDGET_CAP, CONFIRM_ROUNDS_CAP, SEARCH_BUDGET_CAP, SPACE_BUDGET_CAP)
#: a verdict stored before the kinds: the option it named
_OPTION_CAPS = {"--race-budget": RACE_BUDGET_CAP, "--repeats": CONFIRM_ROUNDS_CAP, "--budget": SEARCH_BUDGET_CAP}


@dataclass(frozen=True)
class RacedConfig:
    """One entrant of a race and what it measured there."""

    label: str
    role: str  # "baseline", "control" (the plain command again), "spec-default" (llama.cpp's default), "trial" (a
    #            finalist) or "preset" (the one in use)
    trial: int | None  # the study trial it came from
    target: str
    argv: list[str]
    samples: list[float]  # mix tok/s of each round it ran
    mean_tok_s: float
    ci95: tuple[float, float]  # of the mean mix tok/s over its rounds (absolute; wide with few rounds)
    p_value: float | None  # anytime-valid, one-sided: that it is no more than MIN_EFFECT faster than its baseline
    #: paired: its target's baseline's decode time over its own, same prompts and rounds; a winner's from the
    #: round run after the decision alone (the look that decided reads high: it stopped at a peak)
    speedup: float | None
    failure: str | None = None
    #: every round's serving figures (aggregate_tok_s, per_stream_tok_s, per_stream_p10_tok_s, mix_tok_s)
    figures: dict[str, list[float]] = field(default_factory=dict)
    concurrency: int = 1
    dropped: str | None = None  # why it left the race before the end
    #: the speedup's anytime-valid bounds, each side at `speedup_ci_level`: a winner's from the test that
    #: decided, at the look that decided and the level it decided at (`speedup_at_decision` is that test's
    #: point); any other entrant's at the level its last look judged it at (autotune.race.record). Records
    #: from before issue 50 held every unit's bounds at the entrant's Holm level
    speedup_ci: tuple[float, float] | None = None
    speedup_ci_level: float = 0.975  # one-sided; a record from before anytime bounds held a two-sided 95 % interval
    speedup_at_decision: float | None = None  # a winner's speedup at the look that decided
    significant: bool = False  # proven faster than 1 + the minimum effect by the race's sequential rule
    rounds: int = 0  # rounds it ran (the last perhaps in part)
    prompts: int = 0  # prompts a full round
    decode_ms: list[list[float]] = field(default_factory=list)  # per round, per prompt run (the compared units)
    tokens: list[list[int]] = field(default_factory=list)  # the tokens each unit's time bought
    family: str | None = None  # the spec-type family it stood for (autotune.spec.types.family_of)
    ceiling: float | None = None  # the most its accepted drafts allow over its baseline (autotune.race.guards)
    #: which test gave `speedup_ci` ("per-prompt sequence" or "stratified rounds"; None: older records)
    decided_by: str | None = None
    #: a winner's 95 % interval of the round after the decision alone (a replication, fixed-sample)
    replication_ci: tuple[float, float] | None = None

    @property
    def ci_coverage(self) -> float:
        """The two-sided coverage of `speedup_ci` (each side holds at `speedup_ci_level`): 0.95 for 0.975."""
        return 1 - 2 * (1 - self.speedup_ci_level)

    @property
    def ci_label(self) -> str:
        """`98.3% CI`: the two-sided coverage of `speedup_ci`, as printed."""
        return coverage(1 - self.speedup_ci_level)

    def as_json(self) -> dict:
        """What `best --json` says of an entrant."""
        return {
            "label": self.label,
            "role": self.role,
            "trial": self.trial,
            "family": self.family,
            "speedup": self.speedup,
            "speedup_ci": None if self.speedup_ci is None else list(self.speedup_ci),
            "speedup_ci_level": self.speedup_ci_level,
            "speedup_at_decision": self.speedup_at_decision,
            "ceiling": self.ceiling,
            "decided_by": self.decided_by,
            "replication_ci": None if self.replication_ci is None else list(self.replication_ci),
            "p_value": self.p_value,
            "significant": self.significant,
            "rounds": self.rounds,
            "prompts": self.prompts,
            "tok_s": self.mean_tok_s,
            "dropped": self.dropped,
            "failure": self.failure,
        }


@dataclass(frozen=True)
class RaceVerdict:
    """A race: its entrants, how they were paired, and why it ended."""

    engine: str
    build: str
    repeats: int  # rounds played
    date: str
    baselines: list[RacedConfig]
    configs: list[RacedConfig]
    spec_defaults: list[RacedConfig] = field(default_factory=list)  # empty: the study has no such reference
    prompt_ids: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)  # each prompt's category, in prompt order
    pairing: str = "round"  # "prompt": each prompt's entrants ran back to back; "round": whole rounds apart
    ended: str = BUDGET_SPENT  # WINNER, NONE_CAN_WIN, BUDGET_SPENT or MACHINE_MOVED
    controls: list[RacedConfig] = field(default_factory=list)  # the plain command again, per target
    orders: list[list[int]] = field(default_factory=list)  # each round's prompt order (indices of prompt_ids)
    looks: int = 0  # looks the race took (one per prompt, or per round)
    decided_round: int | None = None  # the round the winner was decided in
    after_decision_round: int | None = None  # the round run after the decision, whose ratio a winner prints
    machine_moved: str | None = None  # why the race was not believed (its control ruled out 1.00x)
    min_effect: float = MIN_EFFECT
    alpha: float = ALPHA
    void_rounds: list[str] = field(default_factory=list)  # each round set aside because its control moved, and why
    within_reach: list[str] = field(default_factory=list)  # where the budget ended first: rivals still within 2 %
    budget_cap: str = (
        RACE_BUDGET_CAP  # what set the race's budget (one of BUDGET_CAPS): the CLI names what races longer
    )

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RaceVerdict":
        def config(row: dict) -> RacedConfig:
            row = dict(row)
            interval = row.pop("speedup_ci95", None) or row.get("speedup_ci")  # speedup_ci95: before anytime bounds
            replication = row.get("replication_ci")
            return RacedConfig(
                **{
                    **row,
                    "ci95": tuple(row["ci95"]),
                    "speedup_ci": None if interval is None else tuple(interval),
                    "replication_ci": None if replication is None else tuple(replication),
                }
            )

        data = {k: v for k, v in data.items() if k != "planned_rounds"}  # races before anytime bounds planned looks
        data = dict(data)
        if "budget_option" in data:
            data["budget_cap"] = _OPTION_CAPS.get(data.pop("budget_option"), RACE_BUDGET_CAP)
        return cls(
            **{
                **data,
                "baselines": [config(c) for c in data["baselines"]],
                "configs": [config(c) for c in data["configs"]],
                "spec_defaults": [config(c) for c in data.get("spec_defaults", [])],
                "controls": [config(c) for c in data.get("controls", [])],
            }
        )

    @property
    def rows(self) -> list[RacedConfig]:
        return [*self.baselines, *self.spec_defaults, *self.configs]

    def baseline_of(self, row: RacedConfig) -> RacedConfig:
        return next(b for b in self.baselines if b.target == row.target)

    def spec_default_of(self, row: RacedConfig) -> RacedConfig | None:
        """llama.cpp's default on `row`'s target, as measured in the same rounds (None: not measured)."""
        return next((d for d in self.spec_defaults if d.target == row.target and d.failure is None), None)

    def units(self, row: RacedConfig) -> Units:
        """`row`'s units, each with the prompt of the mix it ran."""
        return Units.of(
            row.decode_ms,
            row.tokens,
            [self.orders[k][: len(r)] if k < len(self.orders) else range(len(r)) for k, r in enumerate(row.decode_ms)],
        )

    def versus(self, row: RacedConfig, reference: RacedConfig) -> Speedup:
        """`row`'s paired speedup over `reference` on the units both ran."""
        return paired_speedup(self.units(reference), self.units(row), pair_by_unit=self.pairing == "prompt")

    @property
    def control(self) -> RacedConfig | None:
        """The plain command against itself (the first target's), where the race ran one."""
        return next((c for c in self.controls if c.failure is None and c.speedup is not None), None)

    def beats(self, row: RacedConfig, reference: RacedConfig) -> bool:
        """Whether `row` is faster than `reference` by more than the minimum effect, at the race's alpha."""
        return self.versus(row, reference).p_faster(1 + self.min_effect) < self.alpha

    def by_category(self, row: RacedConfig) -> dict[str, Speedup]:
        """`row`'s paired speedup over its baseline on the prompts of each category of the mix (none where
        the race did not time prompts one by one: several streams at once)."""
        if (
            not row.decode_ms
            or not self.categories
            or row.concurrency > 1
            or self.pairing != "prompt"
            and any(len(times) != len(self.categories) for times in row.decode_ms)
        ):
            return {}
        baseline = self.baseline_of(row)
        groups: dict[str, list[int]] = {}
        for index, category in enumerate(self.categories):
            groups.setdefault(category, []).append(index)
        speedups = {
            category: paired_speedup(
                self.units(baseline).columns(indices),
                self.units(row).columns(indices),
                pair_by_unit=self.pairing == "prompt",
            )
            for category, indices in groups.items()
        }
        return {category: s for category, s in speedups.items() if s.ratio > 0}

    def speedup_vs_spec_default(self, row: RacedConfig) -> float | None:
        reference = self.spec_default_of(row)
        if reference is None or not row.decode_ms or not reference.decode_ms or row is reference:
            return None
        return round(self.versus(row, reference).ratio, 4)

    @property
    def fastest(self) -> RacedConfig | None:
        """The entrant (llama.cpp's default included) with the highest speedup over its own target's
        baseline, significant or not, dropped or not."""
        return _by_speedup([c for c in self._measured() if c.role != "preset"])

    @property
    def winner(self) -> RacedConfig | None:
        """The entrant the race proved faster than its baseline by the minimum effect (the highest such
        speedup); None where none was: no speculative configuration earned its flags in these rounds."""
        return _by_speedup([c for c in self._measured() if c.significant and c.role != "preset"])

    @property
    def pick(self) -> RacedConfig | None:
        """What to run: the winner, else the baseline row of the fastest entrant's target (the plain command)."""
        if self.winner is not None:
            return self.winner
        target = self.fastest.target if self.fastest is not None else None
        return next((b for b in self.baselines if target in (None, b.target)), None)

    def runnable_by(self, check: CommandCheck) -> "RaceVerdict":
        """This confirmation without the rows whose command `check`'s llama-server cannot run."""
        return replace(
            self,
            configs=[c for c in self.configs if check.runs(c.argv)],
            spec_defaults=[c for c in self.spec_defaults if check.runs(c.argv)],
        )

    def _measured(self) -> list[RacedConfig]:
        return [c for c in self.configs + self.spec_defaults if c.failure is None and c.speedup is not None]

    @property
    def preset(self) -> RacedConfig | None:
        return next((c for c in self.configs if c.role == "preset" and c.failure is None), None)


def coverage(one_sided: float) -> str:
    """`98.3% CI`: the two-sided coverage of bounds that each hold at `one_sided`, as printed."""
    return f"{1 - 2 * one_sided:.1%} CI".replace(".0%", "%")


def _by_speedup(rows: list[RacedConfig]) -> RacedConfig | None:
    return max(rows, key=lambda c: c.speedup) if rows else None


def trial_of(study: optuna.Study, row: RacedConfig) -> optuna.trial.FrozenTrial | None:
    """The study trial a raced row measured again (a baseline row: its target's first baseline)."""
    if row.role == BASELINE_ROLE and row.trial is None:
        found = baselines_of(study, Path(row.target))
        return found[0] if found else None
    return next((t for t in study.get_trials(deepcopy=False) if t.number == row.trial), None)


def stored_verdict(study: optuna.Study) -> RaceVerdict | None:
    data = StudyRecord.of(study).confirmation
    if data is None or "baselines" not in data:
        return None
    return RaceVerdict.from_dict(data)
