"""What a hub repo holds for `--hf ORG/REPO[:QUANT]`: its targets and drafts, found by llama-server's
naming rules (autotune.models.hub_names) in the repo's file list, before anything is downloaded.

The file list is the hub's (with each file's size); offline, or with the hub out of reach, it is what the
hub cache holds of the repo's last revision there.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import AutotuneError, HubSourceError
from autotune.models.hub import HubUnreachable, format_size, hub_cache_dir, repo_info
from autotune.models.hub_names import HubRef, is_model_file, is_split_part, quant_tag, sidecar_type
from autotune.spec.space import QUANT_PLACEHOLDER, HubSource


@dataclass(frozen=True)
class RepoFiles:
    """A repo's files at one commit, each with its size (None: the hub did not say)."""

    repo: str
    commit: str
    sizes: dict[str, int | None]
    from_cache: bool = False  # listed from the hub cache: the hub was not asked


def list_repo(repo: str, *, offline: bool) -> RepoFiles:
    """The repo's files: the hub's list, else (offline, or the hub out of reach) the hub cache's copy of its
    last revision there. Nothing there either: HubSourceError offline (bad input: run once online),
    AutotuneError where the hub could not be reached."""
    try:
        info = repo_info(HubSource(repo), offline=offline)
    except HubUnreachable as exc:
        cached = cached_repo(repo)
        if cached is not None:
            return cached
        why = f"nothing of {repo} is in the hub cache ({hub_cache_dir()}) and the hub was not asked: {exc}"
        if offline:
            raise HubSourceError(f"{why}; run once without --offline (and HF_HUB_OFFLINE) to download it") from None
        raise AutotuneError(why) from None
    return RepoFiles(repo, info.sha, {s.rfilename: getattr(s, "size", None) for s in info.siblings or ()})


def cached_repo(repo: str, cache_dir: Path | None = None) -> RepoFiles | None:
    """The files the hub cache holds of `repo` at the commit its `main` ref last resolved to."""
    folder = (cache_dir or hub_cache_dir()) / ("models--" + repo.replace("/", "--"))
    ref = folder / "refs" / "main"
    if not ref.is_file():
        return None
    commit = ref.read_text().strip()
    snapshot = folder / "snapshots" / commit
    files = (
        {p.relative_to(snapshot).as_posix(): p.stat().st_size for p in sorted(snapshot.rglob("*")) if p.is_file()}
        if snapshot.is_dir()
        else {}
    )
    return RepoFiles(repo, commit, files, from_cache=True) if files else None


@dataclass(frozen=True)
class HubModel:
    """The targets and drafts of one repo, by their names."""

    files: RepoFiles
    targets: tuple[str, ...]  # one per quantization, named alike (`Qwen3.6-27B-{quant}.gguf`)
    target_pattern: str
    drafts: dict[str, str]  # file name -> the draft spec type its name says
    left_out: tuple[str, ...] = ()  # model files not taken: split files, or named unlike the targets

    @property
    def repo(self) -> str:
        return self.files.repo

    @property
    def quants(self) -> tuple[str, ...]:
        """The targets' quantizations as their names spell them (what `target_pattern`'s `{quant}` stands for)."""
        return tuple(
            name[len(self.target_pattern.split(QUANT_PLACEHOLDER)[0]) :][: len(quant_tag(name))]
            for name in self.targets
        )


def discover(ref: HubRef, files: RepoFiles, *, with_sidecars: bool = True) -> HubModel:
    """The model files of the repo (each quantization, or `ref.quant`'s) and, with `with_sidecars`, every
    dspark-, dflash-, mtp- and eagle3- file beside them, all quantizations. A repo without a model file,
    or without one of the named quantization, is bad input."""
    models = [name for name in files.sizes if is_model_file(name)]
    whole = [name for name in models if not is_split_part(name) and quant_tag(name)]
    if ref.quant:
        whole = [name for name in whole if quant_tag(name) == ref.quant]
    if not whole:
        found = sorted({quant_tag(name) for name in models if quant_tag(name)})
        has = f"it has {', '.join(found)}" if found else "it has no .gguf model file"
        what = f"no {ref.quant} model file" if ref.quant else "no single-file .gguf model"
        raise HubSourceError(f"{files.repo}@{files.commit[:7]} has {what}: {has}")
    patterns = Counter(_pattern(name) for name in whole)
    pattern = patterns.most_common(1)[0][0]
    targets = tuple(name for name in whole if _pattern(name) == pattern)
    drafts = {
        name: sidecar_type(name)
        for name in files.sizes
        if with_sidecars and sidecar_type(name) and not is_split_part(name)
    }
    return HubModel(files, targets, pattern, drafts, tuple(name for name in models if name not in targets))


def found_line(model: HubModel, helper: HubModel | None = None, *, missing: set[str] = frozenset()) -> str:
    """One line: what the repo holds for the search and how large it is, said before anything is downloaded
    (`missing`: the files not in the hub cache)."""
    names = [*model.targets, *model.drafts, *(helper.targets if helper else ())]
    sizes = {**model.files.sizes, **(helper.files.sizes if helper else {})}
    parts = [f"targets {_sized(model, model.targets)}"]
    for spec_type in dict.fromkeys(model.drafts.values()):
        parts.append(f"{spec_type} drafts {_sized(model, [n for n, t in model.drafts.items() if t == spec_type])}")
    if helper is not None:
        parts.append(
            f"draft-simple drafts from {helper.repo}@{helper.files.commit[:7]} {_sized(helper, helper.targets)}"
        )
    if model.left_out:
        parts.append(f"left out {', '.join(model.left_out)} (split, or named unlike the targets)")
    total = _total([sizes.get(n) for n in names])
    fetch = [n for n in names if n in missing]
    download = (
        f", {len(fetch)} to download ({_total([sizes.get(n) for n in fetch])})" if fetch else ", all in the hub cache"
    )
    source = " (from the hub cache)" if model.files.from_cache else ""
    return f"{model.repo}@{model.files.commit[:7]}{source}: {'; '.join(parts)}: {len(names)} files, {total}{download}"


def _pattern(name: str) -> str:
    """The name with its quantization as `{quant}`: `Qwen3.6-27B-Q8_0.gguf` -> `Qwen3.6-27B-{quant}.gguf`."""
    tag = quant_tag(name)
    stem = name[: -len(".gguf")]
    return stem[: len(stem) - len(tag)] + QUANT_PLACEHOLDER + name[len(stem) :]


def _sized(model: HubModel, names) -> str:
    return ", ".join(f"{quant_tag(name)} {format_size(model.files.sizes.get(name))}" for name in names)


def _total(sizes: list[int | None]) -> str:
    known = [s for s in sizes if s is not None]
    return format_size(sum(known)) + ("" if len(known) == len(sizes) else " and some of unknown size")
