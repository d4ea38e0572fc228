"""The pace a plan is priced at: the baseline of the first target on the mix's first prompt on the arbiter
(`measure_pace`), or a pace that is stated (the space's `model.plan_tok_s`) or given (`--plan-tok-s`), and what a
predicted search of the checked inputs measures (`search_workload`).

A pace that is stated or given prices the rest with this machine's prices where
examples/benchmarks/gpu_prices.py measured them (autotune.search.prices; the pace line names the file and
its day), else with what ASSUMED_SERVER_START_S and ASSUMED_REQUEST_S assume. The decode step stays the
stated one: the plan cannot read the layer count of a target not yet downloaded, so the prices' per-layer
step is not scaled to it. From the prices: the llama-server start (of the file gpu_prices started, 6.5 GB at
Qwen3-8B's shapes, whatever the target's size); a prompt's processing and first token,
the prompt (its bytes over PROMPT_BYTES_PER_TOKEN) at the measured ratio of a prefilled token to a decode
step, both per layer at the measured width, so that the layer count cancels (the measured step carries the
output head's share, so the ratio errs low by up to that share), then one step; and a DFlash/DSpark
recording decode at the measured block or injection of the most rows (`Pace.block_s`).
"""

from __future__ import annotations

import math
from typing import Callable

from autotune.engines import create_engine
from autotune.errors import UsageError
from autotune.hardware import listed_gpus
from autotune.measure.device_lock import device_lock
from autotune.measure.prompts import PromptMix
from autotune.models.files import missing_hub_files
from autotune.models.hub import HubFile
from autotune.search.inputs import RaceOptions, SearchInputs, SearchOptions
from autotune.search.plan._phases import Pace, Workload, files_by_role
from autotune.search.plan._prices import load_prices, prices_path
from autotune.settings import default_models_dir
from autotune.spec.config import SpecConfig
from autotune.spec.space import SearchSpace, load_model_space

#: what a pace that is given (--plan-tok-s, model.plan_tok_s), not measured, assumes of the rest: an 8B
#: target's llama-server start from a warm page cache, and a prompt's processing and first token on a GPU
ASSUMED_SERVER_START_S = 10.0
ASSUMED_REQUEST_S = 0.2
#: the least a small draft model's decode step costs on a GPU, where kernel launches, not the weights, set it:
#: llama-bench's tg128 of a 1.1B Q4_K_M on an RTX 4090 ran 762 tok/s, 1.3 ms a token (geerlingguy/ai-benchmarks
#: issue 43, llama.cpp build 7340); a file-size ratio would price a 0.6B draft of an 8B target at 0.7 ms. Used where
#: a GPU is listed and gpu_prices measured no draft step here (Prices.draft_simple_token_ms)
GPU_DRAFT_STEP_FLOOR_S = 1.3e-3
#: what a prompt's token is taken to be where the plan has no tokenizer: about 4 bytes of English text a token
#: in a BPE vocabulary such as Qwen3's (the bundled mix: 544 bytes a prompt)
PROMPT_BYTES_PER_TOKEN = 4


def search_workload(
    inputs: SearchInputs,
    space: SearchSpace,
    race_options: RaceOptions,
    arbiter: str,
    max_tokens: int,
    replayed: int,
    *,
    missing: list[HubFile] = (),
    sizes: dict[str, int] | None = None,
) -> Workload:
    """What a predicted search of `space` over `inputs`' files (and the hub files still `missing`) measures, its
    replay predicting `replayed` configurations at most."""
    drafts = {t: [d for _, d in pairs] for t, pairs in inputs.candidates.pairs.items() if t in space.spec_types}
    for hub_file in missing:
        if hub_file.role.startswith("drafts."):
            drafts.setdefault(hub_file.role.removeprefix("drafts."), []).append(hub_file.filename)
    targets = [*inputs.candidates.targets, *(f.filename for f in missing if f.role == "model")]
    return Workload.of(
        space,
        files_by_role(targets, drafts),
        prompts=len(inputs.mix),
        max_tokens=max_tokens,
        race_top=race_options.top,
        race_budget=race_options.budget,
        server_arbiter=arbiter == "server",
        sizes=sizes,
        replayed=replayed,
        categories=len({p.category for p in inputs.mix}),
    )


