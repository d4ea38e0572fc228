"""Model files from the Hugging Face Hub: the sources a search space names, in the hub's own cache.

A target or draft table may say where its files come from (`hf = "org/repo"`, its `file` pattern with
`{quant}` standing for each quantization, an optional pinned `revision`). Downloads go through
`huggingface_hub` into its cache (`HF_HUB_CACHE`, else `HF_HOME/hub`, else ~/.cache/huggingface/hub),
where an unfinished download is a `blobs/*.incomplete` file (huggingface_hub 2.x removes it when the
transfer breaks off) and a finished one is renamed into place: the models dir is never written, so
it never holds a partial file. Every file is asked about before anything downloads: a target the hub
does not have is bad input, a draft it does not have is left out of the search (a space's draft names
may be a guess at what a conversion pipeline publishes). The token is the library's own (`HF_TOKEN`, or
`hf auth login`); autotune neither reads, prints nor stores it.

A file's revision is read from where it lies: `models--org--repo/snapshots/<commit>/<file>`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from autotune.errors import AutotuneError, HubSourceError
from autotune.spec.space import HubSource, SearchSpace
from autotune.spec.types import DRAFT_MODEL_TYPES, draft_member


class HubUnreachable(Exception):
    """The hub could not be asked (offline mode, no route, a server error): what is on disk is used."""


@dataclass(frozen=True)
class HubFile:
    """One file a search space names on the hub, and the table that names it."""

    role: str  # "model" or "drafts.<spec type>"
    source: HubSource
    filename: str
    quant: str | None = None  # the `{quant}` it was named with

    @property
    def label(self) -> str:
        revision = f"@{self.source.revision}" if self.source.revision else ""
        return f"{self.source.repo}{revision}/{self.filename}"


def hub_cache_dir() -> Path:
    """huggingface_hub's cache, read from the environment now (the library reads it once, at import)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_endpoint() -> str | None:
    """`HF_ENDPOINT` as it is now (a mirror, or the library's default when unset)."""
    return os.environ.get("HF_ENDPOINT") or None


def offline_mode() -> bool:
    """The library's own offline switch, `HF_HUB_OFFLINE`, as it is now."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_files(space: SearchSpace) -> list[HubFile]:
    """Every file the space names on the hub: the targets, then the files of each draft type it searches."""
    found = []
    tables = [("model", space.model.targets)]
    tables += [
        (f"drafts.{name}", pattern)
        for name, patterns in space.drafts.items()
        if name in DRAFT_MODEL_TYPES and name in space.spec_types
        for pattern in patterns
    ]
    for role, pattern in tables:
        if pattern.source is not None:
            found += [HubFile(role, pattern.source, name, quant) for quant, name in pattern.patterns()]
    return found


def cached_file(source: HubSource, filename: str, cache_dir: Path | None = None) -> Path | None:
    """The file of `source` in the hub cache (its pinned revision, else the one its branch last resolved
    to), read by huggingface_hub without touching the network; None when it is not there."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        path = hf_hub_download(
            source.repo,
            filename,
            revision=source.revision,
            cache_dir=cache_dir or hub_cache_dir(),
            local_files_only=True,
        )
    except LocalEntryNotFoundError:
        return None
    return Path(path)


def file_revision(path: Path) -> dict[str, str] | None:
    """{"repo", "revision"} of a file that lies in a hub cache snapshot; None for any other file."""
    parts = Path(path).parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots" and parts[i - 1].startswith("models--"):
            return {"repo": parts[i - 1][len("models--") :].replace("--", "/", 1), "revision": parts[i + 1]}
    return None


def file_revisions(paths: Iterable[Path]) -> dict[str, dict[str, str]]:
    """File name -> {"repo", "revision"} for the files among `paths` that came from the hub."""
    return {Path(p).name: rev for p in paths if p and (rev := file_revision(Path(p))) is not None}


@dataclass(frozen=True)
class PullResult:
    """What a pull did: each file's path, and whether it was downloaded now."""

    files: list[tuple[HubFile, Path, bool]]
    unreachable: str | None = None  # why the hub could not be asked (nothing was downloaded then)


