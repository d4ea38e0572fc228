"""A confirmed winner becomes this machine's preset: `autotune confirm` re-measures a study's best
configurations on llama-server and stores the winner per (model, hardware, concurrency); `best`
shows a stored preset where no study of that hardware is at hand."""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from autotune.hardware import hardware_key
from autotune.race.confirm import race_study
from autotune.race.race import OnMeasured, RaceBudget
from autotune.spec.command import ServerCommand
from autotune.study.catalog import open_study_of
from autotune.study.records import StudyRecord, TrialRecord
from autotune.study.verdict import RacedConfig, RaceVerdict, trial_of
from storage import resolve_storage_url
from storage.presets import Preset, PresetStore


def run_confirm(
    *,
    model: str,
    engine_name: str | None,
    objective: str | None,
    top: int,
    budget: RaceBudget,
    storage_url: str | None,
    server_bin: str | None,
    sampling: dict,
    on_measured: OnMeasured,
    concurrency: int | None = None,
) -> RaceVerdict:
    """Re-measure the top configurations of this machine's study of `model` (at `concurrency` streams) on
    llama-server, and make the confirmed winner this machine's preset for that load. `sampling` holds
    the settings given on the command line (None: the study's own)."""
    url = resolve_storage_url(storage_url)
    study = open_study_of(model, engine=engine_name, storage_url=url, objective=objective, concurrency=concurrency)
    confirmation = race_study(
        study,
        top=top,
        budget=budget,
        engine_name="server",
        server_bin=server_bin,
        on_measured=on_measured,
        sampling=sampling,
    )
    if confirmation.pick is not None:  # the plain command where nothing was significantly faster
        with PresetStore(url) as store:
            store.save(preset_from(model, study, confirmation=confirmation, row=confirmation.pick))
    return confirmation


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
