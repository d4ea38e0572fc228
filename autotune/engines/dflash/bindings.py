"""The few libllama functions DSpark drafting needs that llama-cpp-python does not bind.

llama.cpp's DFlash/DSpark drafter (`common_speculative_impl_draft_dflash`, common/speculative.cpp)
uses, besides the public C API:

* `llama_set_embeddings_layer_inp` / `llama_get_embeddings_layer_inp`: make the target keep the
  input hidden state of chosen layers for every token of a decode (the draft's features);
* `llama_model_target_layer_ids(_n)`: which target layers a DFlash draft reads
  (`dflash.target_layers`);
* `llama_model_dflash_selector_top_k`: > 0 for a DFlash2 draft (a selector lattice, not handled here).

They live in src/llama-ext.h, a C++ header, so libllama exports them under C++-mangled names
only; llama-cpp-python's `llama_cpp_ext.py` binds its own such names the same way (Itanium names
for Linux and macOS, MSVC names for Windows). Everything else the drafter uses is already bound by
llama-cpp-python 0.3.36 and is re-exported here so the DSpark code has one import:
`llama_process` with `llama_batch_ext_*` (token and embedding batches), `llama_embd`,
`llama_vocab_mask`, `llama_set_causal_attn`, `llama_context_params.ctx_other`, and
`llama_set_embeddings_nextn` / `llama_get_embeddings_nextn` (DSpark's confidence rows) from
`llama_cpp.llama_cpp_ext`.

`available()` says whether this libllama has them all; `missing()` names what is not there.
"""

from __future__ import annotations

import ctypes
from typing import Any, Iterable

import llama_cpp
from llama_cpp import llama_cpp as _low

_lib = _low._lib

# re-exported from llama-cpp-python (bound there already)
llama_process = llama_cpp.llama_process
LLAMA_PROCESS_TYPE_DECODE = llama_cpp.LLAMA_PROCESS_TYPE_DECODE
llama_embd = llama_cpp.llama_embd
llama_batch_ext_init = llama_cpp.llama_batch_ext_init
llama_batch_ext_free = llama_cpp.llama_batch_ext_free
llama_batch_ext_clear = llama_cpp.llama_batch_ext_clear
llama_batch_ext_add_token = llama_cpp.llama_batch_ext_add_token
llama_batch_ext_add_embd = llama_cpp.llama_batch_ext_add_embd
llama_batch_ext_set_pos = llama_cpp.llama_batch_ext_set_pos
llama_batch_ext_set_output_logits = llama_cpp.llama_batch_ext_set_output_logits
llama_vocab_mask = llama_cpp.llama_vocab_mask
llama_set_causal_attn = llama_cpp.llama_set_causal_attn

try:  # staging API of llama-cpp-python (llama_cpp_ext): bound there, but "not a stable public API"
    from llama_cpp.llama_cpp_ext import llama_get_embeddings_nextn, llama_set_embeddings_nextn
except (ImportError, AttributeError):  # pragma: no cover - older or newer layouts bind them below
    llama_get_embeddings_nextn = llama_set_embeddings_nextn = None

_missing: list[str] = []


def _bind(names: Iterable[str], argtypes: list[Any], restype: Any):
    """The first exported symbol of `names` with its signature set, or None (recorded as missing)."""
    names = tuple(names)
    for name in names:
        func = getattr(_lib, name, None)
        if func is not None:
            func.argtypes = argtypes
            func.restype = restype
            return func
    _missing.append(names[0])
    return None


_ctx = _low.llama_context_p_ctypes
_model = _low.llama_model_p_ctypes

# LLAMA_API void llama_set_embeddings_layer_inp(struct llama_context * ctx, uint32_t lid, bool value);
llama_set_embeddings_layer_inp = _bind(
    (
        "llama_set_embeddings_layer_inp",
        "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
        "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z",
    ),
    [_ctx, ctypes.c_uint32, ctypes.c_bool],
    None,
)

