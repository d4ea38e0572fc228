"""`autotune models` and `autotune quantize` on real GGUF files."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.gguf.info import read_gguf_info


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_models_lists_files_runnable_pairs_and_refusals(tmp_path, models_dir, monkeypatch):
    space = tmp_path / "tiny.toml"
    space.write_text(
        textwrap.dedent("""
        [model]
        name = "tiny"
        target = "tiny-target.gguf"
        context_size = 512
        [drafts.draft-simple]
        file = "tiny-{quant}.gguf"
        quants = ["draft", "otherwords"]
        [drafts.draft-dspark]
        file = "tiny-dspark.gguf"
        [spec_types.draft-simple]
        draft_n_max = [1, 4]
        [spec_types.draft-dspark]
        draft_n_max = [1, 4]
        [spec_types.ngram-simple]
        ngram_simple_size_n = [1, 3]
    """)
    )
    from autotune.models import inventory
    from autotune.spec.space import load_model_space

    report = inventory.model_inventory(load_model_space("tiny", space), models_dir, None)
    runnable = {(r["spec_type"], r["draft"]) for r in report["runnable"]}
    assert ("draft-simple", "tiny-draft.gguf") in runnable
    assert ("draft-dspark", "tiny-dspark.gguf") in runnable
    assert ("ngram-simple", None) in runnable
    (refused,) = report["refused"]
    assert refused["draft"] == "tiny-otherwords.gguf" and "token 5" in refused["reason"]
    assert {f["architecture"] for f in report["files"]} == {"qwen3", "dflash"}
    assert "no llama-server found" in report["notes"][0]


@pytest.mark.slow
def test_models_command_refuses_a_dspark_draft_for_gemma(tmp_path, gemma_path, tiny_dir):
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(gemma_path, models / "gemma-3-270m-Q4_K_M.gguf")
    shutil.copy(tiny_dir / "tiny-dspark.gguf", models / "dspark-gemma.gguf")
    space = tmp_path / "gemma3-270m.toml"
    space.write_text(
        textwrap.dedent("""
        [model]
        name = "gemma3-270m"
        target = "gemma-3-270m-{quant}.gguf"
        quants = ["Q4_K_M"]
        [drafts.draft-dspark]
        file = "dspark-gemma.gguf"
        [spec_types.draft-dspark]
        draft_n_max = [1, 4]
    """)
    )
    from autotune.models import inventory
    from autotune.spec.space import load_model_space

    report = inventory.model_inventory(load_model_space("gemma3-270m", space), models, None)
    (refused,) = report["refused"]
    assert "gemma3" in refused["reason"] and "layer inputs" in refused["reason"]
    assert report["files"][0]["quant"] == "Q4_K_M"
    listing = json.loads(run("models", "--models-dir", str(models), "--json").stdout)
    assert {r["model"] for r in listing} >= {"gemma3-270m", "qwen3-8b", "llama3.1-8b"}


@pytest.mark.slow
def test_quantize_writes_a_cheaper_gemma_draft_the_next_study_uses(tmp_path, gemma_path):
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(gemma_path, models / "gemma-3-270m-q4_k_m.gguf")
    result = run("quantize", "--model", "gemma3-270m", "--quant", "Q4_0", "--models-dir", str(models))
    written = models / "gemma-3-270m-Q4_0.gguf"
    assert result.stdout.strip() == str(written)
    assert "requantizing from Q4_K_M" in result.stderr
    assert read_gguf_info(written).quant == "Q4_0"
    assert written.stat().st_size < (models / "gemma-3-270m-q4_k_m.gguf").stat().st_size
    assert not list(models.glob("*.partial"))
    again = run("quantize", "--model", "gemma3-270m", "--quant", "Q4_0", "--models-dir", str(models), ok=False)
    assert again.exit_code == 2 and "exists already" in again.output

    from autotune.models import inventory
    from autotune.spec.space import load_model_space

    report = inventory.model_inventory(load_model_space("gemma3-270m"), models, None)
    assert ("draft-simple", "gemma-3-270m-Q4_0.gguf") in {(r["spec_type"], r["draft"]) for r in report["runnable"]}


def test_unknown_quant_is_a_usage_error(tmp_path, models_dir):
    result = run("quantize", "--model", "gemma3-270m", "--quant", "Q9_Z", "--models-dir", str(models_dir), ok=False)
    assert result.exit_code == 2 and "unknown quantization 'Q9_Z'" in result.output


def test_models_says_which_engine_runs_mtp_and_refuses_an_mtp_less_target(tmp_path, models_dir):
    """draft-mtp drafts with the target's own NextN layers; the tiny qwen3 target has none, so llama.cpp's
    verdict refuses it, and the in-process engine leaves MTP and EAGLE-3 to llama-server, saying why."""
    from autotune.llamacpp.capabilities import read_capabilities
    from autotune.llamacpp.server_binary import resolve_server_binary
    from autotune.models import inventory
    from autotune.spec.space import load_model_space

    space = tmp_path / "tiny.toml"
    space.write_text(
        textwrap.dedent("""
        [model]
        name = "tiny"
        target = "tiny-target.gguf"
        context_size = 512
        [drafts.draft-mtp]
        file = "target"
        [spec_types.draft-mtp]
        draft_n_max = [1, 3]
        [spec_types.ngram-simple]
        ngram_simple_size_n = [1, 3]
    """)
    )
    server = read_capabilities(resolve_server_binary(None))
    report = inventory.model_inventory(load_model_space("tiny", space), models_dir, server)
    (refused,) = report["refused"]
    assert refused["spec_type"] == "draft-mtp"
    assert refused["reason"] == "tiny-target.gguf has no MTP (NextN) layers, so draft-mtp cannot run"
    assert not [r for r in report["runnable"] if r["spec_type"] == "draft-mtp"]
    mtp = report["engines"]["draft-mtp"]
    assert mtp["python"].startswith("no in-process MTP loop") and mtp["server"] == "runs"
    assert report["engines"]["ngram-simple"] == {"python": "runs", "server": "runs"}
