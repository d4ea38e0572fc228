"""In-process engine: llama-server's generation loop through llama-cpp-python, without HTTP.

Each step the target verifies `[last] + draft` in one batch decode and samples each position with
llama-server's own sampler chain (autotune.engines.sampler), keeping the draft while the sampled
token equals it, plus one token of its own; the rejected rest is rolled out of its KV cache. At
temperature 0 the chain is greedy, so the output is the baseline's. Threads, batch sizes, flash
attention and KV cache types are llama-server's defaults or what the search space's `base_flags` set.
draft-dflash and draft-dspark (linear or PCTree) run their own loop (autotune.engines.dflash.drafter): the
target hands its layer inputs to the draft after every decode, and a tree is verified with several
sequence ids.
Models load once and stay loaded across trials; only the (target, draft) pair in use is kept.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from autotune.engines import memory
from autotune.engines.base import WARMUP_TOKENS, Engine, ProgressCallback
from autotune.engines.dflash.contexts import DFlashPair, dflash_available
from autotune.engines.dflash.drafter import DFlashDrafter
from autotune.engines.drafters.base import Drafter
from autotune.engines.drafters.build import build_drafter
from autotune.engines.drafters.draft_model import DraftModelDrafter
from autotune.engines.memory import ContextShape
from autotune.engines.prompt_tokens import PromptTokens
from autotune.engines.sampler import SamplerChain
from autotune.engines.speculation import speculate
from autotune.errors import ModelFileError, TrialFailure
from autotune.llamacpp.bindings import Context, LoadedModel, llama_build
from autotune.llamacpp.runtime import Runtime, runtime_from_flags
from autotune.measure.lossless import TieEvidence
from autotune.measure.measurement import GenerationResult, Measurement, timed_result
from autotune.measure.prompts import Prompt, PromptMix
from autotune.spec.config import SpecConfig
from autotune.spec.params import SpecParam
from autotune.spec.sampling import GREEDY, Sampling
from autotune.spec.types import CHAINABLE_TYPES, DFLASH_TYPES, combinations_of

#: Parameters only llama-server applies (probabilistic drafting verifies by rejection sampling).
SERVER_ONLY_PARAMS = frozenset({"draft_sampling"})

_LEADING_LOGITS = 32  # logits kept per step of a replay, and compared between decode paths for noise

#: (prompt, prompt tokens, max tokens) -> the prompt's generation
Generate = Callable[[Prompt, list[int], int], GenerationResult]


class PythonEngine(Engine):
    name = "python"

    def __init__(
        self,
        *,
        context_size: int = 4096,
        threads: int | None = None,
        base_flags: Sequence[str] = (),
        sampling: Sampling = GREEDY,
        memory_budget_gib: float | None = None,
    ):
        """`memory_budget_gib` (else `AUTOTUNE_MEMORY_BUDGET_GIB`): count at most this much device memory
        as free, for a device shared with other work (and tests); see `load`."""
        self.context_size = context_size
        budget = memory_budget_gib if memory_budget_gib is not None else os.environ.get("AUTOTUNE_MEMORY_BUDGET_GIB")
        self.memory_budget = None if budget is None else int(float(budget) * memory.GIB)
        self.base_runtime: Runtime = runtime_from_flags(
            base_flags, threads=threads, source="the search space's base_flags"
        )
        self.runtime = self.base_runtime  # the contexts' settings: base_flags with the configuration's [runtime]
        self.sampling = sampling
        self._models: dict[Path, LoadedModel] = {}
        self._samplers: dict[tuple[str, Path], SamplerChain] = {}  # (role, model file)
        # (role, path) -> Context; ("dflash", target, draft) -> DFlashPair (its own target context)
        self._contexts: dict[tuple, Context | DFlashPair] = {}
        self._prompts = PromptTokens(context_size)
        self._replays: dict[tuple[Path, str], tuple[list[int], list[tuple[np.ndarray, np.ndarray]]]] = {}
        self._max_tokens = 0

    @property
    def runnable_spec_types(self) -> frozenset[str]:
        """The single types ported here, and every combination of those that run in this engine's one
        generation loop (CHAINABLE_TYPES, through ChainDrafter). draft-dflash and draft-dspark run their
        own loop (layer features, trees), so their combinations (`--spec-type ngram-mod,draft-dspark`)
        stay server-only."""
        types = set(CHAINABLE_TYPES) | {"none"}
        if dflash_available():
            types.update(DFLASH_TYPES)
        return frozenset(types) | combinations_of(CHAINABLE_TYPES)

    @property
    def build_info(self) -> str:
        return llama_build()

    def supports_param(self, param: SpecParam) -> bool:
        return param.name not in SERVER_ONLY_PARAMS

    def load(self, config: SpecConfig) -> None:
        """Load the models `config` needs (and free the others), so a bad file fails before any trial.

        Only the pair in use stays resident, models and contexts. What is still to load must fit the
        device's free memory (on a GPU, or within the memory budget), or the trial fails with `out of GPU
        memory: needs X GiB, free Y GiB` before llama.cpp allocates anything."""
        needed = {config.target} | ({config.draft} if config.draft else set())
        runtime = self.base_runtime.with_values(dict(config.runtime))
        if runtime != self.runtime:  # threads, batch sizes, flash attention, KV types: new contexts
            for context in self._contexts.values():
                context.free()
            self._contexts.clear()
            self.runtime = runtime
        for path in [p for p in self._models if p not in needed]:
            for key in [k for k in self._contexts if path in k[1:]]:
                self._contexts.pop(key).free()
            for key in [k for k in self._samplers if k[1] == path]:
                self._samplers.pop(key).free()
            self._models.pop(path).free()
            self._replays = {k: v for k, v in self._replays.items() if k[0] != path}
        shapes = self._context_shapes(config)
        for key in [k for k in self._contexts if k not in shapes]:
            self._contexts.pop(key).free()
        self._check_fits(
            [p for p in needed if p not in self._models],
            [shape for key, group in shapes.items() if key not in self._contexts for shape in group],
        )
        for path in needed:
            if path not in self._models:
                self._models[path] = _load_model(path)

    def _check_fits(self, models: list[Path], contexts: list[ContextShape]) -> None:
        if not (models or contexts):
            return
        free, on_gpu = memory.free_bytes()
        if not on_gpu and self.memory_budget is None:
            return  # a CPU build maps its weights from the file: the OS, not this estimate, decides
        needs = memory.estimate(models, contexts)
        if self.memory_budget is not None:
            free = min(free, self.memory_budget)
        if needs > free:
            raise TrialFailure(
                f"out of {'GPU' if on_gpu else 'host'} memory: needs {needs / memory.GIB:.3g} GiB, "
                f"free {free / memory.GIB:.3g} GiB"
            )

    def _context_shapes(self, config: SpecConfig) -> dict[tuple, list[ContextShape]]:
        """The contexts `config` runs on, by key in `_contexts`, as memory.estimate sees them."""
        rt = self.runtime
        target = ContextShape(config.target, self.context_size, rt.ubatch_size, rt.cache_type_k, rt.cache_type_v)
        if config.spec_type in DFLASH_TYPES:  # the draft decodes its block as one ubatch of n_batch
            draft = ContextShape(config.draft, self.context_size, rt.batch_size, rt.cache_type_k, rt.cache_type_v)
            return {("dflash", config.target, config.draft): [target, draft]}
        shapes = {("target", config.target): [target]}
        if config.draft is not None:
            d = rt.for_draft()
            shapes[("draft", config.draft)] = [
                ContextShape(config.draft, self.context_size, d.ubatch_size, d.cache_type_k, d.cache_type_v)
            ]
        return shapes

    def prepare(self, config: SpecConfig, mix: PromptMix, *, max_tokens: int) -> None:
        self.load(config)
        if config.spec_type in DFLASH_TYPES:
            self.dflash_pair(config)  # a draft that cannot feed on this target fails here, before any trial
        self._prompts.mix_tokens(config.target, mix, max_tokens)

    def measure(
        self,
        config: SpecConfig,
        mix: PromptMix,
        *,
        max_tokens: int,
        on_prompt: ProgressCallback | None = None,
        deadline_s: float | None = None,  # checked between prompts by on_prompt's caller
    ) -> Measurement:
        self.load(config)
        self._max_tokens = max_tokens
        generate = self._generator(config)
        prompts = self._prompts.mix_tokens(config.target, mix, max_tokens)
        generate(prompts[0][0], prompts[0][1], min(WARMUP_TOKENS, max_tokens))
        results = []
        for index, (prompt, tokens) in enumerate(prompts):
            result = generate(prompt, tokens, max_tokens)
            results.append(result)
            if on_prompt is not None:
                on_prompt(index, result)
        return Measurement(results)

    def prompt_tokens(self, target: Path, prompt: Prompt, max_tokens: int) -> list[int]:
        """The token ids this engine (and the server engine) generate `prompt` from."""
        return self._prompts.tokens(target, prompt, max_tokens)

    def model(self, path: Path) -> LoadedModel:
        """A model `load` loaded."""
        return self._models[path]

    def tie_evidence(
        self, target: Path, prompt: Prompt, generated: Sequence[int], token_a: int, token_b: int
    ) -> TieEvidence:
        """The one-token-at-a-time margin comes from a cached greedy replay of the whole baseline
        output (one per prompt and study, however many trials part from it); the batched margin from
        one prefill of prompt + `generated`. A token outside the replay's leading logits counts as
        the lowest of them, a lower bound far above any tie."""
        leading_ids, leading_logits = self._replay(target, prompt, generated)[len(generated)]
        one_by_one = dict(zip(leading_ids.tolist(), leading_logits.tolist()))
        context = self.context("target", target)
        context.clear()
        batched = context.decode(self._prompts.tokens(target, prompt, 0) + list(generated), 0)[-1]
        difference = leading_logits - batched[leading_ids]
        return TieEvidence(
            margin_one_by_one=one_by_one[token_a] - one_by_one.get(token_b, float(leading_logits.min())),
            margin_batched=float(batched[token_a] - batched[token_b]),
            noise_rms=float(np.sqrt(np.mean((difference - difference.mean()) ** 2))),
        )

    def _replay(self, target: Path, prompt: Prompt, generated: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Leading logits (ids, values) at each step of a greedy one-token-at-a-time run through `generated`."""
        key = (target, prompt.text)
        cached = self._replays.get(key)
        if cached is not None and cached[0][: len(generated)] == list(generated) and len(cached[1]) > len(generated):
            return cached[1]
        context = self.context("target", target)
        tokens = self._prompts.tokens(target, prompt, 0)
        context.clear()
        row = context.decode(tokens, 0)[-1]
        followed: list[int] = []
        leading = []
        while True:
            ids = np.argpartition(row, -_LEADING_LOGITS)[-_LEADING_LOGITS:]
            leading.append((ids, row[ids].copy()))
            if len(leading) > max(len(generated), self._max_tokens - 1):
                break
            token = generated[len(followed)] if len(followed) < len(generated) else int(row.argmax())
            row = context.decode([token], len(tokens) + len(followed))[-1]
            followed.append(token)
        self._replays[key] = (followed, leading)
        return leading

    def close(self) -> None:
        for sampler in self._samplers.values():
            sampler.free()
        for context in self._contexts.values():
            context.free()
        for model in self._models.values():
            model.free()
        self._samplers.clear()
        self._contexts.clear()
        self._models.clear()

    def context(self, role: str, path: Path) -> Context:
        """The loaded model `path`'s context as `role` ("target" or "draft": the draft's KV cache types),
        kept across measurements; the cost model and the replay's draft chains decode on these too."""
        key = (role, path)
        if key not in self._contexts:
            runtime = self.runtime.for_draft() if role == "draft" else self.runtime
            self._contexts[key] = Context(self._models[path], n_ctx=self.context_size, runtime=runtime)
        return self._contexts[key]

    def sampler(self, role: str, path: Path) -> SamplerChain:
        """The request's chain over the target `path` (reset at each generation), or a draft's chain."""
        key = (role, path)
        if key not in self._samplers:
            model = self._models[path]
            self._samplers[key] = (
                SamplerChain.for_request(model.vocab, model.n_vocab, self.sampling)
                if role == "target"
                else SamplerChain.for_greedy_draft(model.vocab, model.n_vocab)
            )
        return self._samplers[key]

    def _generator(self, config: SpecConfig) -> Generate:
        """The generation loop for `config`: DFlash and DSpark run their own (layer features, trees)."""
        sampler = self.sampler("target", config.target)
        if config.spec_type in DFLASH_TYPES:
            return DFlashDrafter(self.dflash_pair(config), config, sampler).generate
        target = self.context("target", config.target)
        drafter = self._drafter(config)
        return lambda prompt, tokens, max_tokens: self._generate(target, sampler, drafter, prompt, tokens, max_tokens)

    def dflash_pair(self, config: SpecConfig) -> DFlashPair:
        """The target and DFlash/DSpark draft of `config` bound for in-process drafting (kept across trials)."""
        key = ("dflash", config.target, config.draft)
        if key not in self._contexts:
            self._contexts[key] = DFlashPair(
                self._models[config.target], self._models[config.draft], n_ctx=self.context_size, runtime=self.runtime
            )
        return self._contexts[key]

    def _drafter(self, config: SpecConfig) -> Drafter | None:
        return build_drafter(
            config,
            lambda: DraftModelDrafter(self.context("draft", config.draft), self.sampler("draft", config.draft), config),
        )

    @staticmethod
    def _generate(
        target: Context,
        sampler: SamplerChain,
        drafter: Drafter | None,
        prompt: Prompt,
        tokens: list[int],
        max_tokens: int,
    ) -> GenerationResult:
        model = target.model
        target.clear()
        sampler.reset()
        start = time.perf_counter()
        target.decode(tokens, 0)
        if drafter is not None:  # as llama-server: the draft mirrors the prompt batch, then begin
            drafter.process(tokens, 0)
            drafter.begin(tokens)
        last = sampler.sample(target, -1)
        first_token_at = time.perf_counter()

        def verify(last: int, draft: list[int], position: int) -> list[int]:
            target.decode([last] + draft, position, n_outputs=len(draft) + 1)
            emitted = sampler.sample_and_accept(target, draft, model.is_eog)
            if len(emitted) - 1 < len(draft):
                target.truncate(position + len(emitted))  # the rejected tail leaves the KV cache
            return emitted

        generated = [last]
        steps = speculate(
            drafter, verify, history=list(tokens), generated=generated, max_tokens=max_tokens, is_eog=model.is_eog
        )
        return timed_result(
            prompt.id,
            prompt.category,
            len(tokens),
            start,
            first_token_at,
            time.perf_counter(),
            generated,
            steps.drafted,
            steps.accepted,
            steps.verify_steps,
        )


def _load_model(path: Path) -> LoadedModel:
    """A model llama.cpp could not allocate (the estimate missed) fails its trial, not the study as bad input."""
    try:
        return LoadedModel(path)
    except ModelFileError as exc:
        if "unable to allocate" in str(exc) or "out of memory" in str(exc):
            raise TrialFailure(f"out of GPU memory: {exc}") from exc
        raise
