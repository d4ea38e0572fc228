"""A confirmed winner becomes this machine's preset: `autotune confirm` re-measures a study's best
configurations on llama-server and stores the winner per (model, hardware, concurrency); `best`
shows a stored preset where no study of that hardware is at hand.

Confirm's race keeps to a time (`--budget`, by default the model's search space's `budget_per_target` for
each target it runs, as a search's budget) or to rounds (`--repeats`): a race holds one cap (RaceBudget), so
the two are one or the other (`confirm_budget`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import optuna

from autotune.errors import UsageError
from autotune.hardware import hardware_key
from autotune.llamacpp.runnable import command_check
from autotune.race.confirm import finalists, race_study, trial_entrant
from autotune.race.race import DEFAULT_BUDGET, OnMeasured, RaceBudget
from autotune.search.plan import SearchBudget
from autotune.spec.command import ServerCommand
from autotune.spec.space import known_models, load_model_space
from autotune.study.catalog import open_study_of
from autotune.study.records import StudyRecord, TrialRecord
from autotune.study.verdict import CONFIRM_ROUNDS_CAP, RacedConfig, RaceVerdict, trial_of
from storage import resolve_storage_url
from storage.presets import Preset, PresetStore


def run_confirm(
    *,
    model: str,
    engine_name: str | None,
    objective: str | None,
    top: int,
    repeats: int | None,
    budget: SearchBudget | None,
    storage_url: str | None,
    server_bin: str | None,
    sampling: dict,
    on_measured: OnMeasured,
    note: Callable[[str], None] = lambda line: None,
    concurrency: int | None = None,
) -> RaceVerdict:
    """Re-measure the top configurations of this machine's study of `model` (at `concurrency` streams) on
    llama-server within `repeats` rounds or `budget`'s time (`confirm_budget`, said to `note`), and make the
    confirmed winner this machine's preset for that load. `sampling` holds the settings given on the command
    line (None: the study's own)."""
    if repeats is not None and budget is not None and budget.seconds is not None:
        raise UsageError(
            "--repeats and --budget both cap confirm's race, which keeps to one cap: give --repeats (rounds) "
            "or --budget (time)"
        )
    url = resolve_storage_url(storage_url)
    study = open_study_of(model, engine=engine_name, storage_url=url, objective=objective, concurrency=concurrency)
    targets = {trial_entrant(t).config.target for t in finalists(study, top, command_check(server_bin))}
    race_budget, why = confirm_budget(model, len(targets), repeats=repeats, budget=budget)
    note(f"race budget: {race_budget.describe()} ({why})")
    confirmation = race_study(
        study,
        top=top,
        budget=race_budget,
        engine_name="server",
        server_bin=server_bin,
        on_measured=on_measured,
        sampling=sampling,
    )
    if confirmation.pick is not None:  # the plain command where nothing was significantly faster
        with PresetStore(url) as store:
            store.save(preset_from(model, study, confirmation=confirmation, row=confirmation.pick))
    return confirmation


def confirm_budget(
    model: str, targets: int, *, repeats: int | None, budget: SearchBudget | None
) -> tuple[RaceBudget, str]:
    """What caps confirm's race of `model`'s study on `targets` targets, and where it came from: `repeats` rounds
    (--repeats), else `budget`'s time (--budget), else where neither is given the time `model`'s bundled search
    space states, its `budget_per_target` for each target (what its search's budget gives a target, here all
    the race's); where no time applies (--budget none, a space that states none, a model with no bundled
    space: a `--hf` study) DEFAULT_BUDGET's rounds."""
    if repeats is not None:
        return RaceBudget(rounds=repeats, cap=CONFIRM_ROUNDS_CAP), "--repeats"
    if budget is None and model in known_models():
        budget = SearchBudget.default(load_model_space(model), targets)
    if budget is None or budget.seconds is None:
        why = "--budget none" if budget is not None else f"no search space of {model} states a budget_per_target"
        return RaceBudget(rounds=int(DEFAULT_BUDGET), cap=CONFIRM_ROUNDS_CAP), f"{why}: --repeats' default"
    return RaceBudget(seconds=budget.seconds, cap=budget.race_cap), budget.how


def preset_from(model: str, study: optuna.Study, *, confirmation: RaceVerdict, row: RacedConfig) -> Preset:
    """The preset a confirmed configuration of `study` makes on this machine."""
    record = TrialRecord.of(trial_of(study, row))
    return Preset(
        model=model,
        hardware=hardware_key(),
        argv=tuple(row.argv),
        tok_s=row.mean_tok_s,
        baseline_tok_s=confirmation.baseline_of(row).mean_tok_s,
        speedup=1.0 if row.role == "baseline" else row.speedup or 0.0,
        ci95_low=row.ci95[0],
        ci95_high=row.ci95[1],
        p_value=row.p_value,
        engine=confirmation.engine,
        llama_cpp_build=confirmation.build,
        file_hashes=dict(record.model_files),
        file_revisions=dict(record.model_revisions),
        params=dict(record.config),
        study_name=study.study_name,
        concurrency=ServerCommand.from_dict(StudyRecord.of(study).llama_server or {"context_size": 0}).parallel,
    )


def stored_preset(model: str, *, hardware: str | None, storage_url: str | None, concurrency: int = 1) -> Preset | None:
    with PresetStore(resolve_storage_url(storage_url)) as store:
        return store.get(model, hardware or hardware_key(), concurrency)


@dataclass(frozen=True)
class PresetResult:
    """A stored preset shown where no study of that hardware is at hand (e.g. another machine's)."""

    preset: Preset

    @property
    def argv(self) -> list[str]:
        return list(self.preset.argv)

    def summary(self) -> str:
        p = self.preset
        return (
            f"# preset for {p.hardware}: {p.tok_s:.1f} tok/s, baseline {p.baseline_tok_s:.1f}, speedup "
            f"{p.speedup:.2f}x (confirmed on {p.engine}, {p.created_at:%Y-%m-%d})"
        )

    def as_dict(self) -> dict:
        p = self.preset
        return {
            "study": p.study_name,
            "command": p.command,
            "argv": self.argv,
            "tok_s": p.tok_s,
            "baseline_tok_s": p.baseline_tok_s,
            "speedup": p.speedup,
            "params": {"spec_type": p.params.get("spec_type"), **p.params.get("params", {})},
            "engine": p.engine,
            "llama_cpp_build": p.llama_cpp_build,
            "hardware": p.hardware,
            "concurrency": p.concurrency,
            "preset": True,
        }