def pull(
    space: SearchSpace,
    *,
    latest: bool,
    offline: bool = False,
    cache_dir: Path | None = None,
    on_file: Callable[[HubFile, str], None] = lambda f, what: None,
    on_commits: Callable[[dict[HubSource, str]], None] = lambda commits: None,
) -> PullResult:
    """Download the space's hub files into the hub cache.

    `latest` off (`autotune pull`): only the files not in the cache. `latest` on (nightly): ask the hub
    for the current revision of every source first, and download a file whose revision is new (one whose
    content the cache holds already is only linked into the new revision: not a download).
    Every source is checked before anything is downloaded: a repo, revision or file that does not
    exist raises HubSourceError (bad input). When the hub cannot be asked (or `offline`), the result says
    why and the files on disk stay as they are; a file missing then raises AutotuneError only without
    `latest`. `on_commits` hears each source's current commit before anything is downloaded, `on_file`
    why each file is downloaded and how large it is, before its progress bar.
    """
    cache_dir = cache_dir or hub_cache_dir()
    files = hub_files(space)
    wanted = files if latest else [f for f in files if cached_file(f.source, f.filename, cache_dir) is None]
    if not wanted:
        return PullResult([(f, cached_file(f.source, f.filename, cache_dir), False) for f in files])
    try:
        commits, sizes, _ = _check_sources(wanted, offline=offline)
    except HubUnreachable as exc:
        if not latest:
            raise AutotuneError(f"cannot download {wanted[0].label}: {exc}") from None
        return PullResult([], unreachable=str(exc))
    on_commits(commits)
    # where each file lies before any download: a download moves its repo's branch ref to the new commit
    cached = {f: cached_file(f.source, f.filename, cache_dir) for f in files}
    done = []
    for hub_file in files:
        before = cached[hub_file]
        if hub_file not in wanted or (
            before is not None and file_revision(before)["revision"] == commits[hub_file.source]
        ):
            done.append((hub_file, before, False))
            continue
        if before is not None and not _will_download(hub_file, cache_dir):  # a new revision, the same bytes
            done.append((hub_file, _download(hub_file, cache_dir), False))
            continue
        why = "a new revision" if before is not None else "not in the cache"
        on_file(hub_file, f"{why}, {format_size(sizes.get(hub_file))}")
        done.append((hub_file, _download(hub_file, cache_dir), True))
    return PullResult(done)


@dataclass(frozen=True)
class HubAnswer:
    """What the hub said of the files a search would download: each one it has, with its size (None each
    where it could not be asked), and the drafts it does not have, which the search leaves out."""

    sizes: dict[HubFile, int | None]
    absent: tuple[HubFile, ...] = ()
    unreachable: str | None = None  # why the hub could not be asked: nothing was downloaded

    @property
    def files(self) -> list[HubFile]:
        """The files to download, in the order the space names them."""
        return list(self.sizes)

    @property
    def left_out(self) -> list[str]:
        """A line for each draft file the hub does not have."""
        return [
            f"the hub has no {f.filename} in {f.source.repo}"
            + (f" at revision {f.source.revision}" if f.source.revision else "")
            + f": {f.role.removeprefix('drafts.')}'s {f.quant or 'draft'} left out of this run"
            for f in self.absent
        ]

    @property
    def notes(self) -> list[str]:
        """What a search says of it: the files not downloaded where the hub was out of reach, else the drafts
        left out."""
        if self.unreachable:
            names = ", ".join(f.label for f in self.files)
            return [f"not downloaded ({self.unreachable}): {names}; going on with the files on disk"]
        return self.left_out


def ask_hub(missing: list[HubFile], *, offline: bool = False) -> HubAnswer:
    """What the hub has of `missing` and how large each is. A draft it does not have is only named
    (`absent`): the space's draft names can be a guess at what a conversion pipeline publishes, and the
    search goes on without it. A target it does not have, or a repo or revision that does not exist,
    raises HubSourceError (bad input). Where the hub cannot be asked (`offline`, HF_HUB_OFFLINE, no
    route) every file is kept, its size unknown."""
    try:
        _, sizes, absent = _check_sources(missing, offline=offline, drafts_optional=True)
    except HubUnreachable as exc:
        return HubAnswer({f: None for f in missing}, unreachable=str(exc))
    return HubAnswer(sizes, tuple(absent))


