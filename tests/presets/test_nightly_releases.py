"""`autotune nightly --model qwen3-8b` following ggml-org's conversions on a local hub: a new DSpark source in
the repo's `.src_sha` is said in one line, its draft fetched, the model re-tuned and raced against the
stored preset, and the preset keeps the reason when it is replaced; a README-only revision is said and
measures nothing. A preset keeps the reason it was made.

`LocalHubEndpoint` serves tiny GGUF files (qwen3 targets and drafts, DSpark and DFlash drafts that pair
with them) under the names the bundled space gives them, and the real huggingface_hub client downloads
them; the trials run on real llama.cpp.
"""

from __future__ import annotations

import json
import sqlite3

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.testing import tiny_gguf
from autotune.testing.hub_fixtures import HubRepo, LocalHubEndpoint
from storage import resolve_storage_url
from storage.presets import Preset, PresetStore

C1, C2, C3 = "1" * 40, "2" * 40, "3" * 40
GGML = "ggml-org/Qwen3-8B-GGUF"
PRIMARY, DFLASH = "b968826" + "0" * 33, "9b41424" + "0" * 33
DSPARK_BEFORE, DSPARK_AFTER = "9f8e7d6" + "0" * 33, "abc1234" + "0" * 33
RELEASE_LINE = "new draft release: dspark from deepseek-ai/dspark_qwen3_8b_block7@abc1234 (was 9f8e7d6)"
README = (
    b"# Qwen3-8B\n\n### Source models\n- https://huggingface.co/Qwen/Qwen3-8B\n"
    b"- https://huggingface.co/z-lab/Qwen3-8B-DFlash-b16\n"
    b"- https://huggingface.co/deepseek-ai/dspark_qwen3_8b_block7\n"
)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, bytes]:
    root = tmp_path_factory.mktemp("hub-files")
    tiny_gguf.write_qwen3_target(root / "t4")
    tiny_gguf.write_qwen3_target(root / "t8", seed=3)
    tiny_gguf.write_qwen3_target(root / "d06", seed=1)
    tiny_gguf.write_qwen3_target(root / "d17", seed=2)
    tiny_gguf.write_dspark_draft(root / "dspark", target_path=root / "t8")
    tiny_gguf.write_dspark_draft(root / "dspark-next", target_path=root / "t8", seed=7)
    tiny_gguf.write_dspark_draft(root / "dflash", target_path=root / "t8", markov_rank=0)
    return {path.name: path.read_bytes() for path in root.iterdir()}


def ggml_org(files: dict[str, bytes], commit: str, dspark: str, dspark_source: str, readme: bytes = README) -> HubRepo:
    source_commits = f"DFLASH={DFLASH}\nDSPARK={dspark_source}\nPRIMARY={PRIMARY}\n".encode()
    return HubRepo(
        commit,
        {
            "Qwen3-8B-Q8_0.gguf": files["t8"],
            "dspark-Qwen3-8B-Q8_0.gguf": files[dspark],
            "dflash-Qwen3-8B-Q8_0.gguf": files["dflash"],
            "dspark-Qwen3-8B-BF16.gguf": files[dspark],
            "dflash-Qwen3-8B-BF16.gguf": files["dflash"],
            ".src_sha": source_commits,
            "README.md": readme,
        },
    )


#: the status each exit code of `autotune nightly` stands for, as docs/cli.md ("Exit codes") documents it; the
#: one line a night prints starts with it
NIGHT_STATUS = {0: "improved", 3: "unchanged", 4: "regressed"}


def nightly(models, allowed: tuple[int, ...]):
    """A night of qwen3-8b: its exit code is one of `allowed`, and its one line on stdout says the status
    that code stands for."""
    result = CliRunner().invoke(
        cli,
        [
            "nightly",
            "--model",
            "qwen3-8b",
            "--models-dir",
            str(models),
            "--top",
            "2",
            "--race-budget",
            "2",
            "--max-tokens",
            "10",
            "--seed",
            "0",
        ],
    )
    assert result.exit_code in allowed, result.output
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"{NIGHT_STATUS[result.exit_code]}: qwen3-8b: "), result.output
    return result


def presets() -> list[dict]:
    return json.loads(CliRunner().invoke(cli, ["presets", "list", "--json"]).stdout)


def studies() -> list[optuna.Study]:
    url = resolve_storage_url(None)
    names = sorted(s.study_name for s in optuna.get_all_study_summaries(url, include_best_trial=False))
    return [optuna.load_study(study_name=name, storage=url) for name in names]


