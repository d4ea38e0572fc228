"""Tiny, deterministic GGUF models for tests that run real llama.cpp.

Two writers:

* :func:`write_qwen3_target` -- a ``qwen3`` model with random weights that
  llama.cpp loads, tokenizes text for and generates with.
* :func:`write_dspark_draft` -- a ``dflash``-architecture DSpark draft (DFlash
  plus the low-rank Markov head) that fits such a target.

Both are written with the ``gguf`` package. A numpy RNG seeded from ``seed``
fills the weights, so the same arguments always give the same bytes.

Tokenizer
---------
The files use llama.cpp's ``test`` tokenizer model (``LLAMA_VOCAB_TYPE_TEST``,
src/llama-vocab.cpp). It cuts raw text into 5-byte chunks and maps each chunk
to ``hash(chunk) % n_vocab``, so any text of ``n`` bytes gives
``ceil(n / 5)`` tokens, whatever the vocabulary size. Detokenizing gives the
token id in hex. The real tokenizers don't fit a 128-token vocabulary.
``gpt2`` BPE needs merges and a byte token for each of the 256 byte values;
it silently drops the bytes whose token is missing. ``llama``/SPM calls
``byte_to_token``, which throws (``std::out_of_range``) on a byte that has
neither a ``<0xXX>`` token nor a one-character token.

Ids 0-4 are special tokens (:data:`SPECIAL_TOKENS`): unk, bos, eos, pad and
mask. ``add_eos`` is off. ``add_bos`` is off by default because the ``test``
tokenizer never prepends BOS, whatever the flag says. The flag still counts
in the draft-simple check and in the server's infill and rerank prompts.
The rest of the token text depends on ``tokenizer_variant``: ``"a"`` gives
``tok_<i>`` and ``"b"`` gives ``tokb_<i>``. llama.cpp's draft-simple check
(``common_speculative_are_compatible`` in common/speculative.cpp) compares
the text of ids >= 5, so an "a" model and a "b" model fail it. Two models
with the same variant, ``vocab_size`` and ``add_bos`` pass it.

The output-head rows of the special tokens are zero, so their logits are
exactly 0. The other logits have a standard deviation of about
``sqrt(n_embd)`` (8 at the default n_embd of 64). So greedy decoding
practically never picks EOS, and the top logit is usually well ahead of the
second, which leaves few near-ties between batched and unbatched runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import gguf
import numpy as np

__all__ = [
    "TINY_SPACE",
    "TINY_SPEC_TYPES",
    "tiny_space",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "MASK_ID",
    "TokenizerSpec",
    "TargetDims",
    "make_tokenizer",
    "read_target_dims",
    "read_tokenizer",
    "write_qwen3_target",
    "write_dspark_draft",
]

#: The spec types of the tiny search space, each with its parameters' [low, high].
TINY_SPEC_TYPES: dict[str, dict[str, tuple[int, int]]] = {
    "draft-simple": {"draft_n_max": (1, 6)},
    "ngram-simple": {"ngram_simple_size_n": (1, 3), "ngram_simple_size_m": (2, 8)},
}


def tiny_space(
    draft: str = "tiny-draft.gguf",
    *,
    spec_types: dict[str, dict[str, tuple[int, int]]] | None = None,
    base_flags: str | None = None,
    extra: str = "",
) -> str:
    """The TOML of a search space over the models the tests write here (tiny-target.gguf and `draft`):
    TINY_SPEC_TYPES, or `spec_types` in their place; `base_flags` (a TOML list) under [model], `extra`
    (a [runtime] table) at the end."""
    lines = ["[model]", 'name = "tiny"', 'target = "tiny-target.gguf"', f'draft = "{draft}"', "context_size = 512"]
    if base_flags:
        lines.append(f"base_flags = {base_flags}")
    for spec_type, params in (TINY_SPEC_TYPES if spec_types is None else spec_types).items():
        lines += [
            "",
            f"[spec_types.{spec_type}]",
            *(f"{name} = [{low}, {high}]" for name, (low, high) in params.items()),
        ]
    if extra:
        lines += ["", extra]
    return "\n" + "\n".join(lines) + "\n"


#: The tiny search space with its draft left as `{draft}`, to `.format(draft=...)`.
TINY_SPACE = tiny_space("{draft}")

SPECIAL_TOKENS: tuple[str, ...] = ("<unk>", "<s>", "</s>", "<pad>", "<mask>")
UNK_ID, BOS_ID, EOS_ID, PAD_ID, MASK_ID = range(len(SPECIAL_TOKENS))

_RMS_EPS = 1e-6
_ROPE_FREQ_BASE = 1_000_000.0

# Standard deviations of the random weights (see module docstring).
_EMBD_STD = 1.0  # token embeddings
_PROJ_STD = 0.1  # attention / FFN / fc / markov matrices
_OUTPUT_STD = 1.0  # lm head: logits ~ N(0, n_embd) after the RMS norm


@dataclass(frozen=True)
class TokenizerSpec:
    """Tokenizer metadata of a tiny model (token list plus special ids and flags)."""

    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID
    pad_id: int = PAD_ID
    mask_id: int = MASK_ID
    add_bos: bool = False
    add_eos: bool = False

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class TargetDims:
    """Shape of a target model, as the draft writer needs it."""

    vocab_size: int
    n_embd: int
    n_layers: int
    n_head: int
    n_head_kv: int
    n_ff: int
    ctx: int


def make_tokenizer(vocab_size: int = 128, variant: str = "a", *, add_bos: bool = False) -> TokenizerSpec:
    """Build the ``test``-model tokenizer that the tiny fixtures use.

    ``variant`` is ``"a"`` or ``"b"``. The two variants have the same special
    tokens (ids 0-4) and different text for every id >= 5.
    ``add_bos`` only sets the metadata flag (see the module docstring).
    """
    if variant not in ("a", "b"):
        raise ValueError(f"tokenizer_variant must be 'a' or 'b', not {variant!r}")
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be > {len(SPECIAL_TOKENS)}")
    prefix = "tok_" if variant == "a" else "tokb_"
    tokens = list(SPECIAL_TOKENS) + [f"{prefix}{i}" for i in range(len(SPECIAL_TOKENS), vocab_size)]
    types = [int(gguf.TokenType.UNKNOWN)] + [int(gguf.TokenType.CONTROL)] * (len(SPECIAL_TOKENS) - 1)
    types += [int(gguf.TokenType.NORMAL)] * (vocab_size - len(SPECIAL_TOKENS))
    return TokenizerSpec(tokens=tuple(tokens), token_types=tuple(types), add_bos=add_bos)


def _add_tokenizer(w: gguf.GGUFWriter, tok: TokenizerSpec) -> None:
    w.add_tokenizer_model("test")
    w.add_token_list(list(tok.tokens))
    w.add_token_types(list(tok.token_types))
    w.add_token_scores([0.0] * tok.vocab_size)
    w.add_bos_token_id(tok.bos_id)
    w.add_eos_token_id(tok.eos_id)
    w.add_unk_token_id(tok.unk_id)
    w.add_pad_token_id(tok.pad_id)
    w.add_mask_token_id(tok.mask_id)
    w.add_add_bos_token(tok.add_bos)
    w.add_add_eos_token(tok.add_eos)


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.get_field(key)
    return default if f is None else f.contents()


@functools.lru_cache(maxsize=4)
def _read(path: Path, size: int, mtime_ns: int) -> gguf.GGUFReader:
    """One parse per file version: a reader walks every field, and at a real vocabulary (151,936 token
    strings) that takes seconds, which the tokenizer and the dimensions of one target would pay twice
    for each draft written for it."""
    return gguf.GGUFReader(str(path))


def _reader(path: str | Path) -> gguf.GGUFReader:
    stat = Path(path).stat()
    return _read(Path(path).resolve(), stat.st_size, stat.st_mtime_ns)


def read_tokenizer(path: str | Path) -> TokenizerSpec:
    """Read the tokenizer metadata back from a GGUF file written here."""
    r = _reader(path)
    tokens = _field(r, "tokenizer.ggml.tokens")
    if tokens is None:
        raise ValueError(f"{path}: no tokenizer.ggml.tokens")
    types = _field(r, "tokenizer.ggml.token_type", [int(gguf.TokenType.NORMAL)] * len(tokens))
    return TokenizerSpec(
        tokens=tuple(tokens),
        token_types=tuple(int(t) for t in types),
        bos_id=int(_field(r, "tokenizer.ggml.bos_token_id", BOS_ID)),
        eos_id=int(_field(r, "tokenizer.ggml.eos_token_id", EOS_ID)),
        unk_id=int(_field(r, "tokenizer.ggml.unknown_token_id", UNK_ID)),
        pad_id=int(_field(r, "tokenizer.ggml.padding_token_id", PAD_ID)),
        mask_id=int(_field(r, "tokenizer.ggml.mask_token_id", MASK_ID)),
        add_bos=bool(_field(r, "tokenizer.ggml.add_bos_token", False)),
        add_eos=bool(_field(r, "tokenizer.ggml.add_eos_token", False)),
    )


def read_target_dims(path: str | Path) -> TargetDims:
    """Read the dimensions of a ``qwen3`` target from its GGUF metadata."""
    r = _reader(path)
    arch = _field(r, "general.architecture")

    def need(key: str) -> int:
        v = _field(r, f"{arch}.{key}")
        if v is None:
            raise ValueError(f"{path}: missing {arch}.{key}")
        return int(v)

    return TargetDims(
        vocab_size=len(_field(r, "tokenizer.ggml.tokens")),
        n_embd=need("embedding_length"),
        n_layers=need("block_count"),
        n_head=need("attention.head_count"),
        n_head_kv=need("attention.head_count_kv"),
        n_ff=need("feed_forward_length"),
        ctx=need("context_length"),
    )


class _Weights:
    """Seeded float32 weight source. Shapes are numpy order, i.e. ggml ``ne`` reversed."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def normal(self, shape: Sequence[int], std: float) -> np.ndarray:
        return (self.rng.standard_normal(tuple(shape)) * std).astype(np.float32)

    @staticmethod
    def ones(n: int) -> np.ndarray:
        return np.ones((n,), dtype=np.float32)


