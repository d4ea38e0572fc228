"""Unattended re-tuning: when model files are new or changed, tune again (predicted and raced where the
search can be predicted, as `search` does; else a new measured study version warm-started with the
previous winners and its race) with the configuration in use racing beside the finalists, and replace
the preset only when the race's pick is faster than that configuration by the race's own rule (paired,
beyond the minimum effect: autotune.study.verdict); the preset keeps the reason it was made.

Files the search space names on the hub are first brought up to the hub's current revision, and what
a new revision brings is said in one line each (autotune.models.releases): a source release of a
converted repo (`new draft release: dspark from deepseek-ai/dspark_qwen3_8b_block7@abc1234 (was
9f8e7d6)`, read from its `.src_sha`), or a revision that changed no file the space uses (a README
update), whose files then hash as before: nothing is measured. `retune` is the one step that measures.

A night keeps to a budget as `search` does (`--budget`, else the search space's `budget_per_target` a target:
autotune.search.plan.search_budget): a predicted re-tune fits its prediction and race to it (make_plan); a
measured one runs its --trials and races within it (`measured_race_budget`).

Exit codes for cron and systemd (README, "Nightly re-tuning"): 0 improved (preset replaced),
3 unchanged (preset kept), 4 regressed (the preset's own configuration now measures slower than when
it was recorded), 1 failed, 2 bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import optuna

from autotune.engines import choose_engine
from autotune.errors import UsageError
from autotune.hardware import hardware_key
from autotune.measure.prompts import load_prompt_mix
from autotune.models.releases import follow_releases
from autotune.presets.confirmed import preset_from
from autotune.race.confirm import race_study, top_trials
from autotune.race.race import RaceBudget, round_line
from autotune.search.fleet import search_lease
from autotune.search.inputs import RaceOptions, SearchInputs, SearchOptions, SearchReporter, check_inputs, model_space
from autotune.search.measured import run_study
from autotune.search.plan import SearchBudget, budget_line, make_plan, search_budget
from autotune.search.predicted import (
    PREDICT_TRIALS,
    cannot_predict,
    measured_only_refused,
    predict_and_race,
    replays_at_most,
)
from autotune.spec.space import SearchSpace, load_model_space
from autotune.study.catalog import study_name, study_names
from autotune.study.records import PREDICTED_ENGINE, StudyRecord, config_from_attrs
from autotune.study.runs import newest_answer
from autotune.study.verdict import RacedConfig, RaceVerdict, stored_verdict
from storage import open_storage, resolve_storage_url
from storage.leases import Lease
from storage.presets import Preset, PresetStore

EXIT_CODES = {"improved": 0, "unchanged": 3, "regressed": 4}


@dataclass(frozen=True)
class NightlyOutcome:
    status: str  # "improved", "unchanged" or "regressed"
    summary: str
    new_winner: RacedConfig | None = None  # set when the preset should be replaced

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


def decide(model: str, confirmation: RaceVerdict, preset: Preset | None) -> NightlyOutcome:
    """Compare the confirmed new pick (the winner, or the plain command where nothing was significantly
    faster than the baseline) with the preset's configuration measured in the same run."""
    if confirmation.machine_moved:  # the race's own clock is not believed: neither a new pick nor a regression
        kept = "preset kept" if preset is not None else "no preset yet: the next night tunes it again"
        return NightlyOutcome("unchanged", f"{model}: {confirmation.machine_moved}; no verdict tonight, {kept}")
    winner = confirmation.pick
    if winner is None:
        return NightlyOutcome("unchanged", f"{model}: no configuration could be confirmed; preset kept")
    figures = (
        f"{winner.label} {winner.mean_tok_s:.1f} tok/s ({winner.speedup:.2f}x)"
        if winner.role != "baseline"
        else f"the plain command {winner.mean_tok_s:.1f} tok/s (nothing was proven faster by {confirmation.min_effect:.0%})"
    )
    if preset is None:
        return NightlyOutcome("improved", f"{model}: first preset: {figures}", winner)
    current = confirmation.preset
    raced = next((c for c in confirmation.configs if c.role == "preset"), None)  # a failed one included
    if current is None and raced is not None and list(raced.argv) == list(winner.argv):
        current = winner  # the preset's own row failed, but its command is the pick's, which the race measured
    if current is None:
        why = (
            f"the preset failed in tonight's race ({raced.failure})"
            if raced is not None
            else "the preset's files are gone"
        )
        return NightlyOutcome("improved", f"{model}: {why}; new preset {figures}", winner)
    if list(winner.argv) == list(current.argv):
        return _unless_regressed(model, current, preset, f"{model}: the preset is still the best ({figures}); kept")
    versus = confirmation.versus(winner, current)
    low, high = versus.interval()
    against = (
        f"{versus.ratio:.2f}x the preset's speed [95% CI {low:.2f}-{high:.2f}], "
        f"p={versus.p_faster(1 + confirmation.min_effect):.2g}"
    )
    if confirmation.beats(winner, current):
        return NightlyOutcome("improved", f"{model}: {figures} beats the preset: {against}", winner)
    return _unless_regressed(
        model,
        current,
        preset,
        f"{model}: {figures} is not proven faster than the preset by {confirmation.min_effect:.0%} ({against}); kept",
    )


