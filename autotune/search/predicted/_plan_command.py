"""`autotune search --plan`: measure one prompt of the baseline, then print what the search will download,
record and race, with the minutes each phase will take on this machine (autotune.search.plan), and stop.

Nothing is downloaded and nothing is stored: the inputs are checked as a search checks them, offline,
the files the search would download are priced from the hub's metadata (when the hub answers: offline
or out of reach their sizes are unknown; a draft the hub does not have is left out, as the search leaves
it out), and the storage is never opened. The pace is the baseline's on the arbiter (llama-server when
one resolves) on the mix's first prompt, with that server's start-up; where no target is on disk yet, the
pace the search space states (`model.plan_tok_s`), or `--plan-tok-s`'s. A search with `--budget` measures
the same pace first (`measure_pace`), so that it can refuse a budget too small before it measures anything
else.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from autotune.errors import ModelFileError
from autotune.measure.prompts import default_mix_path, load_prompt_mix
from autotune.models.candidates import Candidates
from autotune.models.files import ModelFiles, missing_hub_files
from autotune.models.hub import ask_hub, download_line, format_size, hub_cache_dir, without_hub_files
from autotune.search.inputs import RaceOptions, SearchInputs, SearchOptions, check_inputs
from autotune.search.plan import SearchBudget, budget_line, make_plan, plan_line
from autotune.search.predicted._space import replays_at_most
from autotune.settings import default_models_dir
from autotune.spec.space import load_model_space


def plan_search(
    options: SearchOptions,
    race_options: RaceOptions,
    *,
    server_bin: str | None,
    note: Callable[[str], None],
    assume_tok_s: float | None = None,
    predict_trials: int = 400,
    budget: SearchBudget | None = None,
) -> list[str]:
    """The plan's lines (module docstring): the download, the workload, each phase, the total; `budget` is
    --budget's (None: the space's default)."""
    inputs = _inputs(options)
    answer = ask_hub(
        missing_hub_files(inputs.space, options.models_dir or default_models_dir()), offline=options.offline
    )
    for line in answer.left_out:  # as the search leaves them out: not downloaded, not planned
        note(line)
    inputs = replace(inputs, space=without_hub_files(inputs.space, answer.absent))
    missing, sizes = answer.files, answer.sizes
    plan = make_plan(
        options,
        inputs,
        race_options,
        budget,
        server_bin=server_bin,
        note=note,
        priced=True,
        replayed=replays_at_most(inputs.space, inputs, predict_trials),
        assume_tok_s=assume_tok_s,
        missing=missing,
        sizes={f.filename: s for f, s in sizes.items() if s is not None},
    )
    work = plan.work
    lines = [
        download_line(missing, sizes, hub_cache_dir()) if missing else "download: nothing, every file is on disk",
        f"workload: {len(work.targets)} target(s), {len(inputs.mix)} prompts x {work.max_tokens} tokens; "
        f"{len(work.draft_models)} draft model(s) (chains), {len(work.block_drafts)} DFlash/DSpark draft(s) "
        f"({sum(d.block_sizes for d in work.block_drafts)} block sizes); race of {work.race_top} finalists "
        f"with the references, up to {work.race_budget.describe()}",
        f"pace: {plan.pace_line}",
    ] + ([budget_line(plan.budget, work)] if plan.budget is not None else [])
    phases = plan.phases()
    lines += [
        f"  {p.name:<12} {p.tokens:>10,} tokens {p.decodes:>10,} decodes {p.server_starts:>4} server starts "
        f"{'≤' if p.bound else ' '}{p.seconds / 60:7.1f} min"
        for p in phases
    ]
    lines.append(
        plan_line(phases)
        + (
            f"; the download ({format_size(sum(sizes.values()))}) comes first"
            if missing and None not in sizes.values()
            else ""
        )
    )
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
