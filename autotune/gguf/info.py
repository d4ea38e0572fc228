"""What autotune needs to know about a GGUF file, read from its header without loading weights.

`read_gguf_info` parses the header with autotune.gguf.header (through `check_gguf`, which
also refuses truncated files); tensor data is never read. Results are cached per (path, size, mtime).

Each token's text is kept as an 8-byte BLAKE2b digest (`token_text_hashes`), so two files'
vocabularies can be compared, down to the first differing token id, without holding either token
list (2 MiB for a 262k vocabulary).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from autotune.errors import ModelFileError
from autotune.gguf.header import GGUFHeader, check_gguf

_TOKEN_HASH_BYTES = 8


@dataclass(frozen=True)
class _TokenizerDefaults:
    """What llama.cpp assumes for a tokenizer model when the file leaves a key out."""

    vocab_type: str
    add_bos: bool = False
    add_eos: bool = False
    bos_id: int | None = None
    eos_id: int | None = None


# tokenizer.ggml.model -> llama.cpp's vocab type and defaults (src/llama-vocab.cpp, llama_vocab::impl::load).
# Some BPE pre-tokenizers (llama3, tekken, chameleon) also default add_bos to true; converters write
# the flag for those, so that case is not modelled.
_TOKENIZER_DEFAULTS = {
    "llama": _TokenizerDefaults("SPM", add_bos=True, bos_id=1, eos_id=2),
    "bert": _TokenizerDefaults("WPM", add_bos=True, bos_id=101),
    "gpt2": _TokenizerDefaults("BPE", bos_id=11, eos_id=11),
    "hybriddna": _TokenizerDefaults("BPE", bos_id=11, eos_id=11),
    "whitespace": _TokenizerDefaults("BPE", bos_id=11, eos_id=11),
    "gemma4": _TokenizerDefaults("BPE", add_bos=True, bos_id=11, eos_id=11),
    "t5": _TokenizerDefaults("UGM", add_eos=True, eos_id=1),
    "rwkv": _TokenizerDefaults("RWKV"),
    "test": _TokenizerDefaults("TEST"),
    "plamo2": _TokenizerDefaults("PLAMO2", bos_id=1, eos_id=2),
    "no_vocab": _TokenizerDefaults("NONE"),
    "none": _TokenizerDefaults("NONE"),
}

# common/speculative.cpp (common_speculative_impl_draft_dflash): block size when dflash.block_size is absent.
_DFLASH_DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True)
class GGUFInfo:
    """Header facts of one GGUF file: architecture, size, quantization, vocabulary, draft heads."""

    path: Path
    architecture: str
    quant: str  # llama.cpp's file-type name, e.g. "Q4_K_M", "F32"
    n_embd: int
    n_layers: int  # {arch}.block_count, MTP/NextN layers included
    n_nextn_layers: int  # {arch}.nextn_predict_layers (0 when absent)
    n_vocab: int
    tokenizer_model: str  # tokenizer.ggml.model, e.g. "gpt2", "llama", "test"
    vocab_type: str  # llama.cpp's vocab type for that model: "BPE", "SPM", ...
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    token_text_hashes: bytes = field(repr=False)  # 8-byte digest of each token's text, by id
    has_mtp_head: bool = False  # NextN layers llama.cpp's draft-mtp can use
    # Speculative-draft architectures (dflash, eagle3):
    target_layers: tuple[int, ...] = ()  # target layer ids whose inputs feed the draft
    target_hidden_size: int | None = None  # eagle3: the target n_embd it was trained for
    block_size: int | None = None  # dflash: tokens per drafted block
    has_markov_head: bool = False  # dflash: markov_w1.weight present, i.e. a DSpark draft
    has_confidence_head: bool = False  # DSpark: llama.cpp accepts --spec-draft-p-min > 0
    has_chat_template: bool = False  # tokenizer.chat_template is set: a chat model, not a base model

    @property
    def n_main_layers(self) -> int:
        """Decoder layers the main pass runs (llama_hparams::n_layer): block_count without NextN layers."""
        return self.n_layers - self.n_nextn_layers


def read_gguf_info(path: str | Path) -> GGUFInfo:
    """Header facts of a GGUF file; raises ModelFileError for a missing, unreadable or truncated file."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")
    stat = path.stat()
    return _read_cached(path, stat.st_size, stat.st_mtime_ns)


def first_differing_token(a: GGUFInfo, b: GGUFInfo, start: int = 0) -> int | None:
    """The first token id from `start` up to the smaller vocabulary whose text differs, or None."""
    n = min(a.n_vocab, b.n_vocab)
    lo, hi = start * _TOKEN_HASH_BYTES, n * _TOKEN_HASH_BYTES
    if a.token_text_hashes[lo:hi] == b.token_text_hashes[lo:hi]:
        return None
    ha = np.frombuffer(a.token_text_hashes, dtype=np.uint64, count=n)
    hb = np.frombuffer(b.token_text_hashes, dtype=np.uint64, count=n)
    return start + int(np.flatnonzero(ha[start:] != hb[start:])[0])


