"""Following a search space's hub repos: what a new revision brings, said before its files are fetched.

ggml-org's conversion pipeline (github.com/ggml-org/convert) publishes e.g. ggml-org/Qwen3-8B-GGUF from
three source repos. Every week it asks the hub for each source's commit and re-converts only when one
moved; it then writes those commits to `.src_sha` in the published repo, one `KEY=<commit>` line per
source (`PRIMARY` the target's, `DFLASH` and `DSPARK` the drafts'), and its README links the sources.
When no source moved it uploads the README alone. So a new revision's `.src_sha` says which source has
a new release (`new draft release: dspark from deepseek-ai/dspark_qwen3_8b_block7@abc1234 (was
9f8e7d6)`), and a new revision whose files are the blobs the cache already holds changed nothing a
search space uses (a README update).

`.src_sha` and the README are read at a commit hash, from the hub cache when there (reading by commit
never moves the cache's branch ref): the current one every time, so the next new revision finds the
one it replaces on disk.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from autotune.models.hub import (
    HubFile,
    cached_file,
    file_revision,
    hub_cache_dir,
    hub_endpoint,
    hub_files,
    pull,
    transport_errors,
)
from autotune.spec.space import HubSource, SearchSpace

SOURCE_COMMITS_FILE = ".src_sha"
README_FILE = "README.md"
#: the pipeline's key for the target model's source; every other key is a draft's
TARGET_SOURCE_KEY = "PRIMARY"

_SOURCE_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=([0-9a-f]{7,40})\s*$", re.MULTILINE)
_HUB_LINK = re.compile(r"huggingface\.co/([\w.-]+/[\w.-]+)")


@dataclass(frozen=True)
class SourceRelease:
    """One source of a converted repo at a new commit."""

    key: str  # as `.src_sha` spells it: DSPARK
    repo: str | None  # deepseek-ai/dspark_qwen3_8b_block7, from the README's links (None: not linked)
    commit: str
    previous: str | None  # the commit the files on disk were converted from (None: not known)

    def line(self) -> str:
        """`new draft release: dspark from deepseek-ai/dspark_qwen3_8b_block7@abc1234 (was 9f8e7d6)`."""
        kind = "target" if self.key == TARGET_SOURCE_KEY else "draft"
        where = f"from {self.repo}@{self.commit[:7]}" if self.repo else f"at source commit {self.commit[:7]}"
        was = f" (was {self.previous[:7]})" if self.previous else ""
        return f"new {kind} release: {self.key.lower()} {where}{was}"


def follow_releases(space: SearchSpace, note: Callable[[str], None], *, offline: bool = False) -> list[str]:
    """Bring each hub file of `space` to the hub's current revision (`pull`), saying which source releases
    a new revision brings before anything is downloaded and, after, which new revisions changed none of
    these files; returns those lines (what a preset made from the new files keeps as its reason).
    Offline (`offline`, or HF_HUB_OFFLINE) or with the hub out of reach, one line says so and the files
    on disk stay as they are."""
    files = hub_files(space)
    if not files:
        return []
    cache_dir = hub_cache_dir()
    watch = RevisionWatch({f: cached_file(f.source, f.filename, cache_dir) for f in files}, cache_dir)
    news: list[str] = []

    def say(lines: list[str]) -> None:
        for line in lines:
            note(line)
        news.extend(lines)

    result = pull(
        space,
        latest=True,
        offline=offline,
        cache_dir=cache_dir,
        on_commits=lambda commits: say(watch.releases(commits)),
        on_file=lambda f, why: note(f"downloading {f.label} ({why})"),
    )
    if result.unreachable:
        note(f"hub not asked for new revisions: {result.unreachable}; going on with the files on disk")
        return []
    say(watch.unchanged(result.files))
    return news


def sources_moved(repo: str, old: str, new: str, cache_dir: Path | None = None) -> bool:
    """Whether revision `new` of `repo` may hold other files than `old`: a new commit, unless both have a
    `.src_sha` naming the same source commits (the pipeline then uploaded its README alone)."""
    if old == new:
        return False
    cache_dir = cache_dir or hub_cache_dir()
    before, after = (_text_at(repo, commit, SOURCE_COMMITS_FILE, cache_dir) for commit in (old, new))
    if before is None or after is None:
        return True
    return parse_source_commits(before) != parse_source_commits(after)


def parse_source_commits(text: str) -> dict[str, str]:
    """`KEY=<commit>` lines of a `.src_sha`, by key."""
    return {key: commit for key, commit in _SOURCE_LINE.findall(text)}


def linked_sources(readme: str, keys: Iterable[str]) -> dict[str, str]:
    """Each key's source repo among the README's hub links: the link that names it (`DSPARK` in
    deepseek-ai/dspark_qwen3_8b_block7), and for the target's key the one link left."""
    keys = list(keys)
    links = list(dict.fromkeys(_HUB_LINK.findall(readme)))
    found = {}
    for key in keys:
        named = [link for link in links if key.lower() in link.lower()]
        if len(named) == 1:
            found[key] = named[0]
    left = [link for link in links if link not in found.values()]
    if TARGET_SOURCE_KEY in keys and TARGET_SOURCE_KEY not in found and len(left) == 1:
        found[TARGET_SOURCE_KEY] = left[0]
    return found


