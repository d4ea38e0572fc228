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

import llama_cpp

from autotune.engines._llama import LoadedModel, last_log_error
from autotune.errors import ModelFileError, UsageError
from autotune.prompts import Prompt


class VocabOnlyModel(LoadedModel):
    """A LoadedModel without weights: tokenizer, chat template and special-token flags only."""

    def __init__(self, path: Path):
        if not path.is_file():
            raise ModelFileError(f"model file not found: {path}")
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.path = path
        self.ptr = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self.ptr:
            raise ModelFileError(f"{path}: llama.cpp cannot load this GGUF ({last_log_error()}); re-download or re-convert it")
        self.vocab = llama_cpp.llama_model_get_vocab(self.ptr)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))


class PromptTokens:
    """Prompt token ids per (model file, prompt text), with the context-size check of the python engine."""

    def __init__(self, context_size: int):
        self.context_size = context_size
        self._models: dict[Path, VocabOnlyModel] = {}
        self._tokens: dict[tuple[Path, str], list[int]] = {}

    def model(self, path: Path) -> VocabOnlyModel:
        if path not in self._models:
            self._models[path] = VocabOnlyModel(path)
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

    def close(self) -> None:
        for model in self._models.values():
            model.free()
        self._models.clear()
        self._tokens.clear()
