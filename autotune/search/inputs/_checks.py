"""The search's inputs checked before anything is measured or stored: the model's space and files, the prompts
(`check_inputs`), and the part of the space an engine and these files can run (`runnable_space`).

Everything that can be wrong with the user's input (model name, files, prompts, search space) is found
before a study is created, so bad input never leaves rows in the database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from autotune.engines import Engine
from autotune.errors import ModelFileError, SearchSpaceError
from autotune.measure.prompts import default_mix_path, load_prompt_mix
from autotune.models.adhoc import adhoc_space
from autotune.models.candidates import Candidates, find_candidates
from autotune.models.files import PULL_HINT, missing_hub_files, resolve_model_files
from autotune.models.hub import fetch_missing, offline_mode, without_hub_files
from autotune.models.hub_names import HubRef
from autotune.models.hub_space import hub_space
from autotune.search.inputs._options import SearchInputs, SearchOptions, SearchReporter
from autotune.settings import default_models_dir
from autotune.spec.sampling import GREEDY, Sampling
from autotune.spec.space import SearchSpace, load_model_space
from autotune.spec.types import DRAFT_SAMPLING, is_combination


def check_inputs(options: SearchOptions, note: Callable[[str], None]) -> SearchInputs:
    """Load and check everything the user named; a draft type none of whose pairs can run is an error.
    Hub files the space names that are not on disk are downloaded first (`note` hears the line before
    the download starts); a draft file the hub does not have leaves the space. What is only left out (a
    missing quant, a draft the hub lacks, one refused pair among good ones, a file not downloaded offline)
    becomes a note, said once the storage has opened (run_study): bad input found later is then the one
    line a user sees."""
    threads = options.settings.threads
    offline = options.offline or offline_mode()
    space = model_space(options, note, offline=offline)
    if threads and any(r.param.name == "threads" for r in space.runtime):
        raise SearchSpaceError(
            f"{space.path}: [runtime] searches threads, and --threads {threads} fixes them: drop one of the two"
        )
    mix = load_prompt_mix(options.prompts_file) if options.prompts_file else None
    models_dir = options.models_dir or default_models_dir()
    fetched = fetch_missing(missing_hub_files(space, models_dir), offline=offline, on_start=note)
    space = without_hub_files(space, fetched.absent)
    files = resolve_model_files(space, models_dir, offline=offline)
    candidates = find_candidates(files)
    for spec_type in space.spec_types:
        refused = [r for r in candidates.refused if r.spec_type == spec_type]
        if refused and not candidates.pairs.get(spec_type):
            raise ModelFileError(
                f"{refused[0].describe()}; fix the drafts of {spec_type} in {space.path} or remove [spec_types.{spec_type}]"
            )
    notes = fetched.notes
    for pattern in files.missing:
        hint = "" if pattern.endswith(f"({PULL_HINT})") else " (`autotune quantize` writes a missing quant)"
        notes.append(f"no file matches {pattern}: left out{hint}")
    notes += [f"not runnable: {refused.describe()}" for refused in candidates.refused]
    if mix is None:  # the bundled mix that suits the targets: continuations for a base model
        prompts_file, mix_note = default_mix_path(candidates.targets)
        mix = load_prompt_mix(prompts_file)
        notes += [mix_note] if mix_note else []
    return SearchInputs(
        space=space,
        mix=mix.take(per_category=options.per_category),
        files=files,
        candidates=candidates,
        notes=tuple(notes),
    )


def model_space(options: SearchOptions, note: Callable[[str], None], *, offline: bool) -> SearchSpace:
    """The space the user named: a hub repo's (--hf, its files downloaded unless `offline`), local files'
    (--target), else a search-space file (--space, or the model's bundled one)."""
    model = options.settings.model
    if options.hf:
        return hub_space(
            HubRef.parse(options.hf),
            draft_ref=HubRef.parse(options.draft_hf) if options.draft_hf else None,
            name=model,
            offline=offline,
            note=note,
        )
    if options.target_file:
        return adhoc_space(options.target_file, options.draft_files, name=model)
    return load_model_space(model, options.space_file)


def runnable_space(
    space: SearchSpace, engine: Engine, candidates: Candidates, reporter: SearchReporter, sampling: Sampling = GREEDY
) -> SearchSpace:
    """The part of `space` this engine and these files can run; says what was left out and why."""
    runnable = space.restricted_to(set(engine.runnable_spec_types))
    if sampling.is_greedy:  # at temperature 0 a probabilistic draft is a greedy one: nothing to search
        runnable = runnable.without_params(lambda param: param.name == DRAFT_SAMPLING.name)
    skipped = sorted(set(space.spec_types) - set(runnable.spec_types))
    if skipped:
        reporter.note(f"the {engine.name} engine cannot run {', '.join(skipped)}: left out of this study")
    unsupported = sorted(
        {r.param.flag for ranges in runnable.spec_types.values() for r in ranges if not engine.supports_param(r.param)}
    )
    if unsupported:
        reporter.note(f"the {engine.name} engine has no {', '.join(unsupported)}: left out of this study")
        runnable = runnable.without_params(lambda param: not engine.supports_param(param))
    runnable = runnable.restricted_to(set(candidates.spec_types(list(runnable.spec_types))))
    if not [t for t in runnable.spec_types if t != "none"]:
        raise SearchSpaceError(
            f"{space.path}: nothing speculative to search: the {engine.name} engine runs "
            f"{', '.join(sorted(t for t in engine.runnable_spec_types if not is_combination(t)))} (and their "
            "combinations), and no draft type has a runnable file pair"
        )
    return runnable_runtime(runnable, engine, reporter)


def runnable_runtime(space: SearchSpace, engine: Engine, reporter: SearchReporter) -> SearchSpace:
    """The `[runtime]` flags this engine applies as llama-server does. One the in-process engine cannot
    apply is refused (bad input, before any trial); one this llama-server lacks (`-bs` on an older
    build) is left out and said so."""
    missing = [r.param for r in space.runtime if not engine.supports_runtime(r.param)]
    if engine.name != "server" and any("draft-dflash" in t or "draft-dspark" in t for t in space.spec_types):
        # the in-process DFlash/DSpark pair builds its draft context from the target's settings
        missing += [r.param for r in space.runtime if r.param.name.startswith("draft_cache_type")]
    if not missing:
        return space
    flags = ", ".join(f"{p.name} ({p.flag})" for p in missing)
    if engine.name != "server":
        raise SearchSpaceError(
            f"{space.path}: [runtime] {flags}: the {engine.name} engine cannot apply it the way "
            "llama-server does; use --engine server or remove it"
        )
    reporter.note(f"this llama-server has no {', '.join(p.flag for p in missing)}: left out of this study")
    return replace(space, runtime=tuple(r for r in space.runtime if r.param not in missing))
