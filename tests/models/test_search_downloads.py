"""`autotune search --model qwen3-8b` on a machine with nothing placed by hand: the bundled space's hub
files — targets and draft-simple drafts from Qwen's repos, DSpark and DFlash drafts from ggml-org's — are
downloaded before the first trial (after one line saying what and how large), and `--offline` downloads
nothing. A draft the hub does not have (the DSpark and DFlash names are a guess at what ggml-org publishes)
is one line and left out, the rest downloads; a target it does not have is one line listing the repo's GGUF
files, exit 2; `--plan` prices the rest without needing the hub.

huggingface.co cannot be reached from here: `LocalHubEndpoint` (an HTTP server on 127.0.0.1 that answers
the hub's API, files' sizes included) serves tiny GGUF files under the exact repo and file names the
bundled search space names, and the real huggingface_hub downloads them.
"""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.models.hub import format_size, hub_files
from autotune.search.inputs import SearchOptions, SearchSettings, check_inputs
from autotune.spec.space import load_model_space
from autotune.testing import tiny_gguf
from autotune.testing.hub_fixtures import HubRepo, LocalHubEndpoint
from storage import resolve_storage_url

COMMIT = "3" * 40
DRAFT_TYPES = ("draft-dspark", "draft-dflash", "draft-simple")  # the draft types of search_spaces/qwen3-8b.toml


@pytest.fixture(scope="module")
def qwen3_8b_repos(tmp_path_factory) -> dict[str, HubRepo]:
    """Tiny qwen3 files under the names search_spaces/qwen3-8b.toml gives its hub files (two target quants
    that differ, two draft sizes from two repos, and ggml-org's repo with the DSpark and DFlash drafts for
    those targets, its own target conversion and the files its pipeline writes beside them)."""
    root = tmp_path_factory.mktemp("hub-files")
    paths = {name: root / name for name in ("t4", "t8", "d06", "d17")}
    tiny_gguf.write_qwen3_target(paths["t4"])
    tiny_gguf.write_qwen3_target(paths["t8"], seed=3)
    tiny_gguf.write_qwen3_target(paths["d06"], seed=1)
    tiny_gguf.write_qwen3_target(paths["d17"], seed=2)
    tiny_gguf.write_dspark_draft(root / "dspark", target_path=paths["t8"])
    tiny_gguf.write_dspark_draft(root / "dflash", target_path=paths["t8"], markov_rank=0)
    tiny_gguf.write_dspark_draft(root / "dspark-bf16", target_path=paths["t8"], seed=7)  # another quant: other bytes
    tiny_gguf.write_dspark_draft(root / "dflash-bf16", target_path=paths["t8"], markov_rank=0, seed=8)
    content = {path.name: path.read_bytes() for path in root.iterdir()}
    return {
        "Qwen/Qwen3-8B-GGUF": HubRepo(
            COMMIT,
            {"Qwen3-8B-Q4_K_M.gguf": content["t4"], "Qwen3-8B-Q8_0.gguf": content["t8"], "README.md": b"not asked for"},
        ),
        "Qwen/Qwen3-0.6B-GGUF": HubRepo(COMMIT, {"Qwen3-0.6B-Q8_0.gguf": content["d06"]}),
        "Qwen/Qwen3-1.7B-GGUF": HubRepo(COMMIT, {"Qwen3-1.7B-Q8_0.gguf": content["d17"]}),
        "ggml-org/Qwen3-8B-GGUF": HubRepo(
            COMMIT,
            {
                "Qwen3-8B-Q8_0.gguf": content["t8"],
                "dspark-Qwen3-8B-Q8_0.gguf": content["dspark"],
                "dflash-Qwen3-8B-Q8_0.gguf": content["dflash"],
                "dspark-Qwen3-8B-BF16.gguf": content["dspark-bf16"],
                "dflash-Qwen3-8B-BF16.gguf": content["dflash-bf16"],
                ".src_sha": b"DFLASH=" + b"d" * 40 + b"\nDSPARK=" + b"e" * 40 + b"\nPRIMARY=" + b"f" * 40 + b"\n",
                "README.md": b"not asked for",
            },
        ),
    }


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def file_gets(hub: LocalHubEndpoint) -> list[str]:
    return [r for r in hub.requests if r.startswith(("GET /Qwen/", "GET /ggml-org/")) and r.endswith(".gguf")]


