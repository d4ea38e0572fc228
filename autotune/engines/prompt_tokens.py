"""The exact prompt tokens both engines generate from, computed from a vocab-only load.

The python engine wraps each prompt in the GGUF's built-in chat template with
`llama_chat_apply_template` (raw text when the file has none) and tokenizes it with special tokens.
llama-server's own `/apply-template` is not a substitute: it renders Jinja and falls back to ChatML
for a file without a template (Gemma 3 270M Q4_K_M gets `<|im_start|>user...` there, raw text in the
python engine). So the server engine reuses `LoadedModel.chat_prompt` and `LoadedModel.tokenize` on
a vocab-only load (no weights, milliseconds) and sends the token ids: both engines then process
the very same tokens, and the context check needs no server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from autotune.errors import UsageError
from autotune.llamacpp.bindings import LoadedModel
from autotune.measure.prompts import Prompt


class PromptTokens:
    """Prompt token ids per (model file, prompt text), with the context-size check of the python engine."""

    def __init__(self, context_size: int):
        self.context_size = context_size
        self._models: dict[Path, LoadedModel] = {}
        self._tokens: dict[tuple[Path, str], list[int]] = {}

    def model(self, path: Path) -> LoadedModel:
        if path not in self._models:
            self._models[path] = LoadedModel(path, vocab_only=True)
        return self._models[path]

    def tokens(self, path: Path, prompt: Prompt, max_tokens: int) -> list[int]:
        key = (path, prompt.text)
        if key not in self._tokens:
            model = self.model(path)
            self._tokens[key] = model.tokenize(model.chat_prompt(prompt.text))
        tokens = self._tokens[key]
        if len(tokens) + max_tokens > self.context_size:
            raise UsageError(
                f"prompt {prompt.id} has {len(tokens)} tokens: with --max-tokens {max_tokens} it needs "
                f"a context of {len(tokens) + max_tokens}, above the search space's context_size {self.context_size}"
            )
        return tokens

    def mix_tokens(self, path: Path, mix: Iterable[Prompt], max_tokens: int) -> list[tuple[Prompt, list[int]]]:
        """Each prompt of `mix` with its tokens on `path`'s vocabulary: the check, before any trial
        (an engine's `prepare`) and again at each (its `measure`), that every prompt fits the context."""
        return [(prompt, self.tokens(path, prompt, max_tokens)) for prompt in mix]

    def close(self) -> None:
        for model in self._models.values():
            model.free()
        self._models.clear()
        self._tokens.clear()
