"""`nightly --all`: of the presets in the database, exactly this machine's whose hub source moved are
re-tuned, each through the normal nightly path with its own model and load."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.models.hub import hub_cache_dir
from autotune.presets.nightly_all import moved_presets, preset_options
from autotune.search.inputs import SearchOptions, SearchSettings
from autotune.spec.config import SpecConfig
from autotune.study.records import config_attrs
from autotune.testing.hub_fixtures import HubRepo, LocalHubEndpoint, write_hub_cache
from storage import resolve_storage_url
from storage.presets import Preset, PresetStore

OLD, NEW, README_OLD, README_NEW, STILL = "1" * 40, "2" * 40, "3" * 40, "4" * 40, "5" * 40
SOURCES = b"DFLASH=" + b"d" * 40 + b"\nPRIMARY=" + b"f" * 40 + b"\n"


def preset(
    model: str,
    repo: str,
    revision: str,
    *,
    hardware: str | None = None,
    concurrency: int = 1,
    draft_repo: str | None = None,
) -> Preset:
    target = Path(f"/cache/models--x/snapshots/{revision}/{model}-Q8_0.gguf")
    draft = Path(f"/cache/models--y/snapshots/{revision}/{model}-0.6B-Q8_0.gguf") if draft_repo else None
    config = SpecConfig(target, "draft-simple" if draft else "ngram-mod", draft, {})
    revisions = {target.name: {"repo": repo, "revision": revision}}
    if draft is not None:
        revisions[draft.name] = {"repo": draft_repo, "revision": revision}
    return Preset(
        model=model,
        hardware=hardware or hardware_key(),
        argv=("llama-server", "-m", str(target)),
        tok_s=40.0,
        baseline_tok_s=25.0,
        speedup=1.6,
        engine="server",
        llama_cpp_build="b1",
        file_hashes={},
        params=config_attrs(config),
        study_name=f"{model}@x:predicted",
        file_revisions=revisions,
        concurrency=concurrency,
    )


@pytest.fixture
def hub(monkeypatch):
    """A hub where ggml-org/Moved-GGUF has a new revision, ggml-org/Readme-GGUF a new revision with the same
    sources (its old `.src_sha` is in the hub cache) and ggml-org/Still-GGUF none."""
    write_hub_cache(hub_cache_dir(), "ggml-org/Readme-GGUF", README_OLD, {".src_sha": SOURCES}, ref=None)
    repos = {
        "ggml-org/Moved-GGUF": HubRepo(NEW, {"Moved-Q8_0.gguf": b"new", ".src_sha": SOURCES}),
        "ggml-org/Readme-GGUF": HubRepo(README_NEW, {"Readme-Q8_0.gguf": b"same", ".src_sha": SOURCES}),
        "ggml-org/Still-GGUF": HubRepo(STILL, {"Still-Q8_0.gguf": b"same"}),
    }
    with LocalHubEndpoint(repos) as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint.url)
        yield endpoint


@pytest.fixture
def store():
    with PresetStore(resolve_storage_url(None)) as opened:
        opened.save(preset("moved-gguf", "ggml-org/Moved-GGUF", OLD, concurrency=2))
        opened.save(preset("moved-gguf", "ggml-org/Moved-GGUF", OLD, hardware="another machine"))
        opened.save(preset("readme-gguf", "ggml-org/Readme-GGUF", README_OLD))
        opened.save(preset("still-gguf", "ggml-org/Still-GGUF", STILL))
        yield opened


def test_exactly_this_machines_preset_whose_source_moved_is_picked(hub, store):
    notes = []
    moved = moved_presets(store, offline=False, note=notes.append)
    assert [(m.preset.model, m.preset.hardware, m.preset.concurrency, m.moved) for m in moved] == [
        ("moved-gguf", hardware_key(), 2, ("ggml-org/Moved-GGUF@1111111 -> 2222222",))
    ]
    assert moved[0].label == "moved-gguf (--concurrency 2)" and notes == []


def test_offline_nothing_moves_and_each_repo_is_said_once(hub, store):
    notes = []
    assert moved_presets(store, offline=True, note=notes.append) == []
    assert sorted(notes) == [
        f"ggml-org/{name}-GGUF: not asked for a new revision (offline mode (--offline)); its presets are kept"
        for name in ("Moved", "Readme", "Still")
    ]
    assert hub.requests == []


def test_a_preset_re_tunes_with_its_own_model_load_and_hub_repo():
    template = SearchOptions(SearchSettings(model="", trials=12, max_tokens=48))
    hub_model = preset_options(template, preset("moved-gguf", "ggml-org/Moved-GGUF", OLD, concurrency=2))
    assert (hub_model.model, hub_model.settings.concurrency, hub_model.levels, hub_model.hf, hub_model.draft_hf) == (
        "moved-gguf",
        2,
        (2,),
        "ggml-org/Moved-GGUF",
        None,
    )
    one_quant = preset_options(
        template, preset("moved-gguf-q8_0", "ggml-org/Moved-GGUF", OLD, draft_repo="ggml-org/Small-GGUF")
    )
    assert (one_quant.hf, one_quant.draft_hf) == ("ggml-org/Moved-GGUF:Q8_0", "ggml-org/Small-GGUF")
    bundled = preset_options(template, preset("qwen3-8b", "Qwen/Qwen3-8B-GGUF", OLD))
    assert (bundled.model, bundled.hf) == ("qwen3-8b", None)


def test_nightly_all_with_nothing_moved_says_so_and_exits_unchanged(hub):
    with PresetStore(resolve_storage_url(None)) as opened:
        opened.save(preset("still-gguf", "ggml-org/Still-GGUF", STILL))
    result = CliRunner().invoke(cli, ["nightly", "--all"])
    assert result.exit_code == 3, result.output
    assert result.stdout.splitlines() == ["unchanged: no preset of this machine has a hub source that moved"]


def test_nightly_all_names_no_model():
    result = CliRunner().invoke(cli, ["nightly", "--all", "--model", "qwen3-8b"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "autotune: error: --all re-tunes each preset's own model: drop --model, "
        "--target, --draft, --space, --hf and --draft-hf"
    ]
