"""A fast reader of GGUF headers: metadata and the tensor table, without touching tensor data.

gguf's GGUFReader builds a numpy view for every part of every field, which takes ~10 s for the
262k-token vocabulary of Gemma 3 on a small CPU; autotune only needs scalars, the token texts and
the tensor table, so it parses those directly (format: ggml's docs/gguf.md).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from autotune.errors import ModelFileError

_MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
#: Arrays kept in full; other arrays (scores, token types, merges) are skipped over.
_KEPT_ARRAYS = {"tokenizer.ggml.tokens"}
_SMALL_ARRAY = 4096


class GGUFFormatError(ValueError):
    """The bytes are not a well-formed GGUF header."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    tensor_type: GGMLQuantizationType
    data_offset: int  # absolute, in the file

    @property
    def n_elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def n_bytes(self) -> int:
        block_size, type_size = GGML_QUANT_SIZES[self.tensor_type]
        return self.n_elements // block_size * type_size


@dataclass(frozen=True)
class GGUFHeader:
    fields: dict[str, Any]
    tensors: tuple[TensorInfo, ...]

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


def read_header(path: Path) -> GGUFHeader:
    """Parse `path`'s header; raises GGUFFormatError (or OSError) when it is not a readable GGUF."""
    with path.open("rb") as handle:
        if path.stat().st_size < 24:
            raise GGUFFormatError("file too short for a GGUF header")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _Parser(data).parse()


def check_gguf(path: Path) -> GGUFHeader:
    """Parse the file's GGUF header and tensor table, and check no tensor runs past the end of the file."""
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")
    try:
        header = read_header(path)
    except (GGUFFormatError, OSError, ValueError) as exc:
        raise ModelFileError(f"{path}: not a readable GGUF file ({exc}); re-download or re-convert it") from exc
    size = path.stat().st_size
    for tensor in header.tensors:
        if tensor.data_offset + tensor.n_bytes > size:
            raise ModelFileError(
                f"{path}: truncated GGUF (tensor {tensor.name} ends past the end of the file); re-download it"
            )
    return header


class _Parser:
    def __init__(self, data: mmap.mmap):
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str) -> Any:
        try:
            (value,) = struct.unpack_from(fmt, self.data, self.pos)
        except struct.error as exc:
            raise GGUFFormatError("header ends early") from exc
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        raw = self.raw_string()
        return raw.decode("utf-8", errors="replace")

    def raw_string(self) -> bytes:
        length = self.unpack("<Q")
        end = self.pos + length
        if end > len(self.data):
            raise GGUFFormatError("string runs past the end of the file")
        raw = self.data[self.pos : end]
        self.pos = end
        return raw

    def value(self, value_type: int, key: str) -> Any:
        if value_type in _SCALARS:
            return self.unpack(_SCALARS[value_type])
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY:
            return self.array(key)
        raise GGUFFormatError(f"unknown value type {value_type} for {key}")

    def array(self, key: str) -> Any:
        item_type = self.unpack("<I")
        count = self.unpack("<Q")
        if key in _KEPT_ARRAYS and item_type == _STRING:
            return [self.raw_string() for _ in range(count)]
        if count <= _SMALL_ARRAY:
            return [self.value(item_type, key) for _ in range(count)]
        if item_type in _SCALARS:  # a big numeric array: skip it
            self.pos += count * struct.calcsize(_SCALARS[item_type])
        else:
            for _ in range(count):
                self.value(item_type, key)
        return None

    def parse(self) -> GGUFHeader:
        if self.data[:4] != _MAGIC:
            raise GGUFFormatError("no GGUF magic number at the start")
        self.pos = len(_MAGIC)
        version = self.unpack("<I")
        if version < 2:
            raise GGUFFormatError(f"GGUF version {version} is too old")
        n_tensors, n_fields = self.unpack("<Q"), self.unpack("<Q")
        fields = {}
        for _ in range(n_fields):
            key = self.string()
            fields[key] = self.value(self.unpack("<I"), key)
        infos = []
        for _ in range(n_tensors):
            name = self.string()
            shape = tuple(self.unpack("<Q") for _ in range(self.unpack("<I")))
            type_id = self.unpack("<I")
            try:
                tensor_type = GGMLQuantizationType(type_id)
            except ValueError as exc:
                raise GGUFFormatError(f"tensor {name} has unknown type {type_id}") from exc
            infos.append((name, shape, tensor_type, self.unpack("<Q")))
        alignment = int(fields.get("general.alignment", 32))
        start = (self.pos + alignment - 1) // alignment * alignment
        tensors = tuple(TensorInfo(name, shape, kind, start + offset) for name, shape, kind, offset in infos)
        return GGUFHeader(fields, tensors)
