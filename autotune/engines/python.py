"""In-process engine: real generation through llama-cpp-python, with a lean speculation loop.

Each step the target verifies `[last] + draft` in one batch decode, keeps the longest prefix of the
draft that equals its own greedy choices plus one token of its own, and rolls the rejected rest
out of its KV cache. Verification is exact greedy matching, so the output is the baseline's.
draft-dspark (linear or PCTree) runs its own loop (autotune.engines.dspark): the target hands its
layer inputs to the draft after every decode, and a tree is verified with several sequence ids.
Models load once and stay loaded across trials; only the (target, draft) pair in use is kept.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from autotune.engines._llama import Context, LoadedModel, default_threads, llama_build
from autotune.engines._prompt_tokens import PromptTokens
from autotune.engines.base import Engine, ProgressCallback
from autotune.engines.drafters import DraftModelDrafter, Drafter, NgramSimpleDrafter
from autotune.engines.dspark import DSparkDrafter, DSparkPair, dspark_available
from autotune.lossless import TieEvidence
from autotune.measurement import GenerationResult, Measurement, extend_until_stop, timed_result
from autotune.prompts import Prompt, PromptMix
from autotune.spec import SpecConfig

WARMUP_TOKENS = 8
_LEADING_LOGITS = 32  # logits kept per step of a replay, and compared between decode paths for noise

#: (prompt, prompt tokens, max tokens) -> the prompt's generation
Generate = Callable[[Prompt, list[int], int], GenerationResult]


class PythonEngine(Engine):
    name = "python"

    def __init__(self, *, context_size: int = 4096, threads: int | None = None):
        self.context_size = context_size
        self.threads = threads or default_threads()
        self._models: dict[Path, LoadedModel] = {}
        # (role, path) -> Context; ("dspark", target, draft) -> DSparkPair (its own target context)
        self._contexts: dict[tuple, Context | DSparkPair] = {}
        self._prompts = PromptTokens(context_size)
        self._replays: dict[tuple[Path, str], tuple[list[int], list[tuple[np.ndarray, np.ndarray]]]] = {}
        self._max_tokens = 0

    @property
    def runnable_spec_types(self) -> frozenset[str]:
        types = {"none", "draft-simple", "ngram-simple"}
        return frozenset(types | {"draft-dspark"} if dspark_available() else types)

    @property
    def build_info(self) -> str:
        return llama_build()

    def load(self, config: SpecConfig) -> None:
        """Load the models `config` needs (and free the others), so a bad file fails before any trial."""
        needed = {config.target} | ({config.draft} if config.draft else set())
        for path in [p for p in self._models if p not in needed]:
            for key in [k for k in self._contexts if path in k[1:]]:
                self._contexts.pop(key).free()
            self._models.pop(path).free()
            self._replays = {k: v for k, v in self._replays.items() if k[0] != path}
        for path in needed:
            if path not in self._models:
                self._models[path] = LoadedModel(path)

    def prepare(self, config: SpecConfig, mix: PromptMix, *, max_tokens: int) -> None:
        self.load(config)
        if config.spec_type == "draft-dspark":
            self._dspark_pair(config)  # a draft that cannot feed on this target fails here, before any trial
        for prompt in mix:
            self._prompts.tokens(config.target, prompt, max_tokens)

    def measure(
        self,
        config: SpecConfig,
        mix: PromptMix,
        *,
        max_tokens: int,
        on_prompt: ProgressCallback | None = None,
    ) -> Measurement:
        self.load(config)
        self._max_tokens = max_tokens
        generate = self._generator(config)
        prompts = [(prompt, self._prompts.tokens(config.target, prompt, max_tokens)) for prompt in mix]
        generate(prompts[0][0], prompts[0][1], min(WARMUP_TOKENS, max_tokens))
        results = []
        for index, (prompt, tokens) in enumerate(prompts):
            result = generate(prompt, tokens, max_tokens)
            results.append(result)
            if on_prompt is not None:
                on_prompt(index, result)
        return Measurement(results)

    def tie_evidence(
        self, target: Path, prompt: Prompt, generated: Sequence[int], token_a: int, token_b: int
    ) -> TieEvidence:
        """The one-token-at-a-time margin comes from a cached greedy replay of the whole baseline
        output (one per prompt and study, however many trials part from it); the batched margin from
        one prefill of prompt + `generated`. A token outside the replay's leading logits counts as
        the lowest of them, a lower bound far above any tie."""
        leading_ids, leading_logits = self._replay(target, prompt, generated)[len(generated)]
        one_by_one = dict(zip(leading_ids.tolist(), leading_logits.tolist()))
        context = self._context("target", target)
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
        context = self._context("target", target)
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
        for context in self._contexts.values():
            context.free()
        for model in self._models.values():
            model.free()
        self._contexts.clear()
        self._models.clear()

    def _context(self, role: str, path: Path) -> Context:
        key = (role, path)
        if key not in self._contexts:
            self._contexts[key] = Context(self._models[path], n_ctx=self.context_size, n_threads=self.threads)
        return self._contexts[key]

    def _generator(self, config: SpecConfig) -> Generate:
        """The generation loop for `config`: DSpark runs its own (layer features, trees)."""
        if config.spec_type == "draft-dspark":
            return DSparkDrafter(self._dspark_pair(config), config).generate
        target = self._context("target", config.target)
        drafter = self._drafter(config)
        return lambda prompt, tokens, max_tokens: self._generate(target, drafter, prompt, tokens, max_tokens)

    def _dspark_pair(self, config: SpecConfig) -> DSparkPair:
        """The target and DSpark draft of `config` bound for in-process drafting (kept across trials)."""
        key = ("dspark", config.target, config.draft)
        if key not in self._contexts:
            self._contexts[key] = DSparkPair(
                self._models[config.target], self._models[config.draft], n_ctx=self.context_size, n_threads=self.threads
            )
        return self._contexts[key]

    def _drafter(self, config: SpecConfig) -> Drafter | None:
        if config.spec_type == "ngram-simple":
            return NgramSimpleDrafter(config)
        if config.spec_type == "draft-simple":
            return DraftModelDrafter(self._context("draft", config.draft), config)
        return None

    @staticmethod
    def _generate(
        target: Context, drafter: Drafter | None, prompt: Prompt, tokens: list[int], max_tokens: int
    ) -> GenerationResult:
        model = target.model
        target.clear()
        if drafter is not None:
            drafter.begin(tokens)
        start = time.perf_counter()
        last = int(target.decode(tokens, 0)[-1].argmax())
        first_token_at = time.perf_counter()
        history = list(tokens)  # every token in the target's KV cache
        generated = [last]
        drafted = accepted = verify_steps = 0
        while len(generated) < max_tokens and not model.is_eog(last):
            room = max_tokens - len(generated) - 1
            asked = drafter is not None and room > 0
            draft = drafter.draft(history, last, room) if asked else []
            logits = target.decode([last] + draft, len(history), n_outputs=len(draft) + 1)
            predicted = logits.argmax(axis=1).tolist()
            n_ok = 0
            while n_ok < len(draft) and draft[n_ok] == predicted[n_ok]:
                n_ok += 1
            if asked:
                drafter.accept(n_ok)
            if draft:
                drafted += len(draft)
                accepted += n_ok
                verify_steps += 1
                if n_ok < len(draft):
                    target.truncate(len(history) + 1 + n_ok)
            history.append(last)
            history.extend(draft[:n_ok])
            extend_until_stop(generated, draft[:n_ok] + [predicted[n_ok]], max_tokens, model.is_eog)
            last = generated[-1]
        return timed_result(prompt.id, prompt.category, len(tokens), start, first_token_at, time.perf_counter(),
                            generated, drafted, accepted, verify_steps)