def fetch_missing(
    missing: list[HubFile],
    *,
    offline: bool = False,
    cache_dir: Path | None = None,
    on_start: Callable[[str], None] = lambda line: None,
) -> HubAnswer:
    """Download `missing` (hub files a search needs that are on neither the hub cache nor the models dir)
    before the first trial: the hub is asked about every file first (`ask_hub`: a target it lacks raises
    HubSourceError before anything downloads, a draft it lacks is not downloaded), then `on_start` hears
    one line naming the files and their sizes, then each shows huggingface_hub's progress bar. Offline
    (`offline`, or HF_HUB_OFFLINE) or with the hub out of reach nothing is downloaded. The answer's
    `notes` say what was not downloaded and which drafts the search leaves out."""
    answer = ask_hub(missing, offline=offline)
    if answer.unreachable or not answer.files:
        return answer
    cache_dir = cache_dir or hub_cache_dir()
    on_start(download_line(answer.files, answer.sizes, cache_dir))
    for hub_file in answer.files:
        _download(hub_file, cache_dir)
    return answer


def without_hub_files(space: SearchSpace, dropped: Iterable[HubFile]) -> SearchSpace:
    """`space` without the draft files `dropped`: each leaves its table's quants, and a table left with none
    goes (a draft type left with no table then has no draft files, and the search leaves it out)."""
    dropped = set(dropped)
    if not dropped:
        return space
    drafts = {}
    for spec_type, patterns in space.drafts.items():
        kept = []
        for pattern in patterns:
            named = [
                (quant, HubFile(f"drafts.{spec_type}", pattern.source, name, quant))
                for quant, name in pattern.patterns()
            ]
            if not any(f in dropped for _, f in named):
                kept.append(pattern)
            elif not all(f in dropped for _, f in named):  # some of its quants: only a `{quant}` table has several
                kept.append(replace(pattern, quants=tuple(quant for quant, f in named if f not in dropped)))
        drafts[spec_type] = tuple(kept)
    emptied = {t for t, patterns in drafts.items() if not patterns and space.drafts.get(t)}
    space = replace(space, drafts={t: patterns for t, patterns in drafts.items() if t not in emptied})
    # a draft type whose every file the hub lacks leaves the space: with no draft, it would pass as draft-less
    return space.restricted_to({t for t in space.spec_types if t not in emptied and draft_member(t) not in emptied})


def download_line(missing: list[HubFile], sizes: dict[HubFile, int | None], cache_dir: Path) -> str:
    """The line said before a download: the files, their sizes and total, and what each draft quant adds
    (a second quant of one draft, such as BF16 beside Q8_0, is a download of its own)."""
    known = [size for size in sizes.values() if size is not None]
    total = format_size(sum(known)) if len(known) == len(missing) else "size unknown"
    by_quant: dict[str, list[int | None]] = {}
    for f in missing:
        if f.role.startswith("drafts.") and f.quant:
            by_quant.setdefault(f.quant, []).append(sizes.get(f))
    quants = (
        ""
        if len(by_quant) < 2
        else ", drafts "
        + ", ".join(
            f"{quant} {format_size(sum(v)) if None not in v else 'size unknown'}" for quant, v in by_quant.items()
        )
    )
    return (
        f"downloading {len(missing)} file{'s' if len(missing) > 1 else ''} from the hub ({total}{quants}) into "
        f"{cache_dir}: " + "; ".join(f"{f.label} ({format_size(sizes.get(f))})" for f in missing)
    )


def format_size(size: int | None) -> str:
    """Bytes as the hub shows them (decimal units): 5.03 GB, 639 MB."""
    if size is None:
        return "size unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} B"