@pytest.mark.slow
def test_nightly_follows_a_new_dspark_release_and_not_a_readme_update(tmp_path, files, monkeypatch):
    models = tmp_path / "empty-models"
    models.mkdir()
    repos = {
        "Qwen/Qwen3-8B-GGUF": HubRepo(C1, {"Qwen3-8B-Q4_K_M.gguf": files["t4"], "Qwen3-8B-Q8_0.gguf": files["t8"]}),
        "Qwen/Qwen3-0.6B-GGUF": HubRepo(C1, {"Qwen3-0.6B-Q8_0.gguf": files["d06"]}),
        "Qwen/Qwen3-1.7B-GGUF": HubRepo(C1, {"Qwen3-1.7B-Q8_0.gguf": files["d17"]}),
        GGML: ggml_org(files, C1, "dspark", DSPARK_BEFORE),
    }
    with LocalHubEndpoint(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        first = nightly(models, (0,))
        assert first.stdout.startswith("improved: qwen3-8b: first preset")
        assert "release" not in first.stderr  # nothing was on disk to compare with
        (made,) = presets()

        repos[GGML] = ggml_org(files, C2, "dspark-next", DSPARK_AFTER)  # deepseek-ai pushed; the job re-converted
        # The new draft races the preset: either may win (0, 3). 4 too: "regressed" compares the preset's tok/s
        # tonight with the first night's interval, absolute figures a neighbour's load on the box moves
        # between the nights. Each is checked below by what it must leave behind.
        second = nightly(models, (0, 3, 4))
        lines = second.stderr.splitlines()
        download = f"autotune: downloading {GGML}/dspark-Qwen3-8B-Q8_0.gguf (a new revision, "
        assert f"autotune: {RELEASE_LINE}" in lines
        assert lines.index(f"autotune: {RELEASE_LINE}") < next(i for i, l in enumerate(lines) if l.startswith(download))
        assert "dflash-Qwen3-8B-Q8_0.gguf (a new revision" not in second.stderr  # its bytes did not change
        first_night, study = studies()  # predicted anew on the new draft, beside the first night's run ...
        assert study.study_name.endswith(":predicted/v2") and first_night.user_attrs["confirmation"]
        assert f"dspark-Qwen3-8B-Q8_0.gguf@{C2}" in " ".join(study.user_attrs["files"])
        race = study.user_attrs["confirmation"]
        assert {c["role"] for c in race["configs"]} >= {"trial", "preset"}  # ... and raced against the preset
        assert any(c["role"] == "trial" and "draft-dspark" in c["label"] for c in race["configs"])
        (preset,) = presets()
        if second.exit_code == 0:  # replaced on a proven win over the preset, and says why
            assert preset["reason"].startswith(f"{RELEASE_LINE}; ")
        else:  # kept; a regression is the preset's own configuration measured below its recorded interval
            assert preset == made and preset["reason"].startswith("first preset: ")
            current = next(c for c in race["configs"] if c["role"] == "preset")
            assert second.exit_code == 3 or current["ci95"][1] < made["ci95_low"]
        trials = len(study.trials)

        repos[GGML] = ggml_org(files, C3, "dspark-next", DSPARK_AFTER, readme=README + b"\nRun with llama.app\n")
        third = nightly(models, (3,))
    assert (
        f"autotune: {GGML}@3333333 (was 2222222) changes no file this search space uses (the same sources: "
        "a README update)" in third.stderr.splitlines()
    )
    assert "no new or changed model files" in third.stdout
    assert [len(s.trials) for s in studies()][1:] == [trials]  # nothing was predicted or measured again


def test_a_preset_keeps_its_reason_and_a_v3_database_gains_the_column(tmp_path):
    url = f"sqlite:///{tmp_path / 'presets.db'}"
    made = Preset(
        model="qwen3-8b",
        hardware="h",
        argv=("llama-server",),
        tok_s=150.0,
        baseline_tok_s=94.0,
        speedup=1.6,
        engine="server",
        llama_cpp_build="b1",
        file_hashes={},
        params={},
        study_name="s/v2",
        reason=f"{RELEASE_LINE}; draft-dspark n_max=3 156.0 tok/s (1.66x) beats the preset's 150.0 tok/s",
    )
    with PresetStore(url) as store:
        store.save(made)
        assert store.get("qwen3-8b", "h").reason == made.reason
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:  # as autotune left it before reasons
        connection.execute("ALTER TABLE autotune_presets DROP COLUMN reason")
        connection.execute("UPDATE autotune_schema_version SET version = 3")
    with PresetStore(url) as store:
        assert store.get("qwen3-8b", "h").reason is None and store.get("qwen3-8b", "h").tok_s == 150.0
        store.save(made)
        assert store.get("qwen3-8b", "h").reason == made.reason