def _check_heads(n_embd: int, n_head: int, n_head_kv: int) -> int:
    if n_embd % n_head:
        raise ValueError("n_embd must be divisible by n_head")
    if n_head % n_head_kv:
        raise ValueError("n_head must be divisible by n_head_kv")
    head_dim = n_embd // n_head
    if head_dim % 2:
        raise ValueError("head dim (n_embd / n_head) must be even for RoPE")
    return head_dim


def _add_attn_ffn_layer(
    w: gguf.GGUFWriter, rnd: _Weights, i: int, *, n_embd: int, n_head: int, n_head_kv: int, head_dim: int, n_ff: int
) -> None:
    """Qwen3-style block tensors (also the layout of a DFlash decoder layer)."""
    p = f"blk.{i}"
    w.add_tensor(f"{p}.attn_norm.weight", rnd.ones(n_embd))
    w.add_tensor(f"{p}.attn_q.weight", rnd.normal((n_head * head_dim, n_embd), _PROJ_STD))
    w.add_tensor(f"{p}.attn_k.weight", rnd.normal((n_head_kv * head_dim, n_embd), _PROJ_STD))
    w.add_tensor(f"{p}.attn_v.weight", rnd.normal((n_head_kv * head_dim, n_embd), _PROJ_STD))
    w.add_tensor(f"{p}.attn_output.weight", rnd.normal((n_embd, n_head * head_dim), _PROJ_STD))
    w.add_tensor(f"{p}.attn_q_norm.weight", rnd.ones(head_dim))
    w.add_tensor(f"{p}.attn_k_norm.weight", rnd.ones(head_dim))
    w.add_tensor(f"{p}.ffn_norm.weight", rnd.ones(n_embd))
    w.add_tensor(f"{p}.ffn_gate.weight", rnd.normal((n_ff, n_embd), _PROJ_STD))
    w.add_tensor(f"{p}.ffn_up.weight", rnd.normal((n_ff, n_embd), _PROJ_STD))
    w.add_tensor(f"{p}.ffn_down.weight", rnd.normal((n_embd, n_ff), _PROJ_STD))


