"""A thin, allocation-free layer over llama-cpp-python's low-level API: models, contexts, batches.

The generic `llama_cpp.Llama` class copies and samples the full logits of every token in Python;
this layer decodes a batch and hands back a view of exactly the logits rows asked for, so the
speculation loop above it stays lean.
"""

from __future__ import annotations

import ctypes
from collections import deque
from pathlib import Path

import llama_cpp
import numpy as np

from autotune.errors import EngineError, ModelFileError
from autotune.interrupts import deferred, held
from autotune.llamacpp.runtime import Runtime

_log_tail: deque[str] = deque(maxlen=40)


@llama_cpp.llama_log_callback
def _capture_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """Keep llama.cpp's log quiet but at hand, so an error message can quote why a load failed.

    A stop signal is held meanwhile: an exception raised in a ctypes callback is printed and lost."""
    with held():
        line = text.decode("utf-8", errors="replace").rstrip()
        if line:
            _log_tail.append(line)


llama_cpp.llama_log_set(_capture_log, ctypes.c_void_p(0))
llama_cpp.llama_backend_init()


def last_log_error() -> str:
    """The most telling recent llama.cpp log line (an error if there is one)."""
    for line in reversed(_log_tail):
        if "error" in line.lower() or "failed" in line.lower():
            return line.strip()
    return _log_tail[-1].strip() if _log_tail else "no log output"


def llama_build() -> str:
    """Which llama.cpp this process runs: llama-cpp-python's version and the ggml build."""
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip()
    return f"llama-cpp-python {llama_cpp.__version__} ({info})"


class LoadedModel:
    """One GGUF loaded with every layer offloaded to the GPU when there is one, or (`vocab_only`)
    only its tokenizer, chat template and special-token flags, which loads in milliseconds."""

    def __init__(self, path: Path, *, vocab_only: bool = False):
        if not path.is_file():
            raise ModelFileError(f"model file not found: {path}")
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = -1  # negative: all layers (a CPU build ignores it)
        params.vocab_only = vocab_only
        self.path = path
        with deferred():  # a load logs all along: see _capture_log
            self.ptr = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self.ptr:
            raise ModelFileError(
                f"{path}: llama.cpp cannot load this GGUF ({last_log_error()}); re-download or re-convert it"
            )
        self.vocab = llama_cpp.llama_model_get_vocab(self.ptr)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def chat_prompt(self, user_text: str) -> str:
        """`user_text` as one user turn in the model's own chat template (unchanged if it has none)."""
        template = llama_cpp.llama_model_chat_template(self.ptr, None)
        if not template:
            return user_text
        message = llama_cpp.llama_chat_message(role=b"user", content=user_text.encode("utf-8"))
        messages = (llama_cpp.llama_chat_message * 1)(message)
        size = len(user_text.encode("utf-8")) * 2 + 512
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_chat_apply_template(template, messages, 1, True, buf, size)
            if n < 0:
                return user_text
            if n <= size:
                return buf.raw[:n].decode("utf-8", errors="replace")
            size = n
        return user_text

    def tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 16
        tokens = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), tokens, capacity, True, True)
        if n < 0:
            raise EngineError(f"{self.path.name}: tokenizing a prompt failed")
        return list(tokens[:n])

    def free(self) -> None:
        if self.ptr:
            llama_cpp.llama_model_free(self.ptr)
            self.ptr = None


FLASH_ATTN_TYPES = {
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
}


def context_params(n_ctx: int, runtime: Runtime, *, n_batch: int | None = None, n_ubatch: int | None = None):
    """llama_context_params as llama-server sets them from `runtime` (threads, batch sizes, flash
    attention, KV cache types)."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = n_batch or runtime.batch_size
    params.n_ubatch = min(n_ubatch or runtime.ubatch_size, params.n_batch)
    params.n_threads = runtime.n_threads
    params.n_threads_batch = runtime.n_threads_batch
    params.flash_attn_type = FLASH_ATTN_TYPES[runtime.flash_attn]
    params.type_k = getattr(llama_cpp, f"GGML_TYPE_{runtime.cache_type_k.upper()}")
    params.type_v = getattr(llama_cpp, f"GGML_TYPE_{runtime.cache_type_v.upper()}")
    params.no_perf = True
    return params


def new_context(model: LoadedModel, params) -> llama_cpp.llama_context_p:
    """`llama_init_from_model`, with stop signals held while it logs (see _capture_log)."""
    with deferred():
        return llama_cpp.llama_init_from_model(model.ptr, params)


class Context:
    """A llama.cpp context with a reusable one-sequence batch; `n_seq_max` > 1 (tree verification)
    gives a unified KV cache shared by that many sequence ids."""

    def __init__(self, model: LoadedModel, *, n_ctx: int, runtime: Runtime, n_seq_max: int = 1):
        params = context_params(n_ctx, runtime)
        params.n_seq_max = n_seq_max
        params.kv_unified = n_seq_max > 1
        n_batch = params.n_batch
        self.model = model
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.ptr = new_context(model, params)
        if not self.ptr:
            raise EngineError(f"{model.path.name}: cannot create a llama.cpp context ({last_log_error()})")
        self.memory = llama_cpp.llama_get_memory(self.ptr)
        self.batch = llama_cpp.llama_batch_init(n_batch, 0, 1)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.memory, True)

    def truncate(self, n_keep: int) -> None:
        """Drop every cached position from `n_keep` on (rolls back rejected draft tokens)."""
        if not llama_cpp.llama_memory_seq_rm(self.memory, 0, n_keep, -1):
            raise EngineError(f"{self.model.path.name}: the KV cache cannot roll back to position {n_keep}")

    def decode(self, tokens: list[int], pos0: int, n_outputs: int = 1) -> np.ndarray:
        """Decode `tokens` at positions pos0.. and return the logits of the last `n_outputs` tokens.

        The returned array is a view into llama.cpp's buffer, valid until the next decode.
        """
        if pos0 + len(tokens) > self.n_ctx:
            raise EngineError(f"context of {self.n_ctx} tokens is too small (raise context_size in the search space)")
        first_output = len(tokens) - n_outputs
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            batch = self.batch
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = pos0 + start + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = start + i >= first_output
            batch.n_tokens = len(chunk)
            status = llama_cpp.llama_decode(self.ptr, batch)
            if status != 0:
                raise EngineError(
                    f"{self.model.path.name}: llama_decode failed with status {status} ({last_log_error()})"
                )
        logits = llama_cpp.llama_get_logits(self.ptr)
        return np.ctypeslib.as_array(logits, shape=(n_outputs, self.model.n_vocab))

    def free(self) -> None:
        if self.ptr:
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ptr)
            self.ptr = None