# LLAMA_API float * llama_get_embeddings_layer_inp(struct llama_context * ctx, uint32_t lid);
llama_get_embeddings_layer_inp = _bind(
    (
        "llama_get_embeddings_layer_inp",
        "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
        "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z",
    ),
    [_ctx, ctypes.c_uint32],
    ctypes.POINTER(ctypes.c_float),
)

# LLAMA_API const int32_t * llama_model_target_layer_ids(const struct llama_model * model);
llama_model_target_layer_ids = _bind(
    (
        "llama_model_target_layer_ids",
        "_Z28llama_model_target_layer_idsPK11llama_model",
        "?llama_model_target_layer_ids@@YAPEBHPEBUllama_model@@@Z",
    ),
    [_model],
    ctypes.POINTER(ctypes.c_int32),
)

# LLAMA_API uint32_t llama_model_target_layer_ids_n(const struct llama_model * model);
llama_model_target_layer_ids_n = _bind(
    (
        "llama_model_target_layer_ids_n",
        "_Z30llama_model_target_layer_ids_nPK11llama_model",
        "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z",
    ),
    [_model],
    ctypes.c_uint32,
)

# LLAMA_API int32_t llama_model_dflash_selector_top_k(const struct llama_model * model);
llama_model_dflash_selector_top_k = _bind(
    (
        "llama_model_dflash_selector_top_k",
        "_Z33llama_model_dflash_selector_top_kPK11llama_model",
        "?llama_model_dflash_selector_top_k@@YAHPEBUllama_model@@@Z",
    ),
    [_model],
    ctypes.c_int32,
)

if llama_set_embeddings_nextn is None:  # pragma: no cover
    # LLAMA_API void llama_set_embeddings_nextn(struct llama_context * ctx, bool value, bool masked);
    llama_set_embeddings_nextn = _bind(
        (
            "llama_set_embeddings_nextn",
            "_Z26llama_set_embeddings_nextnP13llama_contextbb",
            "?llama_set_embeddings_nextn@@YAXPEAUllama_context@@_N1@Z",
        ),
        [_ctx, ctypes.c_bool, ctypes.c_bool],
        None,
    )
if llama_get_embeddings_nextn is None:  # pragma: no cover
    # LLAMA_API float * llama_get_embeddings_nextn(struct llama_context * ctx);
    llama_get_embeddings_nextn = _bind(
        (
            "llama_get_embeddings_nextn",
            "_Z26llama_get_embeddings_nextnP13llama_context",
            "?llama_get_embeddings_nextn@@YAPEAMPEAUllama_context@@@Z",
        ),
        [_ctx],
        ctypes.POINTER(ctypes.c_float),
    )

_REQUIRED_PUBLIC = (
    "llama_process",
    "llama_batch_ext_init",
    "llama_batch_ext_add_token",
    "llama_batch_ext_add_embd",
    "llama_batch_ext_set_pos",
    "llama_batch_ext_set_output_logits",
    "llama_vocab_mask",
    "llama_set_causal_attn",
)


def missing() -> list[str]:
    """Names of the functions DSpark needs that this libllama (or llama-cpp-python) lacks."""
    absent = [name for name in _REQUIRED_PUBLIC if getattr(_lib, name, None) is None]
    if "ctx_other" not in {f[0] for f in llama_cpp.llama_context_params._fields_}:
        absent.append("llama_context_params.ctx_other")
    return absent + list(_missing)


def available() -> bool:
    """Whether in-process DSpark can run on this llama-cpp-python build."""
    return not missing()


def target_layer_ids(model_ptr) -> list[int]:
    """The target layers whose inputs a DFlash/DSpark draft reads (its `dflash.target_layers`)."""
    n = llama_model_target_layer_ids_n(model_ptr)
    ids = llama_model_target_layer_ids(model_ptr)
    return [int(ids[i]) for i in range(n)] if n and ids else []
