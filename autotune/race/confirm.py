"""Confirm a stored study's best on the arbiter: the same race as the predicted search's
(autotune.race.race), run on the study's top configurations with the references (the baseline and,
where the study measured it, llama.cpp's `--spec-default`, one each per target involved) and, for
`nightly`, the preset in use. It serves the measured strategy's last step, `autotune confirm` and
`nightly`; a predicted study's finalists are the race's, not a new choice by prediction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import optuna

from autotune.engines import Engine, choose_engine, create_engine
from autotune.errors import StudyNotFoundError
from autotune.llamacpp.runnable import CommandCheck, command_check
from autotune.measure.prompts import PromptMix, load_prompt_mix
from autotune.race.entrants import Entrant
from autotune.race.race import OnMeasured, RaceBudget, race
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.types import family_of
from autotune.study.objectives import DEFAULT_OBJECTIVE, OBJECTIVES
from autotune.study.records import PREDICTED_ENGINE, SPEC_DEFAULT_ROLE, StudyRecord, TrialRecord, store_study
from autotune.study.trials import baselines_of, drift_corrected, is_reference
from autotune.study.verdict import RaceVerdict, stored_verdict


def top_trials(study: optuna.Study, top: int, check: CommandCheck | None = None) -> list[optuna.trial.FrozenTrial]:
    """The `top` fastest completed, lossless, speculative trials with distinct configurations, ranked by
    their speedup over the baseline measured nearest before each (drift cancels); with `check`, only
    those whose command that llama-server runs."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    seen: set[str] = set()
    chosen = []
    ranked = [t for t in complete if drift_corrected(t, complete) is not None]
    for trial in sorted(ranked, key=lambda t: drift_corrected(t, complete), reverse=True):
        record = TrialRecord.of(trial)
        label = record.label
        if (
            is_reference(trial)
            or record.lossless is False
            or label in seen
            or record.feasible is False  # below --min-stream-tok-s
            or (check is not None and not check.runs(record.argv))
        ):
            continue
        seen.add(label)
        chosen.append(trial)
    return chosen[:top]


def study_prompt_mix(study: optuna.Study) -> tuple[PromptMix, int]:
    """The prompts and output length the study was measured with."""
    measurement = StudyRecord.of(study).measurement
    source = measurement["prompt_source"]
    mix = load_prompt_mix(Path(source))
    wanted = measurement["prompts"]
    by_id = {p.id: p for p in mix}
    return PromptMix(source, tuple(by_id[i] for i in wanted)), int(measurement["max_tokens"])


def finalists(study: optuna.Study, top: int, check: CommandCheck | None = None) -> list[optuna.trial.FrozenTrial]:
    """What a confirmation races: a predicted study's race finalists again (its prediction chose them and
    the race measured them; choosing anew would rank by prediction), else the `top` best trials."""
    stored = stored_verdict(study)
    if StudyRecord.of(study).engine == PREDICTED_ENGINE and stored is not None:
        numbers = [
            row.trial
            for row in sorted(stored.configs, key=lambda r: -(r.speedup or 0))
            if row.role == "trial" and (check is None or check.runs(row.argv))
        ]
        by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
        return [by_number[n] for n in numbers if n in by_number][:top]
    return top_trials(study, top, check)


def trial_entrant(trial: optuna.trial.FrozenTrial, role: str = "trial") -> Entrant:
    """`trial`'s configuration as an entrant of a race."""
    record = TrialRecord.of(trial)
    return Entrant(role, trial.number, record.spec_config(), family_of(record.spec_type))


def race_entrants(
    study: optuna.Study, trials: list[optuna.trial.FrozenTrial], preset: SpecConfig | None = None
) -> list[Entrant]:
    """The references (the baseline and, where the study has it, `--spec-default`, for every target
    involved), then `trials` and the `preset` in use."""
    configs = [trial_entrant(t) for t in trials]
    if preset is not None:
        configs.append(Entrant("preset", None, preset, family_of(preset.spec_type)))
    targets = list(dict.fromkeys(e.config.target for e in configs))
    references = [Entrant("baseline", None, SpecConfig(target)) for target in targets]
    for target in targets:
        measured = baselines_of(study, target, SPEC_DEFAULT_ROLE)
        if measured:
            references.append(trial_entrant(measured[-1], SPEC_DEFAULT_ROLE))
    return references + configs


def confirm(
    study: optuna.Study,
    engine: Engine,
    *,
    top: int,
    budget: RaceBudget,
    command: ServerCommand,
    preset: SpecConfig | None = None,
    on_measured: OnMeasured = lambda round_, entrant, speedup: None,
    figure: str = "mix_tok_s",
    check: CommandCheck | None = None,
    before_storing: Callable[[], None] = lambda: None,
) -> RaceVerdict:
    """Race the study's finalists (`finalists`) with the references and `preset` within `budget`, and store
    the race with the study (after `before_storing`, which may refuse: a lease lost). `command` spells each
    one's printed argv; with `check` only configurations whose command that llama-server runs race."""
    trials = finalists(study, top, check)
    if not trials:
        raise StudyNotFoundError(f"study {study.study_name!r} has no completed speculative trial to confirm")
    mix, max_tokens = study_prompt_mix(study)
    entrants = race_entrants(study, trials, preset)
    for entrant in entrants:
        if entrant.is_baseline:
            engine.prepare(entrant.config, mix, max_tokens=max_tokens)
    confirmation = race(
        engine,
        entrants,
        mix,
        max_tokens=max_tokens,
        budget=budget,
        command=command,
        figure=figure,
        on_measured=on_measured,
    )
    before_storing()
    store_study(study, confirmation=confirmation.as_dict())
    return confirmation


def race_study(
    study: optuna.Study,
    *,
    top: int,
    budget: RaceBudget,
    engine_name: str,
    server_bin: str | None,
    on_measured: OnMeasured,
    preset: SpecConfig | None = None,
    sampling: dict | None = None,
    before_storing: Callable[[], None] = lambda: None,
) -> RaceVerdict:
    """Confirm `study` on `engine_name` with the study's threads, flags and sampling (`sampling`
    overrides the latter field by field); the printed argv names the binary that confirmed it."""
    stored = StudyRecord.of(study)
    command = ServerCommand.from_dict(stored.llama_server or {"context_size": 4096})
    overrides = {k: v for k, v in (sampling or {}).items() if v is not None}
    if overrides:
        command = replace(command, sampling=replace(command.sampling, **overrides))
    engine_name = choose_engine(engine_name, concurrency=command.parallel, server_bin=server_bin)
    check = command_check(server_bin)
    if engine_name == "server":
        command = replace(command, binary=check.binary)
    figure = OBJECTIVES[stored.objective or DEFAULT_OBJECTIVE].confirm_figure
    with create_engine(
        engine_name,
        context_size=command.context_size,
        threads=command.threads,
        server_bin=server_bin,
        base_flags=command.base_flags,
        sampling=command.sampling,
        concurrency=command.parallel,
    ) as engine:
        return confirm(
            study,
            engine,
            top=top,
            budget=budget,
            command=command,
            preset=preset,
            on_measured=on_measured,
            figure=figure,
            check=check,
            before_storing=before_storing,
        )
