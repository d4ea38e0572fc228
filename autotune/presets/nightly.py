"""Unattended re-tuning: when model files are new or changed, run a new study version warm-started
with the previous winners, confirm on llama-server, and replace the preset only when the new winner
is significantly faster than the configuration in use.

Exit codes for cron and systemd (README, "Nightly re-tuning"): 0 improved (preset replaced),
3 unchanged (preset kept), 4 regressed (the preset's own configuration now measures slower than when
it was recorded), 1 failed, 2 bad input.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from autotune.engines import choose_engine
from autotune.hardware import hardware_key
from autotune.measure.prompts import load_prompt_mix
from autotune.models.hub import hub_files, pull
from autotune.presets.confirmed import preset_from
from autotune.spec.space import SearchSpace, load_model_space
from autotune.study.catalog import latest_version, study_name, study_names
from autotune.study.confirm import Confirmation, ConfirmedConfig, confirm_study, top_trials
from autotune.study.records import StudyRecord, config_from_attrs
from autotune.study.search import SearchOptions, check_inputs, run_study
from autotune.study.tuner import SearchReporter
from storage import open_storage, resolve_storage_url
from storage.presets import Preset, PresetStore

EXIT_CODES = {"improved": 0, "unchanged": 3, "regressed": 4}
SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class NightlyOutcome:
    status: str  # "improved", "unchanged" or "regressed"
    summary: str
    new_winner: ConfirmedConfig | None = None  # set when the preset should be replaced

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]


def combined_exit_code(outcomes: list[NightlyOutcome]) -> int:
    """One exit code for the levels of `--concurrency 1,2,4`: improved if any level improved, else
    regressed if any regressed, else unchanged."""
    statuses = {o.status for o in outcomes}
    for status in ("improved", "regressed"):
        if status in statuses:
            return EXIT_CODES[status]
    return EXIT_CODES["unchanged"]


def unchanged_files(model: str) -> NightlyOutcome:
    return NightlyOutcome("unchanged", f"{model}: no new or changed model files; preset kept")


def decide(model: str, confirmation: Confirmation, preset: Preset | None) -> NightlyOutcome:
    """Compare the confirmed new pick (the winner, or the plain command where nothing was significantly
    faster than the baseline) with the preset's configuration measured in the same run."""
    winner = confirmation.pick
    if winner is None:
        return NightlyOutcome("unchanged", f"{model}: no configuration could be confirmed; preset kept")
    figures = (f"{winner.label} {winner.mean_tok_s:.1f} tok/s ({winner.speedup:.2f}x)" if winner.role != "baseline" else
               f"the plain command {winner.mean_tok_s:.1f} tok/s (nothing was significantly faster)")
    if preset is None:
        return NightlyOutcome("improved", f"{model}: first preset: {figures}", winner)
    current = confirmation.preset
    if current is None:
        return NightlyOutcome("improved", f"{model}: the preset's files are gone; new preset {figures}", winner)
    if list(winner.argv) == list(current.argv):
        return _unless_regressed(model, current, preset, f"{model}: the preset is still the best ({figures}); kept")
    p_value = confirmation.welch_p(winner, current)
    if winner.mean_tok_s > current.mean_tok_s and p_value is not None and p_value < SIGNIFICANCE:
        return NightlyOutcome(
            "improved", f"{model}: {figures} beats the preset's {current.mean_tok_s:.1f} tok/s (p={p_value:.3g})", winner
        )
    shown = "n/a" if p_value is None else f"{p_value:.3g}"
    return _unless_regressed(
        model, current, preset,
        f"{model}: {figures} is not significantly faster than the preset's {current.mean_tok_s:.1f} tok/s "
        f"(p={shown}); kept",
    )


def _unless_regressed(model: str, current: ConfirmedConfig, preset: Preset, summary: str) -> NightlyOutcome:
    """`unchanged`, unless the preset's configuration now measures below its recorded 95% interval."""
    if preset.ci95_low is not None and current.ci95[1] < preset.ci95_low:
        return NightlyOutcome(
            "regressed",
            f"{model}: the preset now runs {current.mean_tok_s:.1f} tok/s, below its recorded "
            f"{preset.ci95_low:.1f}-{preset.ci95_high:.1f}; kept (check drivers, llama.cpp build, other load)",
        )
    return NightlyOutcome("unchanged", summary)


def run_nightly(options: SearchOptions, *, top: int, confirm_repeats: int, server_bin: str | None,
                reporter: SearchReporter) -> NightlyOutcome:
    """Re-tune `options.model` (at `options.settings.concurrency` streams) if its files changed since the
    last study version. Files the search space names on the hub are brought up to the hub's current
    revision first."""
    model, settings = options.model, options.settings
    if options.prompts_file:
        load_prompt_mix(options.prompts_file)  # a bad prompt file is found before a long download
    pull_latest(load_model_space(model, options.space_file), reporter, offline=options.offline)
    inputs = check_inputs(options, reporter.note)
    url = resolve_storage_url(options.storage_url)
    with PresetStore(url) as store:
        hashes = {path.name: store.cached_sha256(path) for path in inputs.files.paths}
        storage = open_storage(url)
        engine_name = choose_engine(options.engine_name, concurrency=settings.concurrency, server_bin=server_bin,
                                    note=reporter.note)
        base = study_name(model, hardware_key(), engine_name, objective=settings.objective,
                          concurrency=settings.concurrency)
        latest, _ = latest_version(storage, base)
        previous = optuna.load_study(study_name=latest, storage=storage) if latest in study_names(storage) else None
        preset = store.get(model, hardware_key(), settings.concurrency)
        if previous is not None and preset is not None and StudyRecord.of(previous).file_hashes == hashes:
            return unchanged_files(model)
        study = run_study(
            inputs, settings, engine_name=engine_name, server_bin=server_bin, storage_url=url, reporter=reporter,
            new_version=previous is not None, warm_start=top_trials(previous, top) if previous is not None else [],
            study_attrs={"file_hashes": hashes}, heartbeat_s=options.heartbeat_s,
        )
        if not top_trials(study, top):
            return NightlyOutcome("unchanged", f"{model}: no speculative configuration completed (all pruned or "
                                               f"failed, see `autotune trials --model {model}`); preset kept")
        in_use = config_from_attrs(preset.params) if preset is not None else None
        if in_use is not None and not all(p.is_file() for p in (in_use.target, in_use.draft) if p):
            in_use = None
        confirmation = confirm_study(study, top=top, repeats=confirm_repeats, engine_name="server",
                                     server_bin=server_bin, preset=in_use,
                                     on_measured=lambda r, label, tok_s: reporter.note(
                                         f"confirm round {r + 1}: {label}: {tok_s}"))
        outcome = decide(model, confirmation, preset)
        if outcome.new_winner is not None:
            store.save(preset_from(model, study, confirmation=confirmation, row=outcome.new_winner))
    return outcome


def pull_latest(space: SearchSpace, reporter: SearchReporter, *, offline: bool = False) -> None:
    """Download each hub file of `space` whose revision on the hub is new; offline (`offline`, or
    HF_HUB_OFFLINE), say so in one line and go on with the files on disk."""
    if not hub_files(space):
        return
    result = pull(space, latest=True, offline=offline,
                  on_file=lambda f, why: reporter.note(f"downloading {f.label} ({why})"))
    if result.unreachable:
        reporter.note(f"hub not asked for new revisions: {result.unreachable}; going on with the files on disk")