class RevisionWatch:
    """What new revisions of a search space's hub repos bring, told around a pull: the source releases as
    soon as the hub's current commits are known (before anything is downloaded), then each repo whose new
    revision changed none of the space's files (their content in the cache is the same blob)."""

    def __init__(self, before: dict[HubFile, Path | None], cache_dir: Path):
        self.before = before  # each hub file's cached path before the pull (None: not cached)
        self.cache_dir = cache_dir
        self._rebuilt: dict[str, bool] = {}  # repo with a `.src_sha` -> whether a source moved

    def releases(self, commits: dict[HubSource, str]) -> list[str]:
        """A line per source release the new revision of each followed repo was converted from. Each
        repo's `.src_sha` is read at its current commit every time, so the next new revision finds the
        one it replaces in the cache."""
        lines = []
        for source, new in commits.items():
            if source.revision is not None:
                continue
            new_sources = self._source_commits(source.repo, new)
            old = self._old_commit(source.repo)
            if not new_sources or old is None or old == new:
                continue
            old_sources = self._source_commits(source.repo, old)
            if not old_sources:  # what the files on disk were converted from is not known
                continue
            moved = {key: commit for key, commit in new_sources.items() if old_sources.get(key) != commit}
            self._rebuilt[source.repo] = bool(moved)
            if not moved:
                continue
            repos = linked_sources(_text_at(source.repo, new, README_FILE, self.cache_dir) or "", new_sources)
            lines += [
                SourceRelease(key, repos.get(key), commit, old_sources.get(key)).line() for key, commit in moved.items()
            ]
        return lines

    def unchanged(self, after: Iterable[tuple[HubFile, Path | None, bool]]) -> list[str]:
        """A line per followed repo whose new revision changed none of the space's files."""
        by_repo: dict[str, list[tuple[Path | None, Path | None]]] = {}
        for hub_file, path, _ in after:
            if hub_file.source.revision is None:
                by_repo.setdefault(hub_file.source.repo, []).append((self.before.get(hub_file), path))
        lines = []
        for repo, pairs in by_repo.items():
            old, new = _commit(p for p, _ in pairs), _commit(q for _, q in pairs)
            if old is None or new is None or old == new:
                continue
            if all(p is not None and q is not None and p.resolve() == q.resolve() for p, q in pairs):
                readme = " (the same sources: a README update)" if self._rebuilt.get(repo) is False else ""
                lines.append(f"{repo}@{new[:7]} (was {old[:7]}) changes no file this search space uses{readme}")
        return lines

    def _old_commit(self, repo: str) -> str | None:
        return _commit(path for hub_file, path in self.before.items() if hub_file.source == HubSource(repo))

    def _source_commits(self, repo: str, commit: str) -> dict[str, str]:
        text = _text_at(repo, commit, SOURCE_COMMITS_FILE, self.cache_dir)
        return parse_source_commits(text) if text else {}


def _commit(paths: Iterable[Path | None]) -> str | None:
    """The one commit the snapshots of `paths` lie in (None: a file missing, or snapshots of several)."""
    commits = {(file_revision(p) or {}).get("revision") if p is not None else None for p in paths}
    return commits.pop() if len(commits) == 1 else None


def _text_at(repo: str, commit: str, filename: str, cache_dir: Path) -> str | None:
    """A small file of `repo` at `commit`, from the hub cache or else the hub; None where the repo has
    no such file there or the hub cannot be asked."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        path = hf_hub_download(repo, filename, revision=commit, cache_dir=cache_dir, endpoint=hub_endpoint())
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, *transport_errors()):
        return None
    return Path(path).read_text(errors="replace")
