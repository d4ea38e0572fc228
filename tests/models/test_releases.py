"""Following ggml-org's conversions of Qwen3 8B: a night reads ggml-org/Qwen3-8B-GGUF's revision and its
`.src_sha`, says a new DSpark release in one line before fetching it, fetches only the files whose content
changed, says a README-only revision in one line, and offline asks nothing.

The hub is `LocalHubEndpoint` (127.0.0.1) serving the repos the bundled qwen3-8b space names, read by the
real huggingface_hub client. Its `.src_sha` is written as ggml-org/convert's convert.sh writes it (one
`KEY=<commit>` line per source, keys sorted), its README links the three sources as that pipeline's
README for models/qwen3-8b does.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.models.hub import format_size
from autotune.models.releases import SourceRelease, follow_releases, linked_sources, parse_source_commits
from autotune.spec.space import load_model_space
from autotune.testing.hub_fixtures import HubRepo, LocalHubEndpoint, repo_folder

C1, C2, C3 = "1" * 40, "2" * 40, "3" * 40
GGML = "ggml-org/Qwen3-8B-GGUF"
PRIMARY, DFLASH = "b968826" + "0" * 33, "9b41424" + "0" * 33
DSPARK_BEFORE, DSPARK_AFTER = "9f8e7d6" + "0" * 33, "abc1234" + "0" * 33
README = (
    b"# Qwen3-8B\n\n### Source models\n- https://huggingface.co/Qwen/Qwen3-8B\n"
    b"- https://huggingface.co/z-lab/Qwen3-8B-DFlash-b16\n"
    b"- https://huggingface.co/deepseek-ai/dspark_qwen3_8b_block7\n"
)


def src_sha(dspark: str) -> bytes:
    return f"DFLASH={DFLASH}\nDSPARK={dspark}\nPRIMARY={PRIMARY}\n".encode()


def ggml_org(commit: str, *, dspark: bytes, dspark_source: str, readme: bytes = README) -> HubRepo:
    """ggml-org's repo as convert.sh uploads it: the target, both drafts at Q8_0 and BF16 (a DSpark release
    re-converts both of its quants)."""
    return HubRepo(
        commit,
        {
            "Qwen3-8B-Q8_0.gguf": b"ggml-org's target",
            "dspark-Qwen3-8B-Q8_0.gguf": dspark,
            "dspark-Qwen3-8B-BF16.gguf": dspark + b" in BF16",
            "dflash-Qwen3-8B-Q8_0.gguf": b"dflash draft",
            "dflash-Qwen3-8B-BF16.gguf": b"dflash BF16",
            ".src_sha": src_sha(dspark_source),
            "README.md": readme,
        },
    )


@pytest.fixture
def hub_repos() -> dict[str, HubRepo]:
    """Every repo search_spaces/qwen3-8b.toml names, at their first revision."""
    return {
        "Qwen/Qwen3-8B-GGUF": HubRepo(C1, {"Qwen3-8B-Q4_K_M.gguf": b"q4 target", "Qwen3-8B-Q8_0.gguf": b"q8 target"}),
        "Qwen/Qwen3-0.6B-GGUF": HubRepo(C1, {"Qwen3-0.6B-Q8_0.gguf": b"0.6B draft"}),
        "Qwen/Qwen3-1.7B-GGUF": HubRepo(C1, {"Qwen3-1.7B-Q8_0.gguf": b"1.7B draft"}),
        GGML: ggml_org(C1, dspark=b"dspark draft, first release", dspark_source=DSPARK_BEFORE),
    }


class Notes:
    def __init__(self):
        self.lines: list[str] = []

    def note(self, text: str) -> None:
        self.lines.append(text)


def night(notes: Notes | None = None) -> tuple[list[str], Notes]:
    notes = notes or Notes()
    return follow_releases(load_model_space("qwen3-8b", None), notes.note), notes


def gets(hub: LocalHubEndpoint, name: str) -> int:
    return sum(r.startswith("GET ") and r.endswith(f"/{name}") for r in hub.requests)


def snapshot(repo: str, commit: str, name: str) -> Path:
    return repo_folder(Path(os.environ["HF_HUB_CACHE"]), repo) / "snapshots" / commit / name


def test_a_new_dspark_source_is_said_then_only_its_draft_is_fetched(hub_repos, monkeypatch):
    released = b"dspark draft, second release"
    with LocalHubEndpoint(hub_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        first, notes = night()
        assert first == [] and len(notes.lines) == 8  # the first night downloads all eight, no release to say
        hub_repos[GGML] = ggml_org(C2, dspark=released, dspark_source=DSPARK_AFTER)  # the weekly job re-converted
        news, notes = night()
        assert news == ["new draft release: dspark from deepseek-ai/dspark_qwen3_8b_block7@abc1234 (was 9f8e7d6)"]
        assert sorted(notes.lines) == sorted(
            [
                news[0],
                f"downloading {GGML}/dspark-Qwen3-8B-Q8_0.gguf (a new revision, {format_size(len(released))})",
                f"downloading {GGML}/dspark-Qwen3-8B-BF16.gguf "
                f"(a new revision, {format_size(len(released + b' in BF16'))})",
            ]
        )
        assert gets(hub, "dspark-Qwen3-8B-Q8_0.gguf") == 2 and gets(hub, "dflash-Qwen3-8B-Q8_0.gguf") == 1
        assert gets(hub, "dspark-Qwen3-8B-BF16.gguf") == 2 and gets(hub, "dflash-Qwen3-8B-BF16.gguf") == 1
    assert snapshot(GGML, C2, "dspark-Qwen3-8B-Q8_0.gguf").read_bytes() == released
    # DFlash's file did not change: the new revision links the blob already there
    assert (
        snapshot(GGML, C2, "dflash-Qwen3-8B-Q8_0.gguf").resolve()
        == snapshot(GGML, C1, "dflash-Qwen3-8B-Q8_0.gguf").resolve()
    )


def test_a_readme_only_revision_is_said_and_fetches_no_model_file(hub_repos, monkeypatch):
    with LocalHubEndpoint(hub_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        night()
        downloads = sum(r.startswith("GET ") and r.endswith(".gguf") for r in hub.requests)
        hub_repos[GGML] = ggml_org(
            C3,
            dspark=b"dspark draft, first release",
            dspark_source=DSPARK_BEFORE,
            readme=README + b"\nRun with https://llama.app\n",
        )
        news, notes = night()
        assert (
            news
            == notes.lines
            == [
                f"{GGML}@3333333 (was 1111111) changes no file this search space uses "
                "(the same sources: a README update)"
            ]
        )
        assert sum(r.startswith("GET ") and r.endswith(".gguf") for r in hub.requests) == downloads
        again, notes = night()
        assert again == notes.lines == []  # the same revision again: nothing to say


def test_an_offline_night_asks_the_hub_nothing(hub_repos, monkeypatch):
    with LocalHubEndpoint(hub_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        night()
        hub_repos[GGML] = ggml_org(C2, dspark=b"dspark draft, second release", dspark_source=DSPARK_AFTER)
        asked = len(hub.requests)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        news, notes = night()
        assert len(hub.requests) == asked
    assert news == [] and notes.lines == [
        "hub not asked for new revisions: offline mode (HF_HUB_OFFLINE=1); going on with the files on disk"
    ]


def test_source_commits_and_their_repos_are_read_as_the_pipeline_writes_them():
    commits = parse_source_commits(src_sha(DSPARK_AFTER).decode())
    assert commits == {"DFLASH": DFLASH, "DSPARK": DSPARK_AFTER, "PRIMARY": PRIMARY}
    assert linked_sources(README.decode(), commits) == {
        "DFLASH": "z-lab/Qwen3-8B-DFlash-b16",
        "DSPARK": "deepseek-ai/dspark_qwen3_8b_block7",
        "PRIMARY": "Qwen/Qwen3-8B",
    }
    assert (
        SourceRelease("PRIMARY", "Qwen/Qwen3-8B", "c0ffee1" + "0" * 33, None).line()
        == "new target release: primary from Qwen/Qwen3-8B@c0ffee1"
    )
    assert (
        SourceRelease("EAGLE3", None, "c0ffee1" + "0" * 33, DSPARK_BEFORE).line()
        == "new draft release: eagle3 at source commit c0ffee1 (was 9f8e7d6)"
    )
