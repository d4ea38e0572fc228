"""The replay counts what the engines count: on the real Gemma 3 270M, the n-gram types and a combination
replayed over llama-server's own baseline output draft and accept exactly what llama-server drafted and
accepted (ngram-cache over its own run's output: see its test); draft-simple cut from a Q4_0 draft's
recorded chains counts what the in-process engine counts."""

from __future__ import annotations

import functools
import shutil

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines.drafters.build import build_drafter
from autotune.engines.prompt_tokens import PromptTokens
from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.measure.prompts import PromptMix, default_mix_path, load_prompt_mix
from autotune.predict.chains import DraftChains
from autotune.predict.replay import replay
from autotune.predict.trajectory import Trajectories
from autotune.spec.config import SpecConfig

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

MAX_TOKENS = 48
CONTEXT = 2048
NGRAM_CONFIGS = [
    ("ngram-simple", {"ngram_simple_size_n": 3, "ngram_simple_size_m": 16}),
    ("ngram-simple", {"ngram_simple_size_n": 6, "ngram_simple_size_m": 16}),
    ("ngram-map-k", {"ngram_map_k_size_n": 3, "ngram_map_k_size_m": 12}),
    ("ngram-map-k4v", {"ngram_map_k4v_size_n": 3, "ngram_map_k4v_size_m": 12, "ngram_map_k4v_min_hits": 1}),
    ("ngram-mod", {"ngram_mod_n_match": 8, "ngram_mod_n_min": 2, "ngram_mod_n_max": 16}),
    (
        "ngram-simple,ngram-mod",
        {
            "ngram_simple_size_n": 4,
            "ngram_simple_size_m": 12,
            "ngram_mod_n_match": 8,
            "ngram_mod_n_min": 0,
            "ngram_mod_n_max": 12,
        },
    ),
]


@pytest.fixture(scope="module")
def gemma_pair(gemma_path, tmp_path_factory):
    """Gemma Q4_K_M and a Q4_0 copy written by `autotune quantize`."""
    models = tmp_path_factory.mktemp("gemma-pair")
    shutil.copy(gemma_path, models / "gemma-3-270m-q4_k_m.gguf")
    result = CliRunner().invoke(
        cli, ["quantize", "--model", "gemma3-270m", "--quant", "Q4_0", "--models-dir", str(models)]
    )
    assert result.exit_code == 0, result.output
    return models / "gemma-3-270m-q4_k_m.gguf", models / "gemma-3-270m-Q4_0.gguf"


@pytest.fixture(scope="module")
def mix(gemma_path) -> PromptMix:
    """Five prompts of the mix a Gemma study measures (the continuation mix: Gemma 3 270M is a base model)."""
    bundled = load_prompt_mix(default_mix_path([gemma_path])[0]).take(per_category=1)
    return PromptMix(bundled.source, bundled.prompts[:5])


def trajectories_of(engine_name, target, measurement, mix) -> Trajectories:
    prompts = PromptTokens(CONTEXT)
    tokens = [prompts.tokens(target, p, MAX_TOKENS) for p in mix]
    return Trajectories.from_measurement(
        str(target), engine_name, measurement, tokens, MAX_TOKENS, prompts.model(target).is_eog
    )


def compare(replayed, measured, baseline) -> int:
    """Assert equal counts on every prompt whose output is the baseline's; returns how many were compared."""
    compared = 0
    for replayed_prompt, result, base in zip(replayed.prompts, measured.results, baseline.results):
        if result.tokens != base.tokens:
            continue  # a near-tie broke the other way: the trajectory is not this run's
        assert (replayed_prompt.steps.drafted, replayed_prompt.steps.accepted) == (
            result.n_drafted,
            result.n_accepted,
        ), result.prompt_id
        compared += 1
    return compared


def test_ngram_replay_counts_equal_llama_servers(gemma_pair, mix):
    target, _ = gemma_pair
    with ServerEngine(context_size=CONTEXT) as server:
        baseline = server.measure(SpecConfig(target), mix, max_tokens=MAX_TOKENS)
        trajectories = trajectories_of("server", target, baseline, mix)
        total_drafted = compared = 0
        for spec_type, params in NGRAM_CONFIGS:
            config = SpecConfig(target, spec_type, params=params)
            measured = server.measure(config, mix, max_tokens=MAX_TOKENS)
            replayed = replay(build_drafter(config), trajectories)
            found = compare(replayed, measured, baseline)
            assert found >= 2, config.describe()  # a near-tie may part an output from the baseline's
            compared += found
            total_drafted += replayed.drafted
    assert compared >= 0.7 * len(NGRAM_CONFIGS) * len(mix)  # most outputs stay the baseline's
    assert total_drafted > 100  # the mix makes the n-gram types draft: the counts compared are not zeros


def test_ngram_cache_replay_over_its_own_output_counts_what_llama_server_counted(gemma_path, mix):
    """ngram-cache's counts on a prompt depend on what llama-server generated on earlier prompts (its cache
    outlives requests, and a request whose context stays shorter than an earlier one's drafts from their
    text alone: autotune.engines.drafters.ngram_cache), and its output parts from the baseline's at
    near-ties. Replayed over that run's own output, every prompt's counts must be llama-server's, the
    requests that added nothing to the cache included."""
    config = SpecConfig(gemma_path, "ngram-cache")
    with ServerEngine(context_size=CONTEXT, threads=1) as server:
        measured = server.measure(config, mix, max_tokens=MAX_TOKENS)
    drafter = build_drafter(config)
    cache_sizes = []  # when each request (the warm-up first) begins, and at the end
    begin = drafter.begin

    def watched_begin(prompt):
        cache_sizes.append(drafter.cache_size)
        begin(prompt)

    drafter.begin = watched_begin
    replayed = replay(drafter, trajectories_of("server", gemma_path, measured, mix))
    cache_sizes.append(drafter.cache_size)
    counts = [
        (
            r.prompt_id,
            p.steps.drafted,
            p.steps.accepted,
            p.steps.verify_steps,
            r.n_drafted,
            r.n_accepted,
            r.n_verify_steps,
        )
        for p, r in zip(replayed.prompts, measured.results)
    ]
    assert all(c[1:4] == c[4:] for c in counts), counts
    assert replayed.drafted > 0, counts
    assert any(a == b for a, b in zip(cache_sizes[1:], cache_sizes[2:])), cache_sizes  # a request added nothing


def test_draft_simple_replay_from_chains_counts_what_the_in_process_engine_counts(gemma_pair, mix):
    """On CPU, draft-simple's batched verification parts from the one-token baseline at near-ties on most
    prompts of this mix, so the trajectory here is each run's own output: the counts then depend only on
    what the draft drafts along it, which the recorded chains must reproduce."""
    target, draft = gemma_pair
    with PythonEngine(context_size=CONTEXT) as local:
        for params in ({"draft_n_max": 4}, {"draft_n_max": 6, "draft_p_min": 0.6, "draft_n_min": 1}):
            config = SpecConfig(target, "draft-simple", draft, params)
            measured = local.measure(config, mix, max_tokens=MAX_TOKENS)
            trajectories = trajectories_of("python", target, measured, mix)
            chains = DraftChains.record(local.context("draft", draft), local.sampler("draft", draft), trajectories, 8)
            replayed = replay(build_drafter(config, functools.partial(chains.drafter, config)), trajectories)
            assert compare(replayed, measured, measured) == len(mix), config.describe()
            assert replayed.drafted > 50 and 0 < replayed.accepted < replayed.drafted
