"""`autotune search --plan`: measure one prompt of the baseline, then print what the search will download,
record and race, with the minutes each phase will take on this machine (autotune.search.plan), and stop.

Nothing is downloaded and nothing is stored: the inputs are checked as a search checks them, offline,
the files the search would download are priced from the hub's metadata (when the hub answers), and
the storage is never opened. The pace is the baseline's on the arbiter (llama-server when one resolves)
on the mix's first prompt, with that server's start-up; `--plan-tok-s` gives a pace instead, for a
machine where no target is on disk yet.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from autotune.engines import choose_engine, create_engine
from autotune.errors import ModelFileError, UsageError
from autotune.measure.prompts import PromptMix, default_mix_path, load_prompt_mix
from autotune.models.candidates import Candidates
from autotune.models.files import ModelFiles, missing_hub_files
from autotune.models.hub import download_line, download_sizes, format_size, hub_cache_dir
from autotune.search.plan import Pace, Workload, files_by_role, plan_line, plan_phases
from autotune.search.search import ConfirmOptions, SearchInputs, SearchOptions, check_inputs
from autotune.settings import default_models_dir
from autotune.spec.config import SpecConfig
from autotune.spec.space import load_model_space

#: the server start priced where the pace is given (--plan-tok-s), not measured
ASSUMED_SERVER_START_S = 10.0


def plan_search(options: SearchOptions, race_options: ConfirmOptions, *, server_bin: str | None,
                note: Callable[[str], None], assume_tok_s: float | None = None) -> list[str]:
    """The plan's lines (module docstring): the download, the workload, each phase, the total."""
    inputs = _inputs(options)
    missing = missing_hub_files(inputs.space, options.models_dir or default_models_dir())
    sizes = download_sizes(missing, offline=options.offline)
    arbiter = choose_engine(None, server_bin=server_bin)
    drafts = {t: [d for _, d in pairs] for t, pairs in inputs.candidates.pairs.items()}
    for hub_file in missing:
        if hub_file.role.startswith("drafts."):
            drafts.setdefault(hub_file.role.removeprefix("drafts."), []).append(hub_file.filename)
    targets = [*inputs.candidates.targets, *(f.filename for f in missing if f.role == "model")]
    work = Workload.of(inputs.space, files_by_role(targets, drafts), prompts=len(inputs.mix),
                       max_tokens=options.settings.max_tokens, race_top=race_options.top,
                       race_budget=race_options.budget, server_arbiter=arbiter == "server",
                       sizes={f.filename: s for f, s in sizes.items() if s is not None})
    pace, measured = _pace(options, inputs, arbiter, server_bin, assume_tok_s, note)
    lines = [download_line(missing, sizes, hub_cache_dir()) if missing else "download: nothing, every file is on disk",
             f"workload: {len(work.targets)} target(s), {len(inputs.mix)} prompts x {work.max_tokens} tokens; "
             f"{len(work.draft_models)} draft model(s) (chains), {len(work.block_drafts)} DFlash/DSpark draft(s) "
             f"({sum(d.block_sizes for d in work.block_drafts)} block sizes); race of {work.race_top} finalists "
             f"with the references, up to {work.race_budget.describe()}",
             f"pace: {measured}"]
    phases = plan_phases(work, pace)
    lines += [f"  {p.name:<12} {p.tokens:>10,} tokens {p.decodes:>10,} decodes {p.server_starts:>4} server starts "
              f"{'≤' if p.bound else ' '}{p.seconds / 60:7.1f} min" for p in phases]
    lines.append(plan_line(phases) + (f"; the download ({format_size(sum(sizes.values()))}) comes first"
                                      if missing and None not in sizes.values() else ""))
    return lines


def _inputs(options: SearchOptions) -> SearchInputs:
    """The search's inputs, checked offline; where no target of a hub space is on disk yet, the space and
    the bundled mix with no files (the plan then prices what the search would download)."""
    try:
        return check_inputs(replace(options, offline=True), lambda line: None)
    except ModelFileError:
        space = load_model_space(options.model, options.space_file)
        if not missing_hub_files(space, options.models_dir or default_models_dir()) or options.target_file:
            raise
    mix = load_prompt_mix(options.prompts_file or default_mix_path(())[0]).take(per_category=options.per_category)
    return SearchInputs(space=space, mix=mix, files=ModelFiles(()), candidates=Candidates(()))


def _pace(options: SearchOptions, inputs, arbiter: str, server_bin: str | None, assume_tok_s: float | None,
          note: Callable[[str], None]) -> tuple[Pace, str]:
    """The pace and how it was found: `assume_tok_s`, or the first target's baseline on the mix's first prompt."""
    if assume_tok_s is not None:
        return (Pace(assume_tok_s, ASSUMED_SERVER_START_S),
                f"{assume_tok_s:g} tok/s as given (--plan-tok-s), {ASSUMED_SERVER_START_S:g} s a server start (assumed)")
    if not inputs.candidates.targets:
        raise UsageError(f"--plan: no target of {options.model} is on disk to measure; give the pace with "
                         "--plan-tok-s N (the baseline's decode tok/s on this machine)")
    target = inputs.candidates.targets[0]
    one = PromptMix(inputs.mix.source, inputs.mix.prompts[:1])
    settings, model = options.settings, inputs.space.model
    note(f"plan: measuring the baseline of {target.name} on one prompt on the {arbiter} engine")
    with create_engine(arbiter, context_size=model.context_size, threads=settings.threads, server_bin=server_bin,
                       base_flags=model.base_flags, sampling=settings.sampling) as engine:
        engine.prepare(SpecConfig(target), one, max_tokens=settings.max_tokens)
        measured = engine.measure(SpecConfig(target), one, max_tokens=settings.max_tokens)
    start_s = measured.startup_ms / 1000
    return (Pace(measured.mix_tok_s, start_s),
            f"{measured.mix_tok_s:.1f} tok/s, the baseline of {target.name} on one prompt on the {arbiter} engine"
            + (f", {start_s:.1f} s a server start" if arbiter == "server" else ""))
