"""Device memory for the in-process engine: what a configuration's models and contexts need, and what
the devices have free, so a pair that cannot fit fails its trial instead of crashing the worker.

* needs (`estimate`), from the GGUF headers before anything loads: every tensor's bytes (every layer
  is offloaded, as `-ngl all`), the KV cache of each context (n_ctx cells x layers x the K and V
  widths x the cache type's bytes; the K/V heads and widths from the file's attention keys) and a
  compute buffer of one ubatch (its logits, plus its widest activations). An estimate, not a promise:
  llama.cpp's own buffers differ by some tens of MiB.
* free (`free_bytes`), measured through llama-cpp-python's libggml: `ggml_backend_dev_memory` of every
  GPU device ggml registered (llama.cpp spreads the layers over all of them), or of the CPU device when
  there is none (a CPU build keeps everything in host memory, which that device reports).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from autotune.gguf.header import read_header

__all__ = ["GIB", "ContextShape", "DeviceMemory", "devices", "estimate", "free_bytes"]

GIB = 1024**3

#: bytes per element of the KV cache types llama-server's -ctk/-ctv take (ggml block sizes folded in)
_CACHE_TYPE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}
_GPU_TYPES = (1, 2)  # enum ggml_backend_dev_type: CPU 0, GPU 1, IGPU 2, ACCEL 3, META 4


@dataclass(frozen=True)
class DeviceMemory:
    name: str
    description: str
    is_gpu: bool
    free: int
    total: int


@cache
def _ggml():
    from llama_cpp import _ggml

    lib = _ggml.libggml
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
        getattr(lib, name).restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.ggml_backend_dev_memory.restype = None
    return lib


def devices() -> list[DeviceMemory]:
    """Every device ggml has registered, with its free and total memory now."""
    import autotune.llamacpp.bindings  # noqa: F401  (llama_backend_init: the backends are registered)

    lib = _ggml()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(
            DeviceMemory(
                lib.ggml_backend_dev_name(dev).decode(),
                lib.ggml_backend_dev_description(dev).decode(),
                lib.ggml_backend_dev_type(dev) in _GPU_TYPES,
                free.value,
                total.value,
            )
        )
    return out


def free_bytes() -> tuple[int, bool]:
    """Free memory where the models go, and whether that is GPU memory (else host memory)."""
    found = devices()
    gpus = [d for d in found if d.is_gpu]
    return (sum(d.free for d in gpus), True) if gpus else (sum(d.free for d in found if d.name.upper() == "CPU"), False)


@dataclass(frozen=True)
class ContextShape:
    """A llama.cpp context as memory sees it."""

    model: Path
    n_ctx: int
    n_ubatch: int
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"


def estimate(models: list[Path], contexts: list[ContextShape]) -> int:
    """Bytes that loading `models` and creating `contexts` takes on the device (see the module doc)."""
    return sum(_weights(path) for path in models) + sum(_context(shape) for shape in contexts)


@cache
def _header(path: Path):
    return read_header(path)


def _weights(path: Path) -> int:
    return sum(t.n_bytes for t in _header(path).tensors)


def _context(shape: ContextShape) -> int:
    header = _header(shape.model)
    arch = header.get("general.architecture")

    def key(name: str, default=None):
        value = header.get(f"{arch}.{name}", default)
        return max(value) if isinstance(value, (list, tuple)) else value  # per-layer arrays: the widest

    n_embd = int(key("embedding_length"))
    n_head = int(key("attention.head_count", 1))
    n_head_kv = int(key("attention.head_count_kv", n_head))
    width_k = int(key("attention.key_length", n_embd // n_head)) * n_head_kv
    width_v = int(key("attention.value_length", n_embd // n_head)) * n_head_kv
    n_layer = int(key("block_count"))
    kv = (
        shape.n_ctx
        * n_layer
        * (width_k * _CACHE_TYPE_BYTES[shape.cache_type_k] + width_v * _CACHE_TYPE_BYTES[shape.cache_type_v])
    )
    n_vocab = len(header.get("tokenizer.ggml.tokens") or ())
    n_ff = int(key("feed_forward_length", 4 * n_embd))
    compute = 4 * shape.n_ubatch * (n_vocab + 2 * n_ff + 4 * n_embd)
    return int(kv + compute)
