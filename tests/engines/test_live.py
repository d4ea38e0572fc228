"""How many llama-servers a race loads at once (autotune.engines.live), for Qwen3 8B's files on the cards
a stand-in nvidia-smi reports: an 80 GB H100, a 24 GB RTX 4090, and one whose free memory is [N/A] (MIG).

The model files are GGUF headers only, with the tensor table of Qwen3 8B (Q4_K_M, Q8_0) and its 0.6B and
1.7B drafts (Q8_0): the estimate reads nothing else, and their weights come to the hub's sizes."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from autotune.engines import live
from autotune.engines.live import CUDA_CONTEXT_BYTES, HEADROOM, FreeMemory, fits_at_once, free_memory
from autotune.engines.memory import GIB, ContextShape, estimate
from autotune.engines.server import ServerEngine
from autotune.measure.prompts import Prompt, PromptMix
from autotune.spec.config import SpecConfig
from autotune.testing.stand_ins import stand_in_nvidia_smi

CONTEXT = 4096
MIB = 1024**2
H100 = ("NVIDIA H100 80GB HBM3", 81559)
H100_FREE_MIB = 81000  # an idle H100's
RTX_4090 = ("NVIDIA GeForce RTX 4090", 24564)
RTX_4090_FREE_MIB = 24080  # an idle RTX 4090's, no display on it
VOCAB = 151936
#: (file, n_embd, layers, heads, KV heads, FFN width, tied output, quant), and its size on the hub (GB)
QWEN3 = {
    "Qwen3-8B-Q4_K_M.gguf": ((4096, 36, 32, 8, 12288, False, "Q4_K_M"), 5.0),
    "Qwen3-8B-Q8_0.gguf": ((4096, 36, 32, 8, 12288, False, "Q8_0"), 8.7),
    "Qwen3-0.6B-Q8_0.gguf": ((1024, 28, 16, 8, 3072, True, "Q8_0"), 0.6),
    "Qwen3-1.7B-Q8_0.gguf": ((2048, 28, 16, 8, 6144, True, "Q8_0"), 1.8),
}


def write_qwen3_header(path: Path, n_embd: int, layers: int, heads: int, kv_heads: int, ff: int, tied: bool, quant):
    """A GGUF of a Qwen3 model's metadata and tensor table, without the tensors' data. Q4_K_M much as
    llama.cpp quantizes it: Q6_K for the output and about half the layers' attn_v and ffn_down (here every
    other layer), Q4_K elsewhere."""
    head_dim = 128
    writer = gguf.GGUFWriter(str(path), "qwen3")
    writer.add_block_count(layers)
    writer.add_context_length(40960)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(VOCAB)])

    def tensor(name: str, shape: tuple[int, ...], kind: Q) -> None:
        block, size = GGML_QUANT_SIZES[kind]
        n = int(np.prod(shape))
        if kind == Q.F32:
            writer.add_tensor_info(name, shape, np.dtype(np.float32), 4 * n)
        else:  # a quantized tensor's shape is given in bytes
            bytes_shape = (*shape[:-1], shape[-1] // block * size)
            writer.add_tensor_info(name, bytes_shape, np.dtype(np.uint8), n // block * size, raw_dtype=kind)

    def weights(name: str, layer: int | None = None) -> Q:
        if quant == "Q8_0":
            return Q.Q8_0
        heavy = name == "output.weight" or (layer is not None and layer % 2 == 0 and name in ("attn_v", "ffn_down"))
        return Q.Q6_K if heavy else Q.Q4_K

    tensor("token_embd.weight", (VOCAB, n_embd), weights("token_embd"))
    for i in range(layers):
        for norm, width in (
            ("attn_norm", n_embd),
            ("ffn_norm", n_embd),
            ("attn_q_norm", head_dim),
            ("attn_k_norm", head_dim),
        ):
            tensor(f"blk.{i}.{norm}.weight", (width,), Q.F32)
        for name, shape in (
            ("attn_q", (heads * head_dim, n_embd)),
            ("attn_k", (kv_heads * head_dim, n_embd)),
            ("attn_v", (kv_heads * head_dim, n_embd)),
            ("attn_output", (n_embd, heads * head_dim)),
            ("ffn_gate", (ff, n_embd)),
            ("ffn_up", (ff, n_embd)),
            ("ffn_down", (n_embd, ff)),
        ):
            tensor(f"blk.{i}.{name}.weight", shape, weights(name, i))
    tensor("output_norm.weight", (n_embd,), Q.F32)
    if not tied:
        tensor("output.weight", (VOCAB, n_embd), weights("output.weight"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> dict[str, Path]:
    """The four files by their hub names, their weights the hub's sizes (to its 0.1 GB)."""
    root = tmp_path_factory.mktemp("qwen3-headers")
    files = {}
    for name, (shape, hub_gb) in QWEN3.items():
        write_qwen3_header(root / name, *shape)
        assert estimate([root / name], []) == pytest.approx(hub_gb * 1e9, abs=0.06e9), name
        files[name] = root / name
    return files