def _check_sources(
    files: list[HubFile], *, offline: bool, drafts_optional: bool = False
) -> tuple[dict[HubSource, str], dict[HubFile, int | None], list[HubFile]]:
    """The current commit of each source, the size of each file the hub has (in the order of `files`) and,
    with `drafts_optional`, the drafts it does not have. A repo or revision that does not exist, or any other
    file the hub does not have, raises HubSourceError: its one line lists the GGUF files the repo has, so that
    the space can be fixed."""
    infos = {source: repo_info(source, offline=offline) for source in dict.fromkeys(f.source for f in files)}
    listings = {source: {s.rfilename: s for s in info.siblings or ()} for source, info in infos.items()}
    sizes: dict[HubFile, int | None] = {}
    absent: list[HubFile] = []
    for hub_file in files:
        listing = listings[hub_file.source]
        if hub_file.filename in listing:
            sizes[hub_file] = getattr(listing[hub_file.filename], "size", None)
        elif drafts_optional and hub_file.role != "model":
            absent.append(hub_file)
        else:
            ggufs = sorted(name for name in listing if name.lower().endswith(".gguf"))
            raise HubSourceError(
                f"{hub_file.source.repo} has no file {hub_file.filename} at revision "
                f"{hub_file.source.revision or 'main'} (named by {hub_file.role} of the search space); "
                + (f"its GGUF files: {', '.join(ggufs)}" if ggufs else "it has no GGUF file")
            )
    return {source: info.sha for source, info in infos.items()}, sizes, absent


def repo_info(source: HubSource, *, offline: bool):
    """The hub's answer about `source` (its commit and files with their sizes); HubUnreachable where it cannot
    be asked (`offline`, HF_HUB_OFFLINE, no route, a server error), HubSourceError for a repo or revision
    that does not exist or is gated."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        if offline:
            raise OfflineModeIsEnabled("--offline")
        if offline_mode():
            raise OfflineModeIsEnabled("HF_HUB_OFFLINE=1")
        return HfApi(endpoint=hub_endpoint()).model_info(source.repo, revision=source.revision, files_metadata=True)
    except OfflineModeIsEnabled as exc:
        raise HubUnreachable(f"offline mode ({exc})") from None
    except GatedRepoError:
        raise HubSourceError(
            f"{source.repo} is gated: accept its terms on the hub and set HF_TOKEN (or run `hf auth login`)"
        ) from None
    except RevisionNotFoundError:
        raise HubSourceError(f"{source.repo} has no revision {source.revision!r}") from None
    except RepositoryNotFoundError:
        raise HubSourceError(
            f"no repository {source.repo} on the hub (or it is private: set HF_TOKEN or run `hf auth login`)"
        ) from None
    except HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code < 500:
            raise HubSourceError(f"{source.repo}: the hub refused: {_first_line(exc)}") from None
        raise HubUnreachable(f"the hub answered {_first_line(exc)}") from None
    except transport_errors() as exc:
        raise HubUnreachable(f"cannot reach the hub ({type(exc).__name__}: {_first_line(exc)})") from None


def _download(hub_file: HubFile, cache_dir: Path) -> Path:
    """Download one file (the library shows its progress bar on stderr); a broken transfer leaves
    nothing but the hub cache's own bookkeeping, never a file in the models dir."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(
            hf_hub_download(
                hub_file.source.repo,
                hub_file.filename,
                revision=hub_file.source.revision,
                cache_dir=cache_dir,
                endpoint=hub_endpoint(),
            )
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, *transport_errors()) as exc:
        raise AutotuneError(
            f"download of {hub_file.label} failed: {_first_line(exc)}; run the command again to retry"
        ) from None


def _will_download(hub_file: HubFile, cache_dir: Path) -> bool:
    """Whether fetching `hub_file` at the hub's current revision transfers its content (huggingface_hub's
    dry run: one HEAD request); a file it cannot ask about is left to the download to report."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return hf_hub_download(
            hub_file.source.repo,
            hub_file.filename,
            revision=hub_file.source.revision,
            cache_dir=cache_dir,
            endpoint=hub_endpoint(),
            dry_run=True,
        ).will_download
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, *transport_errors()):
        return True


def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's errors for a request that never got an answer (refused, reset, timed out)."""
    try:
        import httpx2 as http
    except ImportError:  # huggingface_hub before 2.x speaks httpx
        import httpx as http
    return (http.TransportError,)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