def _unless_regressed(model: str, current: RacedConfig, preset: Preset, summary: str) -> NightlyOutcome:
    """`unchanged`, unless the preset's configuration now measures below its recorded 95% interval."""
    if preset.ci95_low is not None and current.ci95[1] < preset.ci95_low:
        return NightlyOutcome(
            "regressed",
            f"{model}: the preset now runs {current.mean_tok_s:.1f} tok/s, below its recorded "
            f"{preset.ci95_low:.1f}-{preset.ci95_high:.1f}; kept (check drivers, llama.cpp build, other load)",
        )
    return NightlyOutcome("unchanged", summary)


def run_nightly(
    options: SearchOptions,
    *,
    top: int,
    race_budget: RaceBudget,
    server_bin: str | None,
    reporter: SearchReporter,
    budget: SearchBudget | None = None,
) -> NightlyOutcome:
    """Re-tune `options.model` (at `options.settings.concurrency` streams) if its files changed since the
    last study version, within `budget` (--budget's; None: the space's default, module docstring), the race
    within `race_budget` too. Files the search space names on the hub are brought up to the hub's current
    revision first."""
    model, settings = options.model, options.settings
    if options.prompts_file:
        load_prompt_mix(options.prompts_file)  # a bad prompt file is found before a long download
    url = resolve_storage_url(options.storage_url)
    with PresetStore(url) as store:  # a bad storage is found before any download or measurement
        followed = followed_space(options)
        releases = follow_releases(followed, reporter.note, offline=options.offline) if followed is not None else []
        inputs = check_inputs(options, reporter.note)
        hashes = {path.name: store.cached_sha256(path) for path in inputs.files.paths}
        storage = open_storage(url)
        predicted = cannot_predict(settings, inputs.space) is None
        if predicted and options.measured_only:
            raise measured_only_refused(
                options.measured_only,
                "this model's re-tuning is predicted and raced (temperature 0, one stream, decode): drop them",
            )
        engine_name = (
            PREDICTED_ENGINE
            if predicted
            else choose_engine(
                options.engine_name, concurrency=settings.concurrency, server_bin=server_bin, note=reporter.note
            )
        )
        base = study_name(
            model,
            hardware_key(),
            engine_name,
            objective="decode" if predicted else settings.objective,
            concurrency=settings.concurrency,
        )
        with search_lease(options, reporter.note) as lease:  # one search of this key at a time, nightly or not
            answer = newest_answer(storage, base)
            previous = optuna.load_study(study_name=answer, storage=storage) if answer in study_names(storage) else None
            preset = store.get(model, hardware_key(), settings.concurrency)
            if previous is not None and preset is not None and StudyRecord.of(previous).file_hashes == hashes:
                return unchanged_files(model)
            outcome, new_preset = retune(
                inputs,
                options,
                engine_name=engine_name,
                url=url,
                previous=previous,
                preset=preset,
                hashes=hashes,
                top=top,
                race_budget=race_budget,
                budget=budget,
                server_bin=server_bin,
                reporter=reporter,
                lease=lease,
            )
        if new_preset is not None:
            why = releases or ([] if previous is None else ["the model files changed"])
            store.save(replace(new_preset, reason="; ".join([*why, outcome.summary.removeprefix(f"{model}: ")])))
    return outcome


def followed_space(options: SearchOptions) -> SearchSpace | None:
    """The space whose hub files are brought up to the hub's current revision before re-tuning: the model's
    search-space file, or for `--hf` the space of what the hub cache holds of the repo (None where there
    is nothing to follow: local files, or a first night with nothing cached; the search then downloads)."""
    if options.target_file is not None:
        return None
    if options.hf is None:
        return load_model_space(options.model, options.space_file)
    try:
        return model_space(options, lambda line: None, offline=True)
    except UsageError:
        return None