@pytest.fixture
def card(tmp_path, monkeypatch):
    """Put a stand-in nvidia-smi first on PATH: `card(gpus, free_mib)` (see stand_in_nvidia_smi)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(live.BUDGET_VARIABLE, raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    def install(gpus, free_mib=None) -> FreeMemory:
        stand_in_nvidia_smi(tmp_path, gpus, free_mib=free_mib)
        return free_memory()

    return install


def race_of(qwen3: dict[str, Path], quant: str) -> list[SpecConfig]:
    """A target's five servers in a race: its baseline, the control (the baseline again) and three finalists."""
    target = qwen3[f"Qwen3-8B-{quant}.gguf"]
    return [
        SpecConfig(target),
        SpecConfig(target),
        SpecConfig(target, "draft-simple", qwen3["Qwen3-0.6B-Q8_0.gguf"], {"draft_n_max": 8}),
        SpecConfig(target, "draft-simple", qwen3["Qwen3-1.7B-Q8_0.gguf"], {"draft_n_max": 4}),
        SpecConfig(target, "ngram-simple", None, {"ngram_simple_size_n": 3}),
    ]


def weights_and_contexts(configs: list[SpecConfig]) -> int:
    """What the servers' buffers take on a GPU, without their CUDA contexts."""
    total = 0
    for config in configs:
        models = [config.target] + ([config.draft] if config.draft else [])
        total += estimate(models, [ContextShape(m, CONTEXT, live.UBATCH) for m in models])
    return total