def measure_pace(
    options: SearchOptions,
    inputs: SearchInputs,
    arbiter: str,
    server_bin: str | None,
    assume_tok_s: float | None,
    note: Callable[[str], None],
) -> tuple[Pace, str]:
    """The pace and how it was found: `assume_tok_s`, the first target's baseline on the mix's first prompt,
    or, with no target on disk, the pace the space states."""
    first = inputs.candidates.targets[0].name if inputs.candidates.targets else _first_hub_target(options)
    if assume_tok_s is not None:
        pace, rest = stated_pace(assume_tok_s, first, inputs.mix)
        return pace, f"{assume_tok_s:g} tok/s as given (--plan-tok-s) for {first}; {rest}"
    if not inputs.candidates.targets:
        stated = inputs.space.model.plan_tok_s
        if stated is None:
            raise UsageError(
                f"--plan: no target of {options.model} is on disk to measure, and its search space states "
                "no pace (model.plan_tok_s); give one with --plan-tok-s N (the baseline's decode tok/s)"
            )
        pace, rest = stated_pace(stated, first, inputs.mix)
        return (
            pace,
            f"{stated:g} tok/s for {first}, the pace {options.model}'s search space states (model.plan_tok_s), "
            f"since no target is on disk to measure (--plan-tok-s N gives this machine's); {rest}",
        )
    target = inputs.candidates.targets[0]
    one = PromptMix(inputs.mix.source, inputs.mix.prompts[:1])
    settings, model = options.settings, inputs.space.model
    note(f"plan: measuring the baseline of {target.name} on one prompt on the {arbiter} engine")
    with (
        device_lock(lambda device: note(f"plan: waiting: another autotune search is measuring on {device}")),
        create_engine(
            arbiter,
            context_size=model.context_size,
            threads=settings.threads,
            server_bin=server_bin,
            base_flags=model.base_flags,
            sampling=settings.sampling,
        ) as engine,
    ):
        engine.prepare(SpecConfig(target), one, max_tokens=settings.max_tokens)
        measured = engine.measure(SpecConfig(target), one, max_tokens=settings.max_tokens)
    start_s = measured.startup_ms / 1000
    return (
        Pace(
            measured.mix_tok_s,
            start_s,
            measured.ttft_ms / 1000,
            measured_on=target.name,
            prefill_tok_s=measured.prompt_tok_s or None,
            draft_floor_s=draft_step_floor_s(),
        ),
        f"{measured.mix_tok_s:.1f} tok/s, the baseline of {target.name} on one prompt on the {arbiter} engine"
        + (f", {start_s:.1f} s a server start" if arbiter == "server" else ""),
    )


_ASSUMED = (
    f"{ASSUMED_SERVER_START_S:g} s a server start, {ASSUMED_REQUEST_S:g} s a prompt's processing and "
    f"{GPU_DRAFT_STEP_FLOOR_S * 1000:g} ms at least a draft model's step (assumed)"
)


def draft_step_floor_s() -> float | None:
    """The least a draft model's decode step costs on this machine: gpu_prices' measured draft step where it
    measured one, else GPU_DRAFT_STEP_FLOOR_S where a GPU is listed; None on a CPU (a step there is its weights')."""
    prices = load_prices(prices_path())
    if prices is not None:
        return prices.draft_simple_token_ms / 1000
    return GPU_DRAFT_STEP_FLOOR_S if listed_gpus() else None


def stated_pace(tok_s: float, first: str | None, mix: PromptMix) -> tuple[Pace, str]:
    """The Pace of a stated decode pace and what the rest is priced with: this machine's prices where a prices
    file exists, else the assumed start and request (module docstring)."""
    path = prices_path()
    prices = load_prices(path)
    if prices is None:  # a stated pace is a GPU's (the space's plan_tok_s, or --plan-tok-s): its draft steps' floor
        return (
            Pace(
                tok_s,
                ASSUMED_SERVER_START_S,
                ASSUMED_REQUEST_S,
                measured_on=first,
                draft_floor_s=GPU_DRAFT_STEP_FLOOR_S,
            ),
            _ASSUMED,
        )
    step_s = 1.0 / tok_s
    tokens = math.ceil(sum(len(p.text.encode()) for p in mix) / max(1, len(mix)) / PROMPT_BYTES_PER_TOKEN)
    prefill_s = step_s * prices.prefill_share  # a prompt's token
    request_s = step_s + tokens * prefill_s
    return (
        Pace(
            tok_s,
            prices.server_start_s,
            request_s,
            measured_on=first,
            prefill_tok_s=1.0 / prefill_s,
            block_s=prices.block_s,
            draft_floor_s=prices.draft_simple_token_ms / 1000,
        ),
        f"server start {prices.server_start_s:.1f} s, a prompt's processing {request_s:.2f} s (~{tokens} tokens "
        f"at {prices.prefill_share:.3f} of a step, then one), a DFlash/DSpark block {prices.block_s * 1000:.1f} ms: "
        f"this machine's prices, measured by gpu_prices on {prices.measured_on} ({path})",
    )


def _first_hub_target(options: SearchOptions) -> str | None:
    """The first target file a search of `options` would download (the one a stated pace is of)."""
    space = load_model_space(options.model, options.space_file)
    return next(
        (f.filename for f in missing_hub_files(space, options.models_dir or default_models_dir()) if f.role == "model"),
        None,
    )
