"""In-process DSpark and PCTree speculative decoding through llama-cpp-python.

DSpark follows llama.cpp's own drafter (`common_speculative_impl_draft_dflash` with `is_dspark`,
common/speculative.cpp) and the llama-server loop around it (tools/server/server-context.cpp), so
both engines measure one algorithm:

* the target keeps the inputs of the draft's `dflash.target_layers` for every token it decodes
  (`llama_set_embeddings_layer_inp`); after each target decode those features of the tokens that
  stay in its cache are injected into the draft's KV cache at the same positions (an embedding
  batch through `llama_process`: the draft's fc + norm + K/V projections fill its cache);
* a draft is one non-causal decode of the noise block `[last, <mask> x (n-1)]` at the positions
  after the cache (anchor-first: every block position is a draft token; a `sample_from_anchor=false`
  draft reads positions 1.. instead). The draft graph itself adds the Markov bias
  markov_w2 . markov_w1[prev] to each position, `prev` being the argmax of the position before, so
  the greedy draft is the argmax of each row. The block is removed from the draft cache at once;
* with `draft_p_min > 0` the draft stops at the first position whose confidence (the draft's
  confidence head, read through `llama_get_embeddings_nextn`) is below p-min. A draft without a
  confidence head cannot take p-min > 0: llama-server then logs "DSpark draft has no confidence
  head" and runs without speculation; here the trial fails with that reason;
* `draft_n_max` is clamped to the trained block size (block_size, or block_size - 1 for a
  bonus-anchor draft) as llama.cpp clamps it; `draft_n_min` drops shorter drafts;
* the target verifies `[last] + draft` greedily in one batch, keeps the longest matching prefix and
  one token of its own, and both caches roll back past it.

PCTree (parent-conditioned drafting trees; a community fork of llama-server has it as
`--spec-dspark-pctree -k K -n N`) uses the same block. Each block row's logits without the Markov
bias are the row minus the bias of the greedy parent; a child of any parent token t at depth d then
scores `base_d + markov_w2 . markov_w1[t]`, i.e. what the draft would have said had the chain passed
through t (markov_w1/markov_w2 are read from the draft GGUF). The tree holds the greedy chain, so
from any state it accepts at least what linear DSpark would, then grows best-first by path
log-probability, each node taking at most k children, up to n drafted nodes, the draft's depth and
`MAX_TREE_LEAVES` leaves. The whole tree is verified in one target decode, as
examples/speculative does: every root-to-leaf path is one sequence id, each node carries the ids of
the leaves below it, so a node attends to the cache and its own ancestors only. The longest path
the target agrees with is kept; the other sequences are dropped from the KV cache.

Counting (as llama-server counts): drafted = draft tokens sent to the target (tree nodes for
PCTree), accepted = the ones it kept, one verify step per decode that checked a draft.

Cost: a `DSparkPair` holds its own target context (unified KV cache, `MAX_TREE_LEAVES` sequence ids,
layer-input extraction on), i.e. a second KV cache of the target's size next to the engine's plain
one; the draft's cache is as long as the target's. Tree scoring runs in numpy (exact up to a
vocabulary of `_EXACT_VOCAB`, among the leading candidates of each row above it).
"""

from __future__ import annotations

import ctypes
import heapq
import mmap
import time
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from autotune.engines import _dflash_ctypes as dfc
from autotune.engines._llama import Context, LoadedModel, context_params, last_log_error
from autotune.engines._sampler import SamplerChain
from autotune.errors import EngineError, ModelFileError, TrialFailure
from autotune.runtime import Runtime
from autotune.measurement import GenerationResult, extend_until_stop, timed_result
from autotune.prompts import Prompt
from autotune.spec import SpecConfig

__all__ = [
    "LAYER_INPUT_ARCHS",
    "MAX_TREE_LEAVES",
    "DSparkDrafter",
    "DSparkPair",
    "MarkovHead",
    "build_tree",
    "dspark_available",
]

#: Sequence ids of the DSpark target context: a PCTree verify step uses one per leaf.
MAX_TREE_LEAVES = 64

