"""Compatibility verdicts on real GGUF files: tiny fixtures written here, and the real Gemma 3 270M."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np
import pytest

from autotune.errors import ModelFileError
from autotune.gguf.compat import Verdict, check_pair
from autotune.gguf.info import read_gguf_info
from autotune.testing import tiny_gguf


def _write_stub(
    path: Path,
    arch: str,
    *,
    n_layers: int = 2,
    n_nextn_layers: int = 0,
    tensor_names: tuple[str, ...] = ("token_embd.weight",),
) -> Path:
    """A header-only model of any architecture with the tiny fixtures' dims (64 wide, 128-token vocab)."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_embedding_length(64)
    writer.add_block_count(n_layers)
    if n_nextn_layers:
        writer.add_uint32(f"{arch}.nextn_predict_layers", n_nextn_layers)
    writer.add_tokenizer_model("test")
    writer.add_token_list(list(tiny_gguf.make_tokenizer(128).tokens))
    for name in tensor_names:
        writer.add_tensor(name, np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def models(tiny_dir, tmp_path_factory) -> dict[str, Path]:
    """The conftest tiny models plus variants that each break one rule."""
    root = tmp_path_factory.mktemp("compat-models")
    target = tiny_dir / "tiny-target.gguf"
    return {
        "target": target,
        "twin": tiny_dir / "tiny-draft.gguf",  # seed 1, same tokenizer
        "other_words": tiny_dir / "tiny-otherwords.gguf",  # tokenizer variant "b"
        "dspark": tiny_dir / "tiny-dspark.gguf",
        "bigger_vocab": tiny_gguf.write_qwen3_target(root / "vocab200.gguf", vocab_size=200),
        "far_vocab": tiny_gguf.write_qwen3_target(root / "vocab300.gguf", vocab_size=300),
        "adds_bos": tiny_gguf.write_qwen3_target(root / "adds-bos.gguf", add_bos=True),
        "wide_dspark": tiny_gguf.write_dspark_draft(root / "wide-dspark.gguf", n_embd=128),
        "deep_dspark": tiny_gguf.write_dspark_draft(root / "deep-dspark.gguf", target_n_layers=4, target_layers=[0, 3]),
        "gemma3": _write_stub(root / "gemma3.gguf", "gemma3"),
        "mtp": _write_stub(
            root / "mtp.gguf",
            "qwen35",
            n_layers=3,
            n_nextn_layers=1,
            tensor_names=("token_embd.weight", "blk.2.nextn.eh_proj.weight"),
        ),
    }


def verdict(spec_type: str, target: Path, draft: Path | None) -> Verdict:
    return check_pair(spec_type, read_gguf_info(target), None if draft is None else read_gguf_info(draft))


def test_tiny_files_read_back_as_written(models):
    target = read_gguf_info(models["target"])
    assert (target.architecture, target.quant, target.n_embd, target.n_layers, target.n_vocab) == (
        "qwen3",
        "F32",
        64,
        2,
        128,
    )
    assert (target.vocab_type, target.bos_id, target.eos_id, target.add_bos, target.add_eos) == (
        "TEST",
        1,
        2,
        False,
        False,
    )
    dspark = read_gguf_info(models["dspark"])
    assert (dspark.architecture, dspark.quant, dspark.target_layers, dspark.block_size) == ("dflash", "F32", (0, 1), 4)
    assert dspark.has_markov_head and not dspark.has_confidence_head


def test_a_rewritten_file_is_read_again(tmp_path):
    path = tiny_gguf.write_qwen3_target(tmp_path / "m.gguf")
    assert read_gguf_info(path).n_vocab == 128
    tiny_gguf.write_qwen3_target(path, vocab_size=160)
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    assert read_gguf_info(path).n_vocab == 160


def test_draft_simple_with_the_same_vocabulary_is_runnable(models):
    assert verdict("draft-simple", models["target"], models["twin"]) == Verdict(True, "")


def test_draft_simple_names_the_first_token_that_differs(models):
    assert verdict("draft-simple", models["target"], models["other_words"]) == Verdict(
        False, "draft vocabulary differs from the target's at token 5"
    )


def test_draft_simple_compares_ids_up_to_the_smaller_vocabulary(models):
    assert verdict("draft-simple", models["target"], models["bigger_vocab"]).runnable
    far = verdict("draft-simple", models["target"], models["far_vocab"])
    assert not far.runnable and "more than 128" in far.reason


def test_draft_simple_refuses_a_different_add_bos(models):
    result = verdict("draft-simple", models["target"], models["adds_bos"])
    assert result == Verdict(False, "the draft adds BOS and the target does not")


@pytest.mark.parametrize("spec_type", ["draft-dspark", "draft-dflash"])
def test_dspark_draft_with_the_targets_dims_is_runnable(models, spec_type):
    assert verdict(spec_type, models["target"], models["dspark"]) == Verdict(True, "")


def test_dspark_refuses_a_different_n_embd(models):
    assert verdict("draft-dspark", models["target"], models["wide_dspark"]) == Verdict(
        False, "draft n_embd 128 differs from the target's 64"
    )


def test_dspark_refuses_a_target_layer_the_target_lacks(models):
    assert verdict("draft-dspark", models["target"], models["deep_dspark"]) == Verdict(
        False, "the DSpark draft reads target layer 3, but the target has 2 layers"
    )


def test_gemma3_target_cannot_drive_a_dspark_draft(models):
    assert verdict("draft-dspark", models["gemma3"], models["dspark"]) == Verdict(
        False, "gemma3 targets expose no layer inputs, so they cannot drive a DSpark draft"
    )


def test_dspark_needs_a_dflash_draft(models):
    assert verdict("draft-dspark", models["target"], models["twin"]) == Verdict(
        False, "draft-dspark needs a dflash-architecture draft (got qwen3)"
    )


def test_draft_mtp_needs_nextn_layers(models):
    assert read_gguf_info(models["mtp"]).has_mtp_head
    assert verdict("draft-mtp", models["mtp"], None).runnable
    assert verdict("draft-mtp", models["mtp"], models["mtp"]).runnable
    assert verdict("draft-mtp", models["target"], None) == Verdict(
        False, "tiny-target.gguf has no MTP (NextN) layers, so draft-mtp cannot run"
    )


def test_spec_types_without_a_draft(models):
    for spec_type in ("none", "ngram-simple", "ngram-mod", "ngram-cache"):
        assert verdict(spec_type, models["target"], None).runnable
    assert verdict("draft-simple", models["target"], None) == Verdict(False, "draft-simple needs a draft model")


def _truncated(tmp_path: Path, source: Path) -> Path:
    path = tmp_path / "truncated.gguf"
    path.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    return path


def _garbage(tmp_path: Path, source: Path) -> Path:
    path = tmp_path / "garbage.gguf"
    path.write_bytes(b"not a gguf file at all" * 10)
    return path


def _missing(tmp_path: Path, source: Path) -> Path:
    return tmp_path / "missing.gguf"


@pytest.mark.parametrize("make_broken", [_truncated, _garbage, _missing])
def test_broken_files_raise_model_file_error_naming_the_file(tmp_path, models, make_broken):
    path = make_broken(tmp_path, models["target"])
    with pytest.raises(ModelFileError) as caught:
        read_gguf_info(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.slow
def test_real_gemma_is_q4_k_m_and_cannot_drive_dspark(gemma_path, models):
    gemma = read_gguf_info(gemma_path)  # ~10 s on 2 cores: GGUFReader walks the 262k-token vocabulary
    assert (gemma.architecture, gemma.quant, gemma.n_vocab, gemma.add_bos) == ("gemma3", "Q4_K_M", 262144, True)
    assert check_pair("draft-simple", gemma, gemma).runnable
    assert check_pair("draft-dspark", gemma, read_gguf_info(models["dspark"])) == Verdict(
        False, "gemma3 targets expose no layer inputs, so they cannot drive a DSpark draft"
    )