def test_an_80_gb_card_holds_each_target_s_race_in_turn_and_counts_each_server_s_cuda_context(card, qwen3):
    free = card([H100], [H100_FREE_MIB])
    assert free == FreeMemory(H100_FREE_MIB * MIB, 1)
    q4, q8 = race_of(qwen3, "Q4_K_M"), race_of(qwen3, "Q8_0")
    assert not fits_at_once(q4 + q8, free, context_size=CONTEXT)  # ten 8B servers: not together ...
    assert fits_at_once(q4, free, context_size=CONTEXT)  # ... each target's five, in turn
    assert fits_at_once(q8, free, context_size=CONTEXT)
    # plain Q4_K_M servers: as many as the card holds with a CUDA context each, not one more, though the
    # weights and contexts of one more fit
    one = weights_and_contexts([SpecConfig(qwen3["Qwen3-8B-Q4_K_M.gguf"])])
    most = int(HEADROOM * free.free // (one + CUDA_CONTEXT_BYTES))
    assert (most + 1) * one <= HEADROOM * free.free
    assert fits_at_once([SpecConfig(qwen3["Qwen3-8B-Q4_K_M.gguf"])] * most, free, context_size=CONTEXT)
    assert not fits_at_once([SpecConfig(qwen3["Qwen3-8B-Q4_K_M.gguf"])] * (most + 1), free, context_size=CONTEXT)


def test_a_24_gb_card_holds_one_8b_server_at_a_time(card, qwen3):
    free = card([RTX_4090], [RTX_4090_FREE_MIB])
    assert free == FreeMemory(RTX_4090_FREE_MIB * MIB, 1)
    for quant in ("Q4_K_M", "Q8_0"):
        assert not fits_at_once(race_of(qwen3, quant), free, context_size=CONTEXT)  # not even one target's
    reference = race_of(qwen3, "Q8_0")[:2]  # the Q8_0 baseline and its control: their buffers fit, not with
    assert weights_and_contexts(reference) <= HEADROOM * free.free  # a CUDA context each
    assert not fits_at_once(reference, free, context_size=CONTEXT)
    assert fits_at_once(reference[:1], free, context_size=CONTEXT)


def test_the_memory_budget_caps_what_the_gpu_and_the_host_have_free(card, qwen3, monkeypatch):
    reference = race_of(qwen3, "Q8_0")[:2]
    assert fits_at_once(reference, card([H100], [H100_FREE_MIB]), context_size=CONTEXT)
    monkeypatch.setenv(live.BUDGET_VARIABLE, "20")  # the card shared with other work
    free = card([H100], [H100_FREE_MIB])
    assert free == FreeMemory(20 * GIB, 1)
    assert not fits_at_once(reference, free, context_size=CONTEXT)
    assert fits_at_once(reference[:1], free, context_size=CONTEXT)
    monkeypatch.setenv(live.BUDGET_VARIABLE, "1000")  # more than the card has: the card's
    assert card([H100], [H100_FREE_MIB]).free == H100_FREE_MIB * MIB

    # no GPU: the host's memory, the servers sharing the weights, and the budget caps it too
    monkeypatch.setenv(live.BUDGET_VARIABLE, "2")
    free = card([])
    assert free.gpus == 0 and free.free <= 2 * GIB
    small = SpecConfig(qwen3["Qwen3-0.6B-Q8_0.gguf"])
    assert fits_at_once([small], free, context_size=CONTEXT)
    assert not fits_at_once([small, small], free, context_size=CONTEXT)

    monkeypatch.setenv(live.BUDGET_VARIABLE, "lots")  # not a number: nothing is guessed
    free = card([H100], [H100_FREE_MIB])
    assert free.free is None and "AUTOTUNE_MEMORY_BUDGET_GIB='lots' is not a number of GiB" in free.note


def test_free_memory_that_nvidia_smi_prints_as_na_gives_one_server_at_a_time(card, qwen3, monkeypatch):
    free = card([H100], ["[N/A]"])  # a MIG-enabled GPU
    assert free.free is None
    assert free.note == (
        "race: nvidia-smi lists GPU 0 but prints [N/A] as its free memory, so the servers are not loaded "
        "together: one llama-server at a time"
    )
    small = SpecConfig(qwen3["Qwen3-0.6B-Q8_0.gguf"])
    assert not fits_at_once([small, small], free, context_size=CONTEXT)
    assert card([H100, H100], [H100_FREE_MIB, "[N/A]"]).free is None  # one GPU of two unknown: all unknown
    monkeypatch.setenv(live.BUDGET_VARIABLE, "20")  # a budget caps what is known; it does not make it known
    assert card([H100], ["[N/A]"]).free is None


def test_nvidia_smi_failing_or_hanging_where_it_lists_gpus_gives_one_server_at_a_time(card, tmp_path, monkeypatch):
    free = card([H100])  # the GPUs' own query answered, the free-memory query exits 6
    assert free.free is None
    assert "nvidia-smi lists the GPUs but its free-memory query failed (exit 6 unexpected query:" in free.note

    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 5\n")  # a driver that hangs
    monkeypatch.setattr(live, "SMI_TIMEOUT_S", 0.5)
    free = free_memory()
    assert free.free is None and "nvidia-smi did not answer within 0.5 s" in free.note

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4b3f5e0c-1d2a-5b6c-8e9f-0a1b2c3d4e5f")  # a MIG instance
    free = card([H100], [H100_FREE_MIB])
    assert free.free is None and "CUDA_VISIBLE_DEVICES names a MIG instance" in free.note

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # every GPU hidden: the servers run on the CPU
    assert card([H100], [H100_FREE_MIB]).gpus == 0
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")  # no driver
    free = free_memory()
    assert free.gpus == 0 and free.free is not None and free.note is None


def test_the_server_engine_leaves_the_note_for_the_race_to_say(card, tiny_dir):
    target = tiny_dir / "tiny-target.gguf"
    configs = [SpecConfig(target), SpecConfig(target, "draft-simple", tiny_dir / "tiny-draft.gguf")]
    mix = PromptMix("live", (Prompt("a", "qa", "The quick brown fox jumps over the lazy dog."),))
    with ServerEngine(context_size=512) as engine:
        card([H100], ["[N/A]"])
        assert not engine.holds_at_once(configs, mix, max_tokens=16)
        assert engine.memory_note is not None and "[N/A]" in engine.memory_note
        card([H100], [H100_FREE_MIB])
        assert engine.holds_at_once(configs, mix, max_tokens=16)
        assert engine.memory_note is None