def _add_common_hparams(
    w: gguf.GGUFWriter,
    *,
    ctx: int,
    n_embd: int,
    n_layers: int,
    n_ff: int,
    n_head: int,
    n_head_kv: int,
    head_dim: int,
    file_type: gguf.LlamaFileType = gguf.LlamaFileType.ALL_F32,
) -> None:
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(_ROPE_FREQ_BASE)
    w.add_layer_norm_rms_eps(_RMS_EPS)
    w.add_file_type(int(file_type))


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_qwen3_target(
    path: str | Path,
    *,
    vocab_size: int = 128,
    n_embd: int = 64,
    n_layers: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    ctx: int = 512,
    seed: int = 0,
    tokenizer_variant: str = "a",
    n_ff: int | None = None,
    add_bos: bool = False,
    chat_template: str | None = None,
) -> Path:
    """Write a tiny ``qwen3`` GGUF with random F32 weights and return its path.

    The model has ``n_layers`` blocks, head dim ``n_embd // n_head``, GQA with
    ``n_head_kv`` KV heads, FFN width ``n_ff`` (default ``2 * n_embd``), a
    separate (untied) ``output.weight`` and the ``test`` tokenizer from
    :func:`make_tokenizer` (bos 1, eos 2, mask 4; ``add_bos`` sets only the
    metadata flag). ``chat_template`` sets ``tokenizer.chat_template``: a chat model rather than a
    base model.
    The same arguments always give the same file.
    """
    path = Path(path)
    head_dim = _check_heads(n_embd, n_head, n_head_kv)
    n_ff = 2 * n_embd if n_ff is None else n_ff
    tok = make_tokenizer(vocab_size, tokenizer_variant, add_bos=add_bos)
    rnd = _Weights(seed)

    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_name(f"tiny-qwen3-{tokenizer_variant}-s{seed}")
    _add_common_hparams(
        w, ctx=ctx, n_embd=n_embd, n_layers=n_layers, n_ff=n_ff, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim
    )
    _add_tokenizer(w, tok)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    w.add_tensor("token_embd.weight", rnd.normal((vocab_size, n_embd), _EMBD_STD))
    for i in range(n_layers):
        _add_attn_ffn_layer(w, rnd, i, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim, n_ff=n_ff)
    w.add_tensor("output_norm.weight", rnd.ones(n_embd))
    output = rnd.normal((vocab_size, n_embd), _OUTPUT_STD)
    output[: len(SPECIAL_TOKENS)] = 0.0  # logit exactly 0: greedy practically never emits eos/bos/...
    w.add_tensor("output.weight", output)

    _finish(w)
    return path