def test_the_bundled_spaces_name_the_official_repos_and_only_published_files():
    qwen = [f.label for f in hub_files(load_model_space("qwen3-8b", None))]
    # ggml-org/convert's models/qwen3-8b/convert.sh writes {dspark,dflash}-Qwen3-8B-{BF16,Q8_0}.gguf there
    assert qwen == [
        "Qwen/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf",
        "Qwen/Qwen3-8B-GGUF/Qwen3-8B-Q8_0.gguf",
        "ggml-org/Qwen3-8B-GGUF/dspark-Qwen3-8B-Q8_0.gguf",
        "ggml-org/Qwen3-8B-GGUF/dspark-Qwen3-8B-BF16.gguf",
        "ggml-org/Qwen3-8B-GGUF/dflash-Qwen3-8B-Q8_0.gguf",
        "ggml-org/Qwen3-8B-GGUF/dflash-Qwen3-8B-BF16.gguf",
        "Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf",
        "Qwen/Qwen3-1.7B-GGUF/Qwen3-1.7B-Q8_0.gguf",
    ]
    llama = [f.label for f in hub_files(load_model_space("llama3.1-8b", None))]
    assert llama == [
        "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B-Instruct-Q8_0.gguf",
        "bartowski/Llama-3.2-1B-Instruct-GGUF/Llama-3.2-1B-Instruct-Q8_0.gguf",
        "bartowski/Llama-3.2-1B-Instruct-GGUF/Llama-3.2-1B-Instruct-Q4_K_M.gguf",
    ]
    llama_space = load_model_space("llama3.1-8b", None)  # its EAGLE-3 draft stays a local file: no guessed repo
    assert all(p.source is None for p in llama_space.drafts.get("draft-eagle3", ()))