@functools.lru_cache(maxsize=64)
def _read_cached(path: Path, size: int, mtime_ns: int) -> GGUFInfo:
    header = check_gguf(path)
    try:
        return _info_from_header(path, header)
    except (ValueError, TypeError, IndexError) as exc:
        raise ModelFileError(f"{path}: malformed GGUF metadata ({exc}); re-download or re-convert it") from exc


def _info_from_header(path: Path, header: GGUFHeader) -> GGUFInfo:
    arch = _required(header, path, "general.architecture")
    n_layers = int(_required(header, path, f"{arch}.block_count"))
    n_nextn_layers = int(_value(header, f"{arch}.nextn_predict_layers", 0))
    tokenizer_model = str(_value(header, "tokenizer.ggml.model", "none"))
    defaults = _TOKENIZER_DEFAULTS.get(tokenizer_model, _TokenizerDefaults(tokenizer_model.upper()))
    token_text_hashes = _token_text_hashes(header)
    tensor_names = {tensor.name for tensor in header.tensors}
    has_markov_head = arch == "dflash" and "markov_w1.weight" in tensor_names
    block_size = _value(header, "dflash.block_size", _DFLASH_DEFAULT_BLOCK_SIZE) if arch == "dflash" else None
    target_hidden_size = _value(header, f"{arch}.target_hidden_size")
    return GGUFInfo(
        path=path,
        architecture=arch,
        quant=_quant_name(header),
        n_embd=int(_required(header, path, f"{arch}.embedding_length")),
        n_layers=n_layers,
        n_nextn_layers=n_nextn_layers,
        n_vocab=len(token_text_hashes) // _TOKEN_HASH_BYTES,
        tokenizer_model=tokenizer_model,
        vocab_type=defaults.vocab_type,
        bos_id=_optional_int(_value(header, "tokenizer.ggml.bos_token_id", defaults.bos_id)),
        eos_id=_optional_int(_value(header, "tokenizer.ggml.eos_token_id", defaults.eos_id)),
        add_bos=_add_bos(header, tokenizer_model, defaults),
        add_eos=bool(_value(header, "tokenizer.ggml.add_eos_token", defaults.add_eos)),
        token_text_hashes=token_text_hashes,
        # common_speculative_types_from_gguf (common/speculative.cpp) detects an MTP model by this
        # tensor; creating the MTP context also needs n_layer_nextn > 0 (llama_init_from_model).
        has_mtp_head=n_nextn_layers > 0 and f"blk.{n_layers - 1}.nextn.eh_proj.weight" in tensor_names,
        target_layers=tuple(int(i) for i in _value(header, f"{arch}.target_layers", ())),
        target_hidden_size=None if target_hidden_size is None else int(target_hidden_size),
        block_size=None if block_size is None else int(block_size),
        has_markov_head=has_markov_head,
        # common_speculative_impl_draft_dflash reads an absent dflash.has_confidence_head as true.
        has_confidence_head=has_markov_head and bool(_value(header, "dflash.has_confidence_head", True)),
        has_chat_template=bool(_value(header, "tokenizer.chat_template")),
    )


def _value(header: GGUFHeader, key: str, default: Any = None) -> Any:
    return header.get(key, default)


def _required(header: GGUFHeader, path: Path, key: str) -> Any:
    value = _value(header, key)
    if value is None:
        raise ModelFileError(f"{path}: GGUF metadata has no {key}; re-convert the model")
    return value


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _add_bos(header: GGUFHeader, tokenizer_model: str, defaults: _TokenizerDefaults) -> bool:
    # llama.cpp forces add_bos on for the Gemma 4 pre-tokenizer whatever the file says (llama-vocab.cpp).
    if tokenizer_model == "gemma4" or _value(header, "tokenizer.ggml.pre") == "gemma4":
        return True
    return bool(_value(header, "tokenizer.ggml.add_bos_token", defaults.add_bos))


def _token_text_hashes(header: GGUFHeader) -> bytes:
    tokens = header.get("tokenizer.ggml.tokens") or []
    return b"".join(hashlib.blake2b(token, digest_size=_TOKEN_HASH_BYTES).digest() for token in tokens)


def _quant_name(header: GGUFHeader) -> str:
    """llama.cpp's name for general.file_type ("Q4_K_M"), else the type holding most weights ("Q4_K")."""
    file_type = _value(header, "general.file_type")
    try:
        name = gguf.LlamaFileType(int(file_type)).name if file_type is not None else None
    except ValueError:  # a file type this gguf package does not know
        name = None
    if name is not None and name != "GUESSED":
        return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    elements_by_type: dict[gguf.GGMLQuantizationType, int] = {}
    for tensor in header.tensors:
        elements_by_type[tensor.tensor_type] = elements_by_type.get(tensor.tensor_type, 0) + int(tensor.n_elements)
    if not elements_by_type:
        return "unknown"
    return max(elements_by_type, key=elements_by_type.__getitem__).name