def changed_files(previous: optuna.Study | None, hashes: dict[str, str]) -> frozenset[str]:
    """The names of the files whose content is new since `previous` (none on a first night: nothing is
    new against nothing)."""
    if previous is None:
        return frozenset()
    before = StudyRecord.of(previous).file_hashes or {}
    return frozenset(name for name, sha in hashes.items() if before.get(name) != sha)


def retune(
    inputs: SearchInputs,
    options: SearchOptions,
    *,
    engine_name: str,
    url: str,
    previous: optuna.Study | None,
    preset: Preset | None,
    hashes: dict[str, str],
    top: int,
    race_budget: RaceBudget,
    budget: SearchBudget | None,
    server_bin: str | None,
    reporter: SearchReporter,
    lease: Lease,
) -> tuple[NightlyOutcome, Preset | None]:
    """Tune on the files as they are now and pit the result against the stored preset, which races beside
    the finalists: predicted and raced (`engine_name` "predicted"), else a new measured study version
    warm-started with the previous winners and raced. `budget` (None: the space's default) caps the whole
    predicted re-tune, as search's --budget, and a measured one's race alone (`measured_race_budget`). Returns
    the verdict and, on a win over the preset, the preset that replaces the stored one."""
    model = options.model
    in_use = config_from_attrs(preset.params) if preset is not None else None
    if in_use is not None and not all(p.is_file() for p in (in_use.target, in_use.draft) if p):
        in_use = None
    if engine_name == PREDICTED_ENGINE:
        plan = make_plan(
            options,
            inputs,
            RaceOptions(True, top, race_budget),
            budget,
            server_bin=server_bin,
            note=reporter.note,
            replayed=replays_at_most(inputs.space, inputs, PREDICT_TRIALS),
        )
        if plan.budget is not None:
            reporter.note(f"{budget_line(plan.budget, plan.work)}; pace: {plan.pace_line}")
        study = predict_and_race(
            inputs,
            options.settings,
            plan,
            storage_url=url,
            server_bin=server_bin,
            predict_trials=PREDICT_TRIALS,
            reporter=reporter,
            lease=lease,
            preset=in_use,
            study_attrs={"file_hashes": hashes},
            new_files=changed_files(previous, hashes),
        )
        confirmation = stored_verdict(study)
    else:
        capped = search_budget(budget, inputs.space, len(inputs.candidates.targets))
        race_budget = measured_race_budget(race_budget, capped)
        if capped is not None:
            reporter.note(
                f"budget: {capped.describe()} ({capped.how}): the measured study runs its --trials "
                f"{options.settings.trials}, uncapped, then the race up to {race_budget.describe()}"
            )
        study = run_study(
            inputs,
            options.settings,
            engine_name=engine_name,
            server_bin=server_bin,
            storage_url=url,
            reporter=reporter,
            new_version=previous is not None,
            warm_start=top_trials(previous, top) if previous is not None else [],
            study_attrs={"file_hashes": hashes},
            heartbeat_s=options.heartbeat_s,
        )
        if not top_trials(study, top):
            return NightlyOutcome(
                "unchanged",
                f"{model}: no speculative configuration completed (all pruned or "
                f"failed, see `autotune trials --model {model}`); preset kept",
            ), None
        confirmation = race_study(
            study,
            top=top,
            budget=race_budget,
            engine_name="server",
            server_bin=server_bin,
            preset=in_use,
            before_storing=lease.check,
            on_measured=lambda r, entrant, speedup: reporter.note(round_line(r, entrant, speedup)),
        )
    outcome = decide(model, confirmation, preset)
    if outcome.new_winner is None:
        return outcome, None
    return outcome, preset_from(model, study, confirmation=confirmation, row=outcome.new_winner)


def measured_race_budget(race_budget: RaceBudget, budget: SearchBudget | None) -> RaceBudget:
    """The race of a measured re-tune under `budget` (autotune.search.plan.search_budget's; None: no cap). Its
    study runs --trials trials (a measured study takes no budget, as under `search --strategy measure`), so the
    budget caps the race alone, in time. A race holds one cap, rounds or time (RaceBudget): --race-budget's rounds give way to the
    budget's seconds, and a --race-budget time stays where it is the shorter."""
    if budget is None:
        return race_budget
    if race_budget.seconds is not None and race_budget.seconds <= budget.seconds:
        return race_budget
    return RaceBudget(seconds=budget.seconds, cap=budget.race_cap)
