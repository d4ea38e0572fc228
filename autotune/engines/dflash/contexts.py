"""The llama.cpp side of in-process DFlash and DSpark drafting: a tree-capable target context that
keeps the draft's layer inputs, the draft context bound to it, and the pair of them.

As llama.cpp's own drafter (`common_speculative_impl_draft_dflash`, common/speculative.cpp, which
implements both `draft-dflash` and `draft-dspark`): the target keeps the inputs of the draft's
`dflash.target_layers` for every token it decodes (`llama_set_embeddings_layer_inp`); after each
target decode the features of the tokens that stay in its cache are injected into the draft's KV
cache at the same positions (an embedding batch through `llama_process`: the draft's fc + norm + K/V
projections fill its cache); a draft is one non-causal decode of a noise block `[last, <mask> ...]`
at the positions after the cache, removed from the draft cache at once. The draft graph adds a DSpark
file's Markov bias itself (src/models/dflash.cpp), whichever of the two types drives it.

Cost: a `DFlashPair` holds its own target context (unified KV cache, `MAX_TREE_LEAVES` sequence ids,
layer-input extraction on), i.e. a KV cache of the target's size next to the engine's plain one, which
the engine frees while a pair is in use; the draft's cache is as long as the target's.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from autotune.engines.dflash import bindings as dfc
from autotune.engines.dflash.pctree import MAX_TREE_LEAVES, MarkovHead
from autotune.errors import EngineError, ModelFileError
from autotune.llamacpp.bindings import Context, LoadedModel, context_params, last_log_error, new_context
from autotune.llamacpp.runtime import Runtime

__all__ = ["LAYER_INPUT_ARCHS", "DFlashPair", "DraftContext", "TargetContext", "dflash_available"]

#: Target architectures whose llama.cpp graph exposes layer inputs (sets `t_layer_inp`, checked in
#: llama-cpp-python 0.3.36's src/models/*.cpp). Asking any other for them aborts the process.
LAYER_INPUT_ARCHS = frozenset(
    {
        "bailingmoe3",
        "deepseek4",
        "gemma4",
        "gpt-oss",
        "hunyuan_vl",
        "lfm2",
        "llama",
        "mimo2",
        "minimax-01",
        "minimax-m2",
        "muse-glimmer",
        "nanbeige",
        "nemotron_h",
        "qwen3",
        "qwen35",
        "qwen35moe",
        "qwen3moe",
        "qwen3next",
        "qwen4exp",
    }
)


def dflash_available() -> bool:
    """Whether this llama-cpp-python build has everything in-process DFlash and DSpark need."""
    return dfc.available()


def _meta(model_ptr, key: str) -> str | None:
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_model_meta_val_str(model_ptr, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", errors="replace") if n >= 0 else None


class _Views:
    """numpy views of llama.cpp's output buffers, made once per buffer address (they move only when
    llama.cpp reallocates them); slice the rows a decode wrote."""

    def __init__(self):
        self._cache: dict[tuple[int, int, int], np.ndarray] = {}

    def rows(self, ptr, n_rows: int, width: int) -> np.ndarray:
        key = (ctypes.addressof(ptr.contents), n_rows, width)  # a sixth of what a cast costs
        view = self._cache.get(key)
        if view is None:
            if len(self._cache) > 16:
                self._cache.clear()
            view = self._cache[key] = np.ctypeslib.as_array(ptr, shape=(n_rows, width))
        return view


class TargetContext(Context):
    """The target for DSpark: keeps the draft's layer inputs, and verifies trees.

    Unified KV cache with `n_seq_max` sequence ids (a node of a tree belongs to several); the
    linear path uses sequence 0 only, as `Context` does.
    """

    def __init__(
        self,
        model: LoadedModel,
        *,
        n_ctx: int,
        runtime: Runtime,
        layer_ids: list[int],
        n_seq_max: int = MAX_TREE_LEAVES,
    ):
        super().__init__(model, n_ctx=n_ctx, runtime=runtime, n_seq_max=n_seq_max)
        n_batch = self.n_batch
        self.n_seq_max = n_seq_max
        # both batches are filled through numpy views of their arrays; the one-sequence batch puts every token in sequence 0
        for i in range(n_batch):
            self.batch.n_seq_id[i] = 1
            self.batch.seq_id[i][0] = 0
        self._tokens = np.ctypeslib.as_array(self.batch.token, shape=(n_batch,))
        self._positions = np.ctypeslib.as_array(self.batch.pos, shape=(n_batch,))
        self._outputs = np.ctypeslib.as_array(self.batch.logits, shape=(n_batch,))
        self.tree_batch = tree = llama_cpp.llama_batch_init(n_batch, 0, n_seq_max)
        self._tree_tokens = np.ctypeslib.as_array(tree.token, shape=(n_batch,))
        self._tree_positions = np.ctypeslib.as_array(tree.pos, shape=(n_batch,))
        self._tree_n_seq_ids = np.ctypeslib.as_array(tree.n_seq_id, shape=(n_batch,))
        np.ctypeslib.as_array(tree.logits, shape=(n_batch,))[:] = 1  # a tree batch outputs every token
        # llama_batch_init allocates each token's sequence-id array on its own
        self._tree_seq_ids = [np.ctypeslib.as_array(tree.seq_id[i], shape=(n_seq_max,)) for i in range(n_batch)]
        self.n_embd = llama_cpp.llama_model_n_embd(model.ptr)
        self.layer_ids = list(layer_ids)
        for lid in self.layer_ids:
            dfc.llama_set_embeddings_layer_inp(self.ptr, lid, True)
        self._views = _Views()

    def decode(self, tokens: list[int], pos0: int, n_outputs: int = 1) -> np.ndarray:
        """As `Context.decode` (sequence 0; logits of the last `n_outputs` tokens, a view)."""
        n = len(tokens)
        if pos0 + n > self.n_ctx:
            raise EngineError(f"context of {self.n_ctx} tokens is too small (raise context_size in the search space)")
        first_output = n - n_outputs
        batch = self.batch
        for start in range(0, n, self.n_batch):
            m = min(self.n_batch, n - start)
            self._tokens[:m] = tokens[start : start + m]
            self._positions[:m] = np.arange(pos0 + start, pos0 + start + m)
            self._outputs[:m] = 0
            self._outputs[max(0, first_output - start) : m] = 1
            batch.n_tokens = m
            status = llama_cpp.llama_decode(self.ptr, batch)
            if status != 0:
                raise EngineError(
                    f"{self.model.path.name}: llama_decode failed with status {status} ({last_log_error()})"
                )
        return self._views.rows(llama_cpp.llama_get_logits(self.ptr), self.n_batch, self.model.n_vocab)[:n_outputs]

    def features(self, rows) -> np.ndarray:
        """Layer inputs of batch rows `rows` of the last decode: (len, n_layers * n_embd) float32."""
        parts = []
        for lid in self.layer_ids:
            ptr = dfc.llama_get_embeddings_layer_inp(self.ptr, lid)
            if not ptr:
                raise EngineError(f"{self.model.path.name}: layer {lid}'s inputs were not extracted")
            parts.append(self._views.rows(ptr, self.n_batch, self.n_embd)[rows])
        return np.concatenate(parts, axis=1)

    def decode_tree(self, tokens: list[int], positions: list[int], seq_ids: list[list[int]]) -> np.ndarray:
        """Decode one batch where token i sits at positions[i] in every sequence of seq_ids[i];
        returns the logits of every token (a view, valid until the next decode)."""
        n = len(tokens)
        if n > self.n_batch:
            raise EngineError(f"a tree of {n} tokens does not fit a batch of {self.n_batch}")
        if max(positions) >= self.n_ctx:
            raise EngineError(f"context of {self.n_ctx} tokens is too small (raise context_size in the search space)")
        batch = self.tree_batch
        self._tree_tokens[:n] = tokens
        self._tree_positions[:n] = positions
        self._tree_n_seq_ids[:n] = [len(ids) for ids in seq_ids]
        for row, ids in zip(self._tree_seq_ids, seq_ids):
            row[: len(ids)] = ids
        batch.n_tokens = n
        status = llama_cpp.llama_decode(self.ptr, batch)
        if status != 0:
            raise EngineError(
                f"{self.model.path.name}: llama_decode of a tree failed with status {status} ({last_log_error()})"
            )
        return self._views.rows(llama_cpp.llama_get_logits(self.ptr), self.n_batch, self.model.n_vocab)[:n]

    def seq_cp(self, src: int, dst: int) -> None:
        llama_cpp.llama_memory_seq_cp(self.memory, src, dst, -1, -1)

    def keep_path(self, seq_id: int, n_keep: int) -> None:
        """Keep the cells of sequence `seq_id` below position `n_keep`, as sequence 0; drop the rest."""
        mem = self.memory
        if not llama_cpp.llama_memory_seq_rm(mem, seq_id, n_keep, -1):
            raise EngineError(f"{self.model.path.name}: the KV cache cannot roll back to position {n_keep}")
        llama_cpp.llama_memory_seq_keep(mem, seq_id)
        if seq_id != 0:
            llama_cpp.llama_memory_seq_cp(mem, seq_id, 0, -1, -1)
            llama_cpp.llama_memory_seq_keep(mem, 0)

    def free(self) -> None:
        if self.ptr:
            llama_cpp.llama_batch_free(self.tree_batch)
        super().free()


class DraftContext:
    """The DSpark draft's context, tied to the target context (`ctx_other`: it borrows the target's
    token embeddings and output head)."""

    def __init__(self, model: LoadedModel, target: TargetContext, *, causal: bool, runtime: Runtime):
        # one ubatch per batch: a non-causal block must be decoded whole
        params = context_params(target.n_ctx, runtime, n_batch=target.n_batch, n_ubatch=target.n_batch)
        params.n_seq_max = 1
        params.ctx_other = target.ptr
        self.model = model
        self.n_batch = target.n_batch
        self.ptr = new_context(model, params)
        if not self.ptr:
            raise EngineError(f"{model.path.name}: cannot create the DSpark draft context ({last_log_error()})")
        self.memory = llama_cpp.llama_get_memory(self.ptr)
        self.n_embd = llama_cpp.llama_model_n_embd(model.ptr)
        self.n_vocab = target.model.n_vocab
        dfc.llama_set_embeddings_nextn(self.ptr, True, True)  # the confidence rows (masked: output rows only)
        dfc.llama_set_causal_attn(self.ptr, causal)
        self.batch = dfc.llama_batch_ext_init(self.ptr)
        self._pos = (llama_cpp.llama_pos * 4)()
        self._embd = dfc.llama_embd(None, 1, 0)  # one feature row; its data pointer is set per row
        self._embd_data = ctypes.c_void_p.from_buffer(self._embd, dfc.llama_embd.data.offset)
        self._views = _Views()

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.memory, True)

    def truncate(self, n_keep: int) -> None:
        if not llama_cpp.llama_memory_seq_rm(self.memory, 0, n_keep, -1):
            raise EngineError(f"{self.model.path.name}: the draft KV cache cannot roll back to position {n_keep}")

    def inject(self, features: np.ndarray, pos0: int) -> None:
        """Write the target features of positions pos0.. into the draft's KV cache."""
        features = np.ascontiguousarray(features, dtype=np.float32)
        n_rows, width = features.shape
        base = features.ctypes.data
        row_bytes = width * 4
        pos = self._pos
        embd, data = self._embd, self._embd_data
        embd.n_embd = width
        for start in range(0, n_rows, self.n_batch):
            batch = self.batch
            dfc.llama_batch_ext_clear(batch)
            for i in range(start, min(n_rows, start + self.n_batch)):
                data.value = base + i * row_bytes  # the batch copies the row
                idx = dfc.llama_batch_ext_add_embd(batch, 0, embd)
                if idx < 0:
                    raise EngineError(f"{self.model.path.name}: cannot add a feature row to the draft batch ({idx})")
                pos[0] = pos[1] = pos[2] = pos0 + i
                dfc.llama_batch_ext_set_pos(batch, idx, pos)
            status = dfc.llama_process(self.ptr, dfc.LLAMA_PROCESS_TYPE_DECODE, batch)
            if status != 0:
                raise EngineError(
                    f"{self.model.path.name}: injecting target features failed with status {status} ({last_log_error()})"
                )

    def block(self, tokens: list[int], pos0: int, confidence: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Decode the noise block at positions pos0..; its logits (a view) and, when asked, each
        position's confidence."""
        batch = self.batch
        dfc.llama_batch_ext_clear(batch)
        pos = self._pos
        for i, token in enumerate(tokens):
            idx = dfc.llama_batch_ext_add_token(batch, 0, token)
            pos[0] = pos0 + i
            dfc.llama_batch_ext_set_pos(batch, idx, pos)
            dfc.llama_batch_ext_set_output_logits(batch, idx, True)
        status = dfc.llama_process(self.ptr, dfc.LLAMA_PROCESS_TYPE_DECODE, batch)
        if status != 0:
            raise EngineError(
                f"{self.model.path.name}: the DSpark draft decode failed with status {status} ({last_log_error()})"
            )
        n = len(tokens)
        logits = self._views.rows(llama_cpp.llama_get_logits(self.ptr), self.n_batch, self.n_vocab)[:n]
        conf = None
        if confidence:
            rows = dfc.llama_get_embeddings_nextn(self.ptr)
            if not rows:
                raise EngineError(f"{self.model.path.name}: the draft produced no confidence rows")
            conf = self._views.rows(rows, self.n_batch, self.n_embd)[:n, 0].copy()
        return logits, conf

    def free(self) -> None:
        if self.ptr:
            dfc.llama_batch_ext_free(self.batch)
            llama_cpp.llama_free(self.ptr)
            self.ptr = None


class DFlashPair:
    """A target and its DFlash or DSpark draft, loaded for in-process drafting: a tree-capable target
    context with layer-input extraction and the draft context bound to it. Free it before either model."""

    def __init__(self, target: LoadedModel, draft: LoadedModel, *, n_ctx: int, runtime: Runtime):
        if not dfc.available():
            raise EngineError(
                f"this llama-cpp-python lacks what DFlash/DSpark drafting needs: {', '.join(dfc.missing())}"
            )
        arch = _meta(draft.ptr, "general.architecture")
        if arch != "dflash":
            raise ModelFileError(f"{draft.path.name}: architecture {arch!r} is not a DFlash/DSpark draft (dflash)")
        if dfc.llama_model_dflash_selector_top_k(draft.ptr) > 0:
            raise ModelFileError(f"{draft.path.name}: a DFlash2 (selector) draft, which autotune cannot drive")
        target_arch = _meta(target.ptr, "general.architecture")
        if target_arch not in LAYER_INPUT_ARCHS:
            raise ModelFileError(
                f"{target.path.name}: llama.cpp's {target_arch} graph exposes no layer inputs, so it cannot feed a DFlash/DSpark draft"
            )
        self.layer_ids = dfc.target_layer_ids(draft.ptr)
        n_layer = llama_cpp.llama_model_n_layer(target.ptr)
        if not self.layer_ids or any(not 0 <= lid < n_layer for lid in self.layer_ids):
            raise ModelFileError(
                f"{draft.path.name}: dflash.target_layers {self.layer_ids} do not fit a {n_layer}-layer target"
            )
        if llama_cpp.llama_model_n_embd(draft.ptr) != llama_cpp.llama_model_n_embd(target.ptr):
            raise ModelFileError(f"{draft.path.name}: the draft's n_embd differs from the target's")
        self.mask_token = dfc.llama_vocab_mask(draft.vocab)
        if self.mask_token < 0:
            raise ModelFileError(f"{draft.path.name}: the tokenizer has no mask token (tokenizer.ggml.mask_token_id)")
        block_size = _meta(draft.ptr, "dflash.block_size")
        self.block_size = int(block_size) if block_size is not None else 16
        self.sample_from_anchor = _meta(draft.ptr, "dflash.sample_from_anchor") in (None, "true")
        self.causal = _meta(draft.ptr, "dflash.attention.causal") == "true"
        from autotune.gguf.header import read_header

        tensors = {t.name for t in read_header(draft.path).tensors}
        self.has_markov_head = "markov_w1.weight" in tensors  # DSpark (the graph applies it under either type)
        # llama-server takes a missing key for "has one"; the head exists only with its tensor
        self.has_confidence_head = "conf_proj.weight" in tensors and _meta(draft.ptr, "dflash.has_confidence_head") in (
            None,
            "true",
        )
        self.target_model = target
        self.draft_model = draft
        self._markov: MarkovHead | None = None
        self.target = TargetContext(target, n_ctx=n_ctx, runtime=runtime, layer_ids=self.layer_ids)
        try:
            self.draft = DraftContext(draft, self.target, causal=self.causal, runtime=runtime)
        except Exception:
            self.target.free()
            raise

    def anchor_first(self, spec_type: str) -> bool:
        """Whether every block position is a draft token: draft-dspark on an anchor-first draft. Otherwise
        (draft-dflash, or a bonus-anchor draft) position 0 is the anchor and drafts start at 1."""
        return spec_type == "draft-dspark" and self.sample_from_anchor

    def n_draft_max(self, spec_type: str) -> int:
        """The longest draft the block gives under `spec_type` (llama.cpp clamps n-max and n-min to it)."""
        return self.block_size if self.anchor_first(spec_type) else self.block_size - 1

    def markov(self) -> MarkovHead:
        if self._markov is None:
            self._markov = MarkovHead.from_gguf(self.draft_model.path)
        return self._markov

    def free(self) -> None:
        self.draft.free()
        self.target.free()