@pytest.mark.slow
def test_search_downloads_what_is_missing_says_how_large_and_runs(tmp_path, qwen3_8b_repos, monkeypatch):
    models = tmp_path / "empty-models"
    models.mkdir()
    args = [
        "search",
        "--model",
        "qwen3-8b",
        "--models-dir",
        str(models),
        "--strategy",
        "measure",
        "--engine",
        "python",
        "--trials",
        "3",
        "--max-tokens",
        "6",
        "--seed",
        "0",
        "--no-confirm",
        "--no-pruning",
    ]
    with LocalHubEndpoint(qwen3_8b_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        first = invoke(*args)
        assert first.exit_code == 0, first.output
        labels = [f.label for f in hub_files(load_model_space("qwen3-8b", None))]
        sizes = {label: len(qwen3_8b_repos[label.rsplit("/", 1)[0]].files[label.rsplit("/", 1)[1]]) for label in labels}
        (line,) = [line for line in first.stderr.splitlines() if "downloading" in line]
        drafts = {
            label: size for label, size in sizes.items() if not label.rsplit("/", 1)[1].startswith("Qwen3-8B-")
        }  # not the targets
        by_quant = {
            q: format_size(sum(size for label, size in drafts.items() if label.endswith(f"-{q}.gguf")))
            for q in ("Q8_0", "BF16")
        }  # what the BF16 drafts add is said
        assert line.startswith(
            f"autotune: downloading 8 files from the hub ({sum(sizes.values()) / 1e6:.3g} MB, "
            f"drafts Q8_0 {by_quant['Q8_0']}, BF16 {by_quant['BF16']}) "
            f"into {os.environ['HF_HUB_CACHE']}: "
        ), line
        assert all(f"{label} ({size / 1e3:.3g} kB)" in line for label, size in sizes.items())
        assert sorted(r.removeprefix("GET ") for r in file_gets(hub)) == sorted(
            "/{}/{}/resolve/main/{}".format(*label.split("/")) for label in labels
        )  # not ggml-org's own target
        left_out = [line for line in first.stderr.splitlines() if "left out" in line]
        assert not [line for line in left_out if "-Qwen3-8B-" in line], left_out  # DSpark and DFlash drafts are there
        assert list(models.iterdir()) == []  # the models dir is never written

        downloads = len(file_gets(hub))
        second = invoke(*args, "--trials", "4")  # resumes (the last --trials counts): everything is cached now
        assert second.exit_code == 0, second.output
        assert "downloading" not in second.stderr and len(file_gets(hub)) == downloads
    (summary,) = optuna.get_all_study_summaries(resolve_storage_url(None), include_best_trial=False)
    study = optuna.load_study(study_name=summary.study_name, storage=resolve_storage_url(None))
    targets = {Path(t.user_attrs["config"]["target"]) for t in study.trials if "config" in t.user_attrs}
    assert targets and all(p.parent.name == COMMIT and "models--Qwen--Qwen3-8B-GGUF" in p.parts for p in targets)
    for pair in (
        f"draft-dspark:Qwen3-8B-Q8_0.gguf@{COMMIT} + dspark-Qwen3-8B-Q8_0.gguf@{COMMIT}",
        f"draft-dflash:Qwen3-8B-Q4_K_M.gguf@{COMMIT} + dflash-Qwen3-8B-Q8_0.gguf@{COMMIT}",
    ):
        assert pair in study.user_attrs["files"]  # the study samples from every ggml-org draft with every target


@pytest.mark.parametrize("how", ["--offline", "HF_HUB_OFFLINE=1"])
def test_offline_with_nothing_cached_is_one_line_exit_2_and_writes_nothing(
    tmp_path, qwen3_8b_repos, monkeypatch, autotune_home, how
):
    models = tmp_path / "empty-models"
    models.mkdir()
    args = ["search", "--model", "qwen3-8b", "--models-dir", str(models)]
    if how == "--offline":
        args.append("--offline")
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with LocalHubEndpoint(qwen3_8b_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = invoke(*args)
        assert hub.requests == []  # the hub was not even asked
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"autotune: error: no file matching 'Qwen3-8B-{{quant}}.gguf' from Qwen/Qwen3-8B-GGUF in the hub cache or {models}: "
        "offline, nothing was downloaded: run again without --offline (and HF_HUB_OFFLINE) to download it"
    ]
    assert not (autotune_home.exists() and any(autotune_home.rglob("*.db")))
    assert not Path(os.environ["HF_HUB_CACHE"]).exists() or not any(Path(os.environ["HF_HUB_CACHE"]).rglob("*.gguf"))


def without(repos: dict[str, HubRepo], repo: str, *names: str) -> dict[str, HubRepo]:
    """`repos` with `names` taken out of `repo`'s listing (as if the hub never had them)."""
    kept = {name: content for name, content in repos[repo].files.items() if name not in names}
    return {**repos, repo: HubRepo(repos[repo].commit, kept)}


def search_options(models: Path) -> SearchOptions:
    return SearchOptions(SearchSettings(model="qwen3-8b", trials=3, max_tokens=8), models_dir=models)


@pytest.mark.parametrize(
    ("repo", "names", "left_out", "drafts"),
    [
        (  # the DSpark names are our guess at ggml-org's: the hub may call them otherwise
            "ggml-org/Qwen3-8B-GGUF",
            ("dspark-Qwen3-8B-Q8_0.gguf", "dspark-Qwen3-8B-BF16.gguf"),
            [
                "the hub has no dspark-Qwen3-8B-Q8_0.gguf in ggml-org/Qwen3-8B-GGUF: draft-dspark's Q8_0 left out "
                "of this run",
                "the hub has no dspark-Qwen3-8B-BF16.gguf in ggml-org/Qwen3-8B-GGUF: draft-dspark's BF16 left out "
                "of this run",
            ],
            {
                "draft-dflash": ["dflash-Qwen3-8B-Q8_0.gguf", "dflash-Qwen3-8B-BF16.gguf"],
                "draft-simple": ["Qwen3-0.6B-Q8_0.gguf", "Qwen3-1.7B-Q8_0.gguf"],
            },
        ),
        (  # one quant of a draft: the other stays
            "ggml-org/Qwen3-8B-GGUF",
            ("dflash-Qwen3-8B-BF16.gguf",),
            [
                "the hub has no dflash-Qwen3-8B-BF16.gguf in ggml-org/Qwen3-8B-GGUF: draft-dflash's BF16 left out "
                "of this run"
            ],
            {
                "draft-dspark": ["dspark-Qwen3-8B-Q8_0.gguf", "dspark-Qwen3-8B-BF16.gguf"],
                "draft-dflash": ["dflash-Qwen3-8B-Q8_0.gguf"],
                "draft-simple": ["Qwen3-0.6B-Q8_0.gguf", "Qwen3-1.7B-Q8_0.gguf"],
            },
        ),
        (  # a draft size withdrawn from its own repo
            "Qwen/Qwen3-1.7B-GGUF",
            ("Qwen3-1.7B-Q8_0.gguf",),
            ["the hub has no Qwen3-1.7B-Q8_0.gguf in Qwen/Qwen3-1.7B-GGUF: draft-simple's Q8_0 left out of this run"],
            {
                "draft-dspark": ["dspark-Qwen3-8B-Q8_0.gguf", "dspark-Qwen3-8B-BF16.gguf"],
                "draft-dflash": ["dflash-Qwen3-8B-Q8_0.gguf", "dflash-Qwen3-8B-BF16.gguf"],
                "draft-simple": ["Qwen3-0.6B-Q8_0.gguf"],
            },
        ),
    ],
)
def test_a_draft_the_hub_does_not_have_is_a_note_and_the_rest_downloads(
    tmp_path, qwen3_8b_repos, monkeypatch, repo, names, left_out, drafts
):
    models = tmp_path / "empty-models"
    models.mkdir()
    said = []
    with LocalHubEndpoint(without(qwen3_8b_repos, repo, *names)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        inputs = check_inputs(search_options(models), said.append)
        gets = file_gets(hub)
    (line,) = said
    assert line.startswith(f"downloading {8 - len(names)} files from the hub ("), line
    assert not [name for name in names if name in line] and not [g for g in gets if g.endswith(names)]
    assert [p.name for p in inputs.files.targets] == ["Qwen3-8B-Q4_K_M.gguf", "Qwen3-8B-Q8_0.gguf"]
    found = {t: [p.name for p in inputs.files.drafts.get(t, ())] for t in DRAFT_TYPES}
    assert {t: files for t, files in found.items() if files} == drafts
    assert [n for n in inputs.notes if "left out" in n or "no file" in n] == left_out  # nothing else is missing
    assert {t for t in DRAFT_TYPES if inputs.candidates.pairs.get(t)} == set(drafts)  # each pairs with the targets
    assert not set(names) & {f.filename for f in hub_files(inputs.space)}  # out of this run's space


def test_a_target_the_hub_does_not_have_is_one_line_listing_the_repos_gguf_files_exit_2(
    tmp_path, qwen3_8b_repos, monkeypatch, autotune_home
):
    models = tmp_path / "empty-models"
    models.mkdir()
    repos = without(qwen3_8b_repos, "Qwen/Qwen3-8B-GGUF", "Qwen3-8B-Q4_K_M.gguf")
    repos["Qwen/Qwen3-8B-GGUF"].files["Qwen3-8B-Q4_K_M-00001-of-00002.gguf"] = b"split otherwise"
    with LocalHubEndpoint(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = invoke("search", "--model", "qwen3-8b", "--models-dir", str(models))
        assert file_gets(hub) == []  # nothing downloaded: not the drafts, not the other target
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "autotune: error: Qwen/Qwen3-8B-GGUF has no file Qwen3-8B-Q4_K_M.gguf at revision main "
        "(named by model of the search space); its GGUF files: Qwen3-8B-Q4_K_M-00001-of-00002.gguf, "
        "Qwen3-8B-Q8_0.gguf"
    ]
    assert not (autotune_home.exists() and any(autotune_home.rglob("*.db")))


def test_plan_with_a_hub_that_lacks_a_draft_or_no_hub_at_all_still_prints_a_plan(
    tmp_path, qwen3_8b_repos, monkeypatch, autotune_home
):
    models = tmp_path / "empty-models"
    models.mkdir()
    args = ["search", "--model", "qwen3-8b", "--models-dir", str(models), "--plan", "--budget", "none"]
    repos = without(qwen3_8b_repos, "ggml-org/Qwen3-8B-GGUF", "dspark-Qwen3-8B-Q8_0.gguf")
    with LocalHubEndpoint(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        online = invoke(*args)
        assert online.exit_code == 0, online.output
        assert file_gets(hub) == []  # a plan downloads nothing
        asked = len(hub.requests)
        offline = invoke(*args, "--offline")
        assert offline.exit_code == 0, offline.output
        assert len(hub.requests) == asked  # offline: the hub is not asked
    lines = online.stdout.splitlines()
    assert lines[0].startswith("downloading 7 files from the hub (") and "size unknown" not in lines[0], lines[0]
    assert "dspark-Qwen3-8B-Q8_0.gguf" not in lines[0]
    assert "3 DFlash/DSpark draft(s)" in lines[1], lines[1]
    assert lines[-1].startswith("plan: up to "), lines[-1]
    assert (
        "autotune: the hub has no dspark-Qwen3-8B-Q8_0.gguf in ggml-org/Qwen3-8B-GGUF: draft-dspark's Q8_0 "
        "left out of this run" in online.stderr.splitlines()
    )
    assert offline.stdout.splitlines()[0].startswith("downloading 8 files from the hub (size unknown")
    assert not (autotune_home.exists() and any(autotune_home.rglob("*.db")))