def write_dspark_draft(
    path: str | Path,
    *,
    target_path: str | Path | None = None,
    vocab_size: int = 128,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    target_n_layers: int = 2,
    tokenizer_variant: str = "a",
    add_bos: bool = False,
    ctx: int = 512,
    n_layers: int = 1,
    n_ff: int | None = None,
    target_layers: Sequence[int] | None = None,
    block_size: int = 4,
    markov_rank: int = 8,
    confidence_head: bool = False,
    sample_from_anchor: bool | None = None,
    causal: bool | None = None,
    seed: int = 0,
    f16: bool = False,
) -> Path:
    """Write a tiny DSpark draft (``dflash`` architecture with a Markov head), or with
    ``markov_rank=0`` a plain DFlash draft (no Markov head: llama.cpp's ``draft-dflash``).

    Give ``target_path`` (a file from :func:`write_qwen3_target`) and the
    vocab size, n_embd, head counts, ctx, target layer count and the whole
    tokenizer are read from it. ``vocab_size``, ``n_embd``, ``n_head``,
    ``n_head_kv``, ``target_n_layers``, ``tokenizer_variant``, ``add_bos`` and
    ``ctx`` are then ignored. Without ``target_path`` they must match the
    target's arguments.

    ``target_layers`` are the target layer ids whose inputs feed the draft. The
    default is ``[0, target_n_layers - 1]``, or ``[0]`` for a 1-layer target.
    Every id must be below the target's layer count.
    ``fc.weight`` is ``{len(target_layers) * n_embd, n_embd}`` in ggml order.

    Written keys: ``dflash.{context_length, embedding_length, block_count,
    feed_forward_length, attention.head_count(_kv), attention.key_length,
    attention.value_length, attention.layer_norm_rms_epsilon, rope.freq_base,
    target_layers, block_size, has_confidence_head}``, plus
    ``dflash.sample_from_anchor`` and ``dflash.attention.causal`` when given.
    The tokenizer is the target's (it includes ``tokenizer.ggml.mask_token_id``).

    Written tensors: ``fc.weight``, ``enc.output_norm.weight``,
    ``output_norm.weight``, per layer ``attn_norm, attn_q, attn_k, attn_v,
    attn_output, attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up,
    ffn_down``, unless ``markov_rank`` is 0 ``markov_w1.weight`` and
    ``markov_w2.weight`` (both ``{markov_rank, n_vocab}``), and with ``confidence_head=True`` also
    ``conf_proj.weight {n_embd + markov_rank, 1}`` and ``conf_proj.bias {1}``.
    There is no token embedding or output head: llama.cpp borrows the
    target's at run time.
    """
    path = Path(path)
    if target_path is not None:
        dims = read_target_dims(target_path)
        tok = read_tokenizer(target_path)
        vocab_size, n_embd, n_head, n_head_kv = dims.vocab_size, dims.n_embd, dims.n_head, dims.n_head_kv
        target_n_layers, ctx = dims.n_layers, dims.ctx
    else:
        tok = make_tokenizer(vocab_size, tokenizer_variant, add_bos=add_bos)
    head_dim = _check_heads(n_embd, n_head, n_head_kv)
    n_ff = 2 * n_embd if n_ff is None else n_ff

    if target_layers is None:
        target_layers = sorted({0, target_n_layers - 1})
    target_layers = [int(x) for x in target_layers]
    if not target_layers or any(not 0 <= x < target_n_layers for x in target_layers):
        raise ValueError(f"target_layers {target_layers} must be non-empty ids below {target_n_layers}")
    if block_size < 1 or markov_rank < 0 or n_layers < 1:
        raise ValueError("block_size and n_layers must be >= 1, markov_rank >= 0")
    if confidence_head and not markov_rank:
        raise ValueError("a confidence head reads the Markov head: it needs markov_rank >= 1")

    rnd = _Weights(seed)
    w = gguf.GGUFWriter(str(path), "dflash")
    if f16:  # another quant of the same draft: its matrices in F16, its vectors F32 as llama.cpp keeps them
        add = w.add_tensor
        w.add_tensor = lambda name, array: add(name, array.astype(np.float16) if array.ndim == 2 else array)
    w.add_name(f"tiny-dspark-s{seed}")
    _add_common_hparams(
        w,
        ctx=ctx,
        n_embd=n_embd,
        n_layers=n_layers,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        file_type=gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32,
    )
    w.add_array("dflash.target_layers", target_layers)  # INT32 array
    w.add_uint32("dflash.block_size", block_size)
    w.add_bool("dflash.has_confidence_head", confidence_head)
    if sample_from_anchor is not None:
        w.add_bool("dflash.sample_from_anchor", sample_from_anchor)
    if causal is not None:
        w.add_bool("dflash.attention.causal", causal)
    _add_tokenizer(w, tok)

    n_in = len(target_layers) * n_embd
    w.add_tensor("fc.weight", rnd.normal((n_embd, n_in), _PROJ_STD))
    w.add_tensor("enc.output_norm.weight", rnd.ones(n_embd))
    for i in range(n_layers):
        _add_attn_ffn_layer(w, rnd, i, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim, n_ff=n_ff)
    w.add_tensor("output_norm.weight", rnd.ones(n_embd))
    if markov_rank:
        w.add_tensor("markov_w1.weight", rnd.normal((vocab_size, markov_rank), _PROJ_STD))
        w.add_tensor("markov_w2.weight", rnd.normal((vocab_size, markov_rank), _PROJ_STD))
    if confidence_head:
        w.add_tensor("conf_proj.weight", rnd.normal((1, n_embd + markov_rank), _PROJ_STD))
        w.add_tensor("conf_proj.bias", np.zeros((1,), dtype=np.float32))

    _finish(w)
    return path
