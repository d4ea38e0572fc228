"""`--hf ORG/REPO[:QUANT]`: a hub repo's targets and drafts found by llama-server's naming rules, their
pairing checked from the GGUF headers after the download, and the space inferred from what was found.

huggingface.co cannot be reached from here: `LocalHubEndpoint` serves tiny GGUFs under ggml-org's names
(`<Model>-{BF16,Q8_0,Q4_K_M}.gguf`, `dflash-<Model>-{BF16,Q8_0}.gguf`, an `mmproj-` file that is no model)
and the real huggingface_hub downloads them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.errors import HubSourceError, UsageError
from autotune.models.hub import format_size
from autotune.models.hub_names import HubRef, is_model_file, quant_tag, sidecar_type
from autotune.models.hub_repo import RepoFiles, discover
from autotune.testing import tiny_gguf
from autotune.testing.hub_fixtures import HubRepo, LocalHubEndpoint

COMMIT = "4" * 40
REPO = "ggml-org/Qwen3.6-27B-GGUF"
NGRAM_TYPES = {"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"}


@pytest.fixture(scope="module")
def ggml_org_repos(tmp_path_factory) -> dict[str, HubRepo]:
    """Three repos under ggml-org's names: one with two target quants and two DFlash draft quants for them
    (and a projector beside them), one whose DFlash draft was converted for another model (n_embd 32), one
    with targets only."""
    root = tmp_path_factory.mktemp("ggml-org-files")
    tiny_gguf.write_qwen3_target(root / "t8")
    tiny_gguf.write_qwen3_target(root / "t4", seed=3)
    tiny_gguf.write_dspark_draft(root / "dflash8", target_path=root / "t8", markov_rank=0)
    tiny_gguf.write_dspark_draft(root / "dflash16", target_path=root / "t8", markov_rank=0, seed=1)
    tiny_gguf.write_dspark_draft(root / "foreign", n_embd=32, markov_rank=0)
    content = {path.name: path.read_bytes() for path in root.iterdir()}
    return {
        REPO: HubRepo(
            COMMIT,
            {
                "Qwen3.6-27B-Q8_0.gguf": content["t8"],
                "Qwen3.6-27B-Q4_K_M.gguf": content["t4"],
                "dflash-Qwen3.6-27B-Q8_0.gguf": content["dflash8"],
                "dflash-Qwen3.6-27B-BF16.gguf": content["dflash16"],
                "mmproj-Qwen3.6-27B-Q8_0.gguf": b"a projector: never downloaded",
                "README.md": b"not asked for",
            },
        ),
        "ggml-org/Mismatch-GGUF": HubRepo(
            COMMIT, {"Mismatch-Q8_0.gguf": content["t8"], "dflash-Mismatch-Q8_0.gguf": content["foreign"]}
        ),
        "ggml-org/Plain-GGUF": HubRepo(COMMIT, {"Plain-Q8_0.gguf": content["t8"], "Plain-Q4_K_M.gguf": content["t4"]}),
    }


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def gguf_gets(hub: LocalHubEndpoint) -> list[str]:
    return sorted(
        r.removeprefix("GET ") for r in hub.requests if r.startswith("GET /ggml-org/") and r.endswith(".gguf")
    )


def test_the_names_say_what_a_file_is_as_llama_server_reads_them():
    assert [
        quant_tag(n)
        for n in (
            "Qwen3.6-27B-Q8_0.gguf",
            "dflash-gemma-4-31B-it-BF16.gguf",
            "Model-q4_k_m-00001-of-00003.gguf",
            "README.md",
        )
    ] == ["Q8_0", "BF16", "Q4_K_M", None]
    assert [
        sidecar_type(n)
        for n in ("dspark-X-Q8_0.gguf", "dflash-X-BF16.gguf", "mtp-X-Q4_0.gguf", "eagle3-X-F16.gguf", "X-Q8_0.gguf")
    ] == ["draft-dspark", "draft-dflash", "draft-mtp", "draft-eagle3", None]
    assert not is_model_file("mmproj-X-Q8_0.gguf") and not is_model_file("dflash-X-Q8_0.gguf")
    assert HubRef.parse("ggml-org/Qwen3.6-27B-GGUF:q8_0") == HubRef(REPO, "Q8_0")
    assert HubRef(REPO, "Q8_0").model_name == "qwen3.6-27b-gguf-q8_0"
    with pytest.raises(UsageError, match="expected ORG/REPO or ORG/REPO:QUANT"):
        HubRef.parse("Qwen3.6-27B-GGUF")


def test_discovery_takes_each_quant_or_the_named_one_and_every_draft_by_its_prefix():
    files = RepoFiles(
        REPO,
        COMMIT,
        {
            name: 1
            for name in (
                "Qwen3.6-27B-BF16.gguf",
                "Qwen3.6-27B-Q8_0.gguf",
                "Qwen3.6-27B-Q4_K_M.gguf",
                "mmproj-Qwen3.6-27B-BF16.gguf",
                "mtp-Qwen3.6-27B-Q8_0.gguf",
                "dflash-Qwen3.6-27B-BF16.gguf",
                "dflash-Qwen3.6-27B-Q8_0.gguf",
                ".src_sha",
            )
        },
    )
    every = discover(HubRef(REPO), files)
    assert every.targets == ("Qwen3.6-27B-BF16.gguf", "Qwen3.6-27B-Q8_0.gguf", "Qwen3.6-27B-Q4_K_M.gguf")
    assert every.target_pattern == "Qwen3.6-27B-{quant}.gguf" and every.quants == ("BF16", "Q8_0", "Q4_K_M")
    assert every.drafts == {
        "mtp-Qwen3.6-27B-Q8_0.gguf": "draft-mtp",
        "dflash-Qwen3.6-27B-BF16.gguf": "draft-dflash",
        "dflash-Qwen3.6-27B-Q8_0.gguf": "draft-dflash",
    }
    named = discover(HubRef(REPO, "Q8_0"), files)
    assert named.targets == ("Qwen3.6-27B-Q8_0.gguf",) and named.drafts == every.drafts  # drafts: all quants
    with pytest.raises(HubSourceError, match=f"{REPO}@4444444 has no Q5_K_M model file: it has BF16, Q4_K_M, Q8_0"):
        discover(HubRef(REPO, "Q5_K_M"), files)


def test_models_hf_finds_downloads_and_pairs_the_targets_and_drafts(ggml_org_repos, monkeypatch):
    with LocalHubEndpoint(ggml_org_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = invoke("models", "--hf", REPO, "--json")
        gets = gguf_gets(hub)
    assert result.exit_code == 0, result.output
    sizes = {name: len(content) for name, content in ggml_org_repos[REPO].files.items()}
    wanted = [
        "Qwen3.6-27B-Q8_0.gguf",
        "Qwen3.6-27B-Q4_K_M.gguf",
        "dflash-Qwen3.6-27B-Q8_0.gguf",
        "dflash-Qwen3.6-27B-BF16.gguf",
    ]
    total = sum(sizes[name] for name in wanted)
    found = [line for line in result.stderr.splitlines() if line.startswith(f"autotune: {REPO}@")]
    size = [format_size(sizes[name]) for name in wanted]
    assert found == [
        f"autotune: {REPO}@4444444: targets Q8_0 {size[0]}, Q4_K_M {size[1]}; draft-dflash drafts "
        f"Q8_0 {size[2]}, BF16 {size[3]}: 4 files, {format_size(total)}, 4 to download "
        f"({format_size(total)})"
    ]
    assert gets == sorted(f"/{REPO}/resolve/main/{name}" for name in wanted)  # not the projector
    (report,) = json.loads(result.stdout)
    assert report["model"] == "qwen3.6-27b-gguf"
    pairs = {(row["spec_type"], row["target"], row["draft"]) for row in report["runnable"] if row["draft"]}
    assert pairs == {("draft-dflash", target, draft) for target in wanted[:2] for draft in wanted[2:]}
    assert report["refused"] == []
    assert {row["spec_type"] for row in report["runnable"]} == NGRAM_TYPES | {"draft-dflash"}
    assert all(f"models--ggml-org--Qwen3.6-27B-GGUF/snapshots/{COMMIT}" in row["path"] for row in report["files"])


def test_an_unpaired_draft_is_refused_in_one_line_before_anything_is_stored(ggml_org_repos, monkeypatch, autotune_home):
    with LocalHubEndpoint(ggml_org_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = invoke("search", "--hf", "ggml-org/Mismatch-GGUF")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert (
        errors
        == result.stderr.splitlines()[-1:]
        == [
            "autotune: error: dflash-Mismatch-Q8_0.gguf cannot draft for Mismatch-Q8_0.gguf (draft-dflash): "
            "draft n_embd 32 differs from the target's 64"
        ]
    )
    assert not (autotune_home.exists() and any(autotune_home.rglob("*.db")))


def test_a_repo_without_drafts_searches_the_ngram_types_and_says_so_once(ggml_org_repos, monkeypatch):
    with LocalHubEndpoint(ggml_org_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = invoke("models", "--hf", "ggml-org/Plain-GGUF:Q4_K_M", "--json")
        gets = gguf_gets(hub)
    assert result.exit_code == 0, result.output
    assert gets == ["/ggml-org/Plain-GGUF/resolve/main/Plain-Q4_K_M.gguf"]  # the named quant only
    said = [line for line in result.stderr.splitlines() if "n-gram types only" in line]
    assert said == [
        "autotune: ggml-org/Plain-GGUF has no draft (dspark-, dflash-, mtp-, eagle3- file, or MTP head) "
        "and no --draft-hf was given: searching the n-gram types only"
    ]
    (report,) = json.loads(result.stdout)
    assert report["model"] == "plain-gguf-q4_k_m"
    assert {row["spec_type"] for row in report["runnable"]} == NGRAM_TYPES


@pytest.mark.parametrize("command", ["search", "models"])
def test_offline_with_an_empty_cache_is_one_line_exit_2_and_asks_nothing(
    ggml_org_repos, monkeypatch, autotune_home, command
):
    with LocalHubEndpoint(ggml_org_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = invoke(command, "--hf", REPO, "--offline")
        assert hub.requests == []
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"autotune: error: nothing of {REPO} is in the hub cache ({os.environ['HF_HUB_CACHE']}) and the hub was not "
        "asked: offline mode (--offline); run once without --offline (and HF_HUB_OFFLINE) to download it"
    ]
    assert not (autotune_home.exists() and any(autotune_home.rglob("*.db")))


def test_offline_uses_what_the_hub_cache_holds(ggml_org_repos, monkeypatch):
    with LocalHubEndpoint(ggml_org_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert invoke("models", "--hf", f"{REPO}:Q8_0").exit_code == 0
        hub.requests.clear()
        result = invoke("models", "--hf", REPO, "--offline", "--json")
        assert hub.requests == []
    assert result.exit_code == 0, result.output
    assert f"autotune: {REPO}@4444444 (from the hub cache): targets Q8_0" in result.stderr
    (report,) = json.loads(result.stdout)
    assert {Path(row["path"]).name for row in report["files"]} == {
        "Qwen3.6-27B-Q8_0.gguf",
        "dflash-Qwen3.6-27B-Q8_0.gguf",
        "dflash-Qwen3.6-27B-BF16.gguf",
    }


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--hf", REPO, "--target", "x.gguf"], "--hf finds the targets and drafts in the repo: drop --target"),
        (["--draft-hf", REPO], "--draft-hf needs --hf"),
        (["--hf", "not-a-repo"], "--hf 'not-a-repo': expected ORG/REPO or ORG/REPO:QUANT"),
    ],
)
def test_bad_hf_input_is_one_line_exit_2(argv, message):
    result = invoke("search", *argv)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and message in result.stderr


@pytest.mark.slow
def test_search_hf_downloads_and_tunes_every_found_pair(ggml_org_repos, monkeypatch):
    import optuna

    from storage import resolve_storage_url

    with LocalHubEndpoint(ggml_org_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = invoke(
            "search",
            "--hf",
            f"{REPO}:Q8_0",
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
        )
    assert result.exit_code == 0, result.output
    (summary,) = optuna.get_all_study_summaries(resolve_storage_url(None), include_best_trial=False)
    assert summary.study_name.startswith("qwen3.6-27b-gguf-q8_0@")
    study = optuna.load_study(study_name=summary.study_name, storage=resolve_storage_url(None))
    for draft in ("dflash-Qwen3.6-27B-Q8_0.gguf", "dflash-Qwen3.6-27B-BF16.gguf"):
        assert f"draft-dflash:Qwen3.6-27B-Q8_0.gguf@{COMMIT} + {draft}@{COMMIT}" in study.user_attrs["files"]