#: Target architectures whose llama.cpp graph exposes layer inputs (sets `t_layer_inp`, checked in
#: llama-cpp-python 0.3.36's src/models/*.cpp). Asking any other for them aborts the process.
LAYER_INPUT_ARCHS = frozenset({
    "bailingmoe3", "deepseek4", "gemma4", "gpt-oss", "hunyuan_vl", "lfm2", "llama", "mimo2", "minimax-01",
    "minimax-m2", "muse-glimmer", "nanbeige", "nemotron_h", "qwen3", "qwen35", "qwen35moe", "qwen3moe",
    "qwen3next", "qwen4exp",
})

#: Vocabularies up to this size get exact parent-conditioned scores over every token; larger ones
#: score children among the leading `_CANDIDATES` tokens of the row (a tree is a guess either way:
#: verification keeps the output exact).
_EXACT_VOCAB = 4096
_CANDIDATES = 256


def dspark_available() -> bool:
    """Whether this llama-cpp-python build has everything in-process DSpark needs."""
    return dfc.available()


def _meta(model_ptr, key: str) -> str | None:
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_model_meta_val_str(model_ptr, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", errors="replace") if n >= 0 else None


# -- the Markov head, read from the draft GGUF (PCTree scores other parents with it) ------------


@dataclass
class MarkovHead:
    """bias(prev) = scale * markov_w2 . markov_w1[prev], over the target vocabulary."""

    w1: np.ndarray  # (n_vocab, R)
    w2: np.ndarray  # (n_vocab, R): rows of target token ids (d2t scattered), zero for unmapped ones
    scale: float = 1.0

    @classmethod
    def from_gguf(cls, path: Path) -> "MarkovHead":
        from autotune.gguf_header import read_header

        header = read_header(path)
        tensors = {t.name: t for t in header.tensors}
        if "markov_w1.weight" not in tensors or "markov_w2.weight" not in tensors:
            raise ModelFileError(f"{path.name}: no DSpark Markov head (markov_w1/markov_w2): PCTree needs one")
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            w1 = _tensor(data, tensors["markov_w1.weight"])
            w2 = _tensor(data, tensors["markov_w2.weight"])
            scale = float(_tensor(data, tensors["markov_w2.scale"]).reshape(-1)[0]) if "markov_w2.scale" in tensors else 1.0
            d2t = _tensor(data, tensors["d2t"]).reshape(-1).astype(np.int64) if "d2t" in tensors else None
        if d2t is not None:
            full = np.zeros((w1.shape[0], w2.shape[1]), dtype=np.float32)
            full[d2t] = w2
            w2 = full
        return cls(np.ascontiguousarray(w1), np.ascontiguousarray(w2), scale)

    def bias(self, prev: int, rows: np.ndarray | None = None) -> np.ndarray:
        """The Markov bias after token `prev` (only at token ids `rows` when given)."""
        w2 = self.w2 if rows is None else self.w2[rows]
        out = w2 @ self.w1[prev]
        return out * self.scale if self.scale != 1.0 else out


def _tensor(data: mmap.mmap, info) -> np.ndarray:
    """One tensor as float32 (numpy order: ggml's shape reversed), dequantized if need be."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    shape = tuple(reversed(info.shape))
    raw = np.frombuffer(data, dtype=np.uint8, count=info.n_bytes, offset=info.data_offset)
    if info.tensor_type == GGMLQuantizationType.F32:
        return raw.view(np.float32).reshape(shape).copy()
    if info.tensor_type == GGMLQuantizationType.F16:
        return raw.view(np.float16).reshape(shape).astype(np.float32)
    if info.tensor_type == GGMLQuantizationType.I64:
        return raw.view(np.int64).reshape(shape).copy()
    if info.tensor_type == GGMLQuantizationType.I32:
        return raw.view(np.int32).reshape(shape).copy()
    return dequantize(raw, info.tensor_type).reshape(shape).astype(np.float32)


# -- contexts ------------------------------------------------------------------------------------


class _Views:
    """numpy views of llama.cpp's output buffers, made once per buffer address (they move only when
    llama.cpp reallocates them); slice the rows a decode wrote."""

    def __init__(self):
        self._cache: dict[tuple[int, int, int], np.ndarray] = {}

    def rows(self, ptr, n_rows: int, width: int) -> np.ndarray:
        key = (ctypes.cast(ptr, ctypes.c_void_p).value, n_rows, width)
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

    def __init__(self, model: LoadedModel, *, n_ctx: int, runtime: Runtime, layer_ids: list[int],
                 n_seq_max: int = MAX_TREE_LEAVES):
        super().__init__(model, n_ctx=n_ctx, runtime=runtime, n_seq_max=n_seq_max)
        n_batch = self.n_batch
        self.n_seq_max = n_seq_max
        # the one-sequence batch (every token in sequence 0) is filled through numpy views; a tree batch
        for i in range(n_batch):
            self.batch.n_seq_id[i] = 1
            self.batch.seq_id[i][0] = 0
        self._tokens = np.ctypeslib.as_array(self.batch.token, shape=(n_batch,))
        self._positions = np.ctypeslib.as_array(self.batch.pos, shape=(n_batch,))
        self._outputs = np.ctypeslib.as_array(self.batch.logits, shape=(n_batch,))
        self.tree_batch = llama_cpp.llama_batch_init(n_batch, 0, n_seq_max)
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
                raise EngineError(f"{self.model.path.name}: llama_decode failed with status {status} ({last_log_error()})")
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
        for i in range(n):
            batch.token[i] = tokens[i]
            batch.pos[i] = positions[i]
            ids = seq_ids[i]
            batch.n_seq_id[i] = len(ids)
            row = batch.seq_id[i]
            for j, s in enumerate(ids):
                row[j] = s
            batch.logits[i] = True
        batch.n_tokens = n
        status = llama_cpp.llama_decode(self.ptr, batch)
        if status != 0:
            raise EngineError(f"{self.model.path.name}: llama_decode of a tree failed with status {status} ({last_log_error()})")
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
        self.ptr = llama_cpp.llama_init_from_model(model.ptr, params)
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
                raise EngineError(f"{self.model.path.name}: injecting target features failed with status {status} ({last_log_error()})")

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
            raise EngineError(f"{self.model.path.name}: the DSpark draft decode failed with status {status} ({last_log_error()})")
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


class DSparkPair:
    """A target and its DSpark draft, loaded for in-process drafting: a tree-capable target context
    with layer-input extraction and the draft context bound to it. Free it before either model."""

    def __init__(self, target: LoadedModel, draft: LoadedModel, *, n_ctx: int, runtime: Runtime):
        if not dfc.available():
            raise EngineError(f"this llama-cpp-python lacks what DSpark needs: {', '.join(dfc.missing())}")
        arch = _meta(draft.ptr, "general.architecture")
        if arch != "dflash":
            raise ModelFileError(f"{draft.path.name}: architecture {arch!r} is not a DFlash/DSpark draft (dflash)")
        if dfc.llama_model_dflash_selector_top_k(draft.ptr) > 0:
            raise ModelFileError(f"{draft.path.name}: a DFlash2 (selector) draft, not a DSpark one")
        target_arch = _meta(target.ptr, "general.architecture")
        if target_arch not in LAYER_INPUT_ARCHS:
            raise ModelFileError(
                f"{target.path.name}: llama.cpp's {target_arch} graph exposes no layer inputs, so it cannot feed a DSpark draft"
            )
        self.layer_ids = dfc.target_layer_ids(draft.ptr)
        n_layer = llama_cpp.llama_model_n_layer(target.ptr)
        if not self.layer_ids or any(not 0 <= lid < n_layer for lid in self.layer_ids):
            raise ModelFileError(f"{draft.path.name}: dflash.target_layers {self.layer_ids} do not fit a {n_layer}-layer target")
        if llama_cpp.llama_model_n_embd(draft.ptr) != llama_cpp.llama_model_n_embd(target.ptr):
            raise ModelFileError(f"{draft.path.name}: the draft's n_embd differs from the target's")
        self.mask_token = dfc.llama_vocab_mask(draft.vocab)
        if self.mask_token < 0:
            raise ModelFileError(f"{draft.path.name}: the tokenizer has no mask token (tokenizer.ggml.mask_token_id)")
        block_size = _meta(draft.ptr, "dflash.block_size")
        self.block_size = int(block_size) if block_size is not None else 16
        self.sample_from_anchor = _meta(draft.ptr, "dflash.sample_from_anchor") in (None, "true")
        self.causal = _meta(draft.ptr, "dflash.attention.causal") == "true"
        from autotune.gguf_header import read_header

        tensors = {t.name for t in read_header(draft.path).tensors}
        self.is_dspark = "markov_w1.weight" in tensors
        # llama-server takes a missing key for "has one"; the head exists only with its tensor
        self.has_confidence_head = "conf_proj.weight" in tensors and _meta(draft.ptr, "dflash.has_confidence_head") in (None, "true")
        self.target_model = target
        self.draft_model = draft
        self._markov: MarkovHead | None = None
        self.target = TargetContext(target, n_ctx=n_ctx, runtime=runtime, layer_ids=self.layer_ids)
        try:
            self.draft = DraftContext(draft, self.target, causal=self.causal, runtime=runtime)
        except Exception:
            self.target.free()
            raise

    @property
    def n_draft_max(self) -> int:
        """The longest draft the block gives (llama.cpp clamps n-max and n-min to it)."""
        return self.block_size if self.sample_from_anchor else self.block_size - 1

    def markov(self) -> MarkovHead:
        if self._markov is None:
            self._markov = MarkovHead.from_gguf(self.draft_model.path)
        return self._markov

    def free(self) -> None:
        self.draft.free()
        self.target.free()


# -- PCTree --------------------------------------------------------------------------------------


@dataclass
class Tree:
    """Draft nodes in batch order: depths never decrease (llama.cpp refuses a batch in which a
    sequence's positions go down). Node 0 is the root (the last accepted token, depth 0);
    parents[i] < i for every other node."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self) -> list[dict[int, int]]:
        kids: list[dict[int, int]] = [{} for _ in self.tokens]
        for i in range(1, len(self.tokens)):
            kids[self.parents[i]][self.tokens[i]] = i
        return kids

    def sequences(self) -> list[list[int]]:
        """Sequence ids per node: leaf j is sequence j, and a node carries the ids of its leaves."""
        kids = self.children()
        seqs: list[list[int]] = [[] for _ in self.tokens]
        n_leaves = 0
        for i in range(len(self.tokens)):
            if not kids[i]:
                seqs[i].append(n_leaves)
                n_leaves += 1
        for i in range(len(self.tokens) - 1, 0, -1):
            seqs[self.parents[i]].extend(seqs[i])
        return seqs


def _log_softmax(rows: np.ndarray) -> np.ndarray:
    """log-softmax over the last axis."""
    rows = rows.astype(np.float64)
    top = rows.max(axis=-1, keepdims=True)
    return rows - (top + np.log(np.exp(rows - top).sum(axis=-1, keepdims=True)))


def build_tree(last: int, chain: list[int], rows: np.ndarray, markov: MarkovHead, *, k: int, n: int,
               max_leaves: int = MAX_TREE_LEAVES) -> Tree:
    """The PCTree of one DSpark block.

    `rows[d]` are the block's (Markov-biased) logits of draft depth d + 1 and `chain` the greedy
    draft read from them (possibly shorter than `rows`: p-min, n-max, room). The tree holds the
    first `n` tokens of the chain, then the best of the top-`k` children of its nodes by path
    log-probability, children scored with the Markov bias of their own parent. Expansion is lazy
    (a child never scores above its parent), so only nodes that can still win are expanded.
    """
    depth_max = min(len(chain), len(rows))
    tokens, parents, depths, scores = [last], [-1], [0], [0.0]
    on_chain = [True]
    kids: list[set[int]] = [set()]
    n_leaves = 1
    vocab = rows.shape[1]
    chain_logp = _log_softmax(rows[:depth_max])
    # the block's logits without the bias of the greedy parent the graph used
    previous = [last] + [int(r.argmax()) for r in rows[: depth_max - 1]]
    base = [rows[d].astype(np.float32) - markov.bias(previous[d]) for d in range(depth_max)]
    candidates = None
    if vocab > _EXACT_VOCAB:
        candidates = [np.unique(np.concatenate([np.argpartition(rows[d], -_CANDIDATES)[-_CANDIDATES:],
                                                np.argpartition(base[d], -_CANDIDATES)[-_CANDIDATES:]]))
                      for d in range(depth_max)]

    def add(parent: int, token: int, score: float, chain_node: bool) -> int:
        nonlocal n_leaves
        if kids[parent]:
            n_leaves += 1
        kids[parent].add(token)
        tokens.append(token)
        parents.append(parent)
        depths.append(depths[parent] + 1)
        scores.append(score)
        on_chain.append(chain_node)
        kids.append(set())
        return len(tokens) - 1

    def children(node: int) -> list[tuple[int, float]]:
        """The node's best k children not in the tree yet: (token, log-probability)."""
        d = depths[node]
        ids = None
        if on_chain[node]:
            logp = chain_logp[d]
        elif candidates is None:
            logp = _log_softmax(base[d] + markov.bias(tokens[node]))
        else:
            ids = candidates[d]
            logp = _log_softmax(base[d][ids] + markov.bias(tokens[node], ids))
        m = min(k + len(kids[node]), logp.size)
        top = np.argpartition(logp, -m)[-m:]
        out = []
        for j in top[np.argsort(-logp[top])]:
            token = int(j if ids is None else ids[j])
            if token not in kids[node]:
                out.append((token, float(logp[j])))
        return out[:k]

    node = 0
    for d, token in enumerate(chain[: min(depth_max, n)]):
        node = add(node, token, scores[node] + float(chain_logp[d][token]), True)
    # entries: (-score, order, parent, token); token -1 = "expand parent" (its children score below it)
    heap: list[tuple[float, int, int, int]] = [(-scores[i], i, i, -1) for i in range(len(tokens)) if depths[i] < depth_max]
    heapq.heapify(heap)
    counter = len(heap)
    while heap and len(tokens) - 1 < n:
        neg, _, parent, token = heapq.heappop(heap)
        if token < 0:
            for child_token, lp in children(parent):
                heapq.heappush(heap, (-(scores[parent] + lp), counter, parent, child_token))
                counter += 1
            continue
        if token in kids[parent] or len(kids[parent]) >= k or (kids[parent] and n_leaves >= max_leaves):
            continue
        child = add(parent, token, -neg, False)
        if depths[child] < depth_max:
            heapq.heappush(heap, (neg, counter, child, -1))
            counter += 1
    # batch order: by depth (stable), parents remapped
    order = sorted(range(len(tokens)), key=lambda i: depths[i])
    where = {old: new for new, old in enumerate(order)}
    return Tree(
        tokens=[tokens[i] for i in order],
        parents=[-1 if parents[i] < 0 else where[parents[i]] for i in order],
        depths=[depths[i] for i in order],
    )


# -- the generation loop ---------------------------------------------------------------------------


class DSparkDrafter:
    """Generates with DSpark (linear, or PCTree when `dspark_pctree` is on) on a `DSparkPair`.

    Unlike the engine's drafters it runs the whole loop itself: the target must hand its layer
    inputs to the draft after every decode, and a tree needs its own verification step.
    """

    def __init__(self, pair: DSparkPair, config: SpecConfig, sampler: SamplerChain):
        self.pair = pair
        self.sampler = sampler
        limit = pair.n_draft_max
        self.n_max = min(int(config.value("draft_n_max")), limit)
        self.n_min = min(int(config.value("draft_n_min")), limit)
        self.p_min = float(config.value("draft_p_min"))
        if self.p_min > 0 and not pair.has_confidence_head:
            raise TrialFailure(
                f"{pair.draft_model.path.name}: DSpark draft has no confidence head: draft_p_min must be 0 (llama-server refuses it too)"
            )
        self.pctree = bool(config.value("dspark_pctree"))
        self.k = max(1, int(config.value("dspark_pctree_k")))
        self.n = max(1, int(config.value("dspark_pctree_n")))
        if self.pctree and not pair.is_dspark:
            raise TrialFailure(f"{pair.draft_model.path.name}: PCTree needs a DSpark draft (a Markov head); this is a DFlash one")
        self.markov = pair.markov() if self.pctree else None
        self.n_block = self.n_max + (0 if pair.sample_from_anchor else 1)
        self.first_row = 0 if pair.sample_from_anchor else 1
        self.last_tree: Tree | None = None  # of the last PCTree step, for tests

    def generate(self, prompt: Prompt, tokens: list[int], max_tokens: int) -> GenerationResult:
        target, draft = self.pair.target, self.pair.draft
        model = target.model
        target.clear()
        draft.clear()
        self.sampler.reset()
        start = time.perf_counter()
        last = self._prefill(tokens)
        first_token_at = time.perf_counter()
        n_past = len(tokens)  # tokens in both caches; `last` goes to position n_past
        generated = [last]
        drafted = accepted = verify_steps = 0
        while len(generated) < max_tokens and not model.is_eog(last):
            room = max_tokens - len(generated) - 1
            fits = 0 < self.n_block and n_past + self.n_block <= target.n_ctx  # the noise block needs cache room
            chain, rows = self._draft(last, n_past, room) if room > 0 and fits else ([], None)
            if chain and self.pctree:
                kept, bonus, n_drafted = self._verify_tree(last, chain, rows, n_past)
            else:
                kept, bonus, n_drafted = self._verify_linear(last, chain, n_past)
            if chain:
                drafted += n_drafted
                accepted += len(kept)
                verify_steps += 1
            n_past += 1 + len(kept)
            extend_until_stop(generated, kept + [bonus], max_tokens, model.is_eog)
            last = generated[-1]
        return timed_result(prompt.id, prompt.category, len(tokens), start, first_token_at, time.perf_counter(),
                            generated, drafted, accepted, verify_steps)

    def _prefill(self, tokens: list[int]) -> int:
        target, draft = self.pair.target, self.pair.draft
        for start in range(0, len(tokens), target.n_batch):
            chunk = tokens[start : start + target.n_batch]
            target.decode(chunk, start)
            draft.inject(target.features(slice(0, len(chunk))), start)
        return self.sampler.sample(target, -1)

    def _draft(self, last: int, n_past: int, room: int) -> tuple[list[int], np.ndarray | None]:
        """The greedy DSpark draft after `last` (and, for PCTree, the block rows it came from)."""
        draft = self.pair.draft
        block = [last] + [self.pair.mask_token] * (self.n_block - 1)
        logits, conf = draft.block(block, n_past, confidence=self.p_min > 0)
        rows = logits[self.first_row :]
        chain: list[int] = []
        for j in range(len(rows)):
            if conf is not None and conf[self.first_row + j] < self.p_min:
                break
            chain.append(int(rows[j].argmax()))
        kept_rows = rows.copy() if self.pctree else None
        draft.truncate(n_past)  # the noise block leaves the draft cache
        if len(chain) < self.n_min:
            return [], None
        return chain[:room], kept_rows

    def _verify_linear(self, last: int, chain: list[int], n_past: int) -> tuple[list[int], int, int]:
        target = self.pair.target
        target.decode([last] + chain, n_past, n_outputs=len(chain) + 1)
        emitted = self.sampler.sample_and_accept(target, chain, target.model.is_eog)
        n_ok, bonus = len(emitted) - 1, emitted[-1]
        self.pair.draft.inject(target.features(slice(0, n_ok + 1)), n_past)
        if n_ok < len(chain):
            target.truncate(n_past + 1 + n_ok)
        return chain[:n_ok], bonus, len(chain)

    def _verify_tree(self, last: int, chain: list[int], rows: np.ndarray, n_past: int) -> tuple[list[int], int, int]:
        target = self.pair.target
        tree = build_tree(last, chain, rows, self.markov, k=self.k, n=self.n, max_leaves=target.n_seq_max)
        self.last_tree = tree
        seqs = tree.sequences()
        n_leaves = len(seqs[0])
        for s in range(1, n_leaves):
            target.seq_cp(0, s)
        target.decode_tree(tree.tokens, [n_past + d for d in tree.depths], seqs)
        kids = tree.children()
        path = [0]
        while True:  # sample each node on the way down (batch row = node), follow the child it names
            bonus = self.sampler.sample(target, path[-1])
            child = kids[path[-1]].get(bonus)
            if child is None:
                break
            path.append(child)
        end = path[-1]
        features = target.features(path)
        target.keep_path(seqs[end][0], n_past + len(path))
        self.pair.draft.inject(features, n_past)
        return [tree.tokens[i] for i in path[1:]], bonus, len(tree) - 1
