"""The python engine's device-memory budget, on real llama.cpp: what a pair needs, what the device has
free, and a pair that does not fit failing its trial (`out of ... memory: needs X GiB, free Y GiB`)
while the engine, its worker and the study go on.

On this CPU the free memory comes from llama.cpp's CPU device (ggml_backend_dev_memory) and a budget
below it stands in for a small GPU; on a GPU the same check reads the GPU devices.
"""

from __future__ import annotations

import json
import re

import llama_cpp
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines import memory
from autotune.engines.memory import ContextShape
from autotune.engines.python import PythonEngine
from autotune.engines.worker import WorkerEngine
from autotune.errors import TrialFailure
from autotune.llamacpp.bindings import LoadedModel
from autotune.measure.prompts import Prompt, PromptMix
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf

MIX = PromptMix("memory", (Prompt("a", "qa", "The quick brown fox jumps over the lazy dog."),))
OUT_OF_MEMORY = re.compile(r"out of host memory: needs [0-9.e-]+ GiB, free [0-9.e-]+ GiB")


@pytest.fixture(scope="module")
def big_draft(tiny_dir):
    """A draft-simple draft for the tiny target (same vocabulary) that is ~20 times its size."""
    return tiny_gguf.write_qwen3_target(
        tiny_dir / "tiny-big.gguf", n_embd=256, n_layers=4, n_head=4, n_head_kv=2, seed=2
    )


def fitting_budget_gib(engine: PythonEngine, target, draft) -> float:
    """A budget that holds the target with its context, and not the big draft besides."""
    alone = memory.estimate([target], engine._context_shapes(SpecConfig(target))[("target", target)])
    with_draft = memory.estimate(
        [target, draft],
        [s for group in engine._context_shapes(SpecConfig(target, "draft-simple", draft)).values() for s in group],
    )
    assert with_draft > 2 * alone
    return 1.5 * alone / memory.GIB


def test_the_devices_report_their_memory():
    found = memory.devices()
    assert found and all(0 < d.free <= d.total for d in found)
    free, on_gpu = memory.free_bytes()
    assert free > 0 and on_gpu == any(d.is_gpu for d in found)


def test_the_estimate_holds_what_llama_cpp_allocates_for_weights_and_grows_with_the_kv_cache(tiny_dir):
    target, dspark = tiny_dir / "tiny-target.gguf", tiny_dir / "tiny-dspark.gguf"
    for path in (target, dspark):
        model = LoadedModel(path)
        try:
            assert memory.estimate([path], []) == llama_cpp.llama_model_size(model.ptr)
        finally:
            model.free()
    # 2 layers x 2 KV heads x 16 wide x (K + V) x 2 bytes (f16) = 256 bytes a cell; q8_0 takes 34 bytes per 32
    small, large = ContextShape(target, 512, 512), ContextShape(target, 1024, 512)
    assert memory.estimate([], [large]) - memory.estimate([], [small]) == 512 * 256
    quantized = ContextShape(target, 1024, 512, "q8_0", "q8_0")
    assert memory.estimate([], [large]) - memory.estimate([], [quantized]) == int(1024 * 256 * (1 - 34 / 64))


def test_a_pair_that_does_not_fit_fails_its_trial_and_the_engine_goes_on(tiny_dir, big_draft):
    target = tiny_dir / "tiny-target.gguf"
    with PythonEngine(context_size=512, threads=1) as probe:
        budget = fitting_budget_gib(probe, target, big_draft)
    with PythonEngine(context_size=512, threads=1, memory_budget_gib=budget) as engine:
        baseline = engine.measure(SpecConfig(target), MIX, max_tokens=8)
        with pytest.raises(TrialFailure, match=OUT_OF_MEMORY):
            engine.measure(SpecConfig(target, "draft-simple", big_draft, {"draft_n_max": 3}), MIX, max_tokens=8)
        assert big_draft not in engine._models  # refused before llama.cpp allocated anything
        again = engine.measure(SpecConfig(target), MIX, max_tokens=8)
        assert [r.tokens for r in again.results] == [r.tokens for r in baseline.results]
        fits = engine.measure(SpecConfig(target, "draft-simple", tiny_dir / "tiny-draft.gguf"), MIX, max_tokens=8)
        assert fits.n_drafted > 0


def test_only_the_pair_in_use_keeps_its_contexts(tiny_dir):
    target, dspark = tiny_dir / "tiny-target.gguf", tiny_dir / "tiny-dspark.gguf"
    with PythonEngine(context_size=512, threads=1) as engine:
        engine.measure(SpecConfig(target), MIX, max_tokens=4)
        assert set(engine._contexts) == {("target", target)}
        engine.measure(SpecConfig(target, "draft-dspark", dspark), MIX, max_tokens=4)
        assert set(engine._contexts) == {("dflash", target, dspark)}  # the plain target context is gone
        engine.measure(SpecConfig(target), MIX, max_tokens=4)
        assert set(engine._contexts) == {("target", target)} and set(engine._models) == {target}


def test_the_worker_reports_it_as_a_trial_failure_and_stays_up(tiny_dir, big_draft, monkeypatch):
    target = tiny_dir / "tiny-target.gguf"
    with PythonEngine(context_size=512, threads=1) as probe:
        monkeypatch.setenv("AUTOTUNE_MEMORY_BUDGET_GIB", str(fitting_budget_gib(probe, target, big_draft)))
    with WorkerEngine(context_size=512, threads=1) as engine:
        engine.measure(SpecConfig(target), MIX, max_tokens=4)
        pid = engine.worker_pid
        with pytest.raises(TrialFailure, match=OUT_OF_MEMORY):
            engine.measure(SpecConfig(target, "draft-simple", big_draft), MIX, max_tokens=4)
        assert engine.worker_pid == pid
        assert engine.measure(SpecConfig(target), MIX, max_tokens=4).results[0].n_generated == 4


def test_a_study_fails_the_trials_that_do_not_fit_and_goes_on(
    tmp_path, models_dir, big_draft, monkeypatch, autotune_home
):
    target = models_dir / "tiny-target.gguf"
    (models_dir / big_draft.name).write_bytes(big_draft.read_bytes())
    space = tmp_path / "tiny.toml"
    space.write_text(
        tiny_gguf.tiny_space(big_draft.name, spec_types={"draft-simple": tiny_gguf.TINY_SPEC_TYPES["draft-simple"]})
    )
    with PythonEngine(context_size=512, threads=1) as probe:
        monkeypatch.setenv(
            "AUTOTUNE_MEMORY_BUDGET_GIB", str(fitting_budget_gib(probe, target, models_dir / big_draft.name))
        )
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--strategy",
            "measure",
            "--model",
            "tiny",
            "--space",
            str(space),
            "--models-dir",
            str(models_dir),
            "--max-tokens",
            "8",
            "--per-category",
            "1",
            "--trials",
            "6",
            "--seed",
            "1",
            "--no-confirm",
            "--no-pruning",
        ],
    )
    assert result.exit_code == 0, result.output
    trials = json.loads(CliRunner().invoke(cli, ["trials", "--model", "tiny", "--json"]).output)
    draft_trials = [t for t in trials if t["spec_type"] == "draft-simple"]
    assert len(draft_trials) >= 2, trials  # the study went on past the first pair that did not fit
    assert all(t["state"] == "FAIL" and OUT_OF_MEMORY.search(t["fail_reason"]) for t in draft_trials), draft_trials
    assert any(t["spec_type"] == "none" and t["state"] == "COMPLETE" for t in trials), trials
