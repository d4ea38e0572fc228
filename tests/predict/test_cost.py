"""The cost model: curves measured on a real (tiny) model, interpolated per step, stored and read back;
the calibration recovers a known scale and per-step time from llama-server-like measurements."""

from __future__ import annotations

import json
import math

import pytest

from autotune.engines.python import PythonEngine
from autotune.engines.speculation import Steps
from autotune.predict.cost import CostModel, Curve, measure_curve, measure_sampler
from autotune.predict.predictor import DraftCharge, fit_calibration, predict, raw_decode_ms
from autotune.predict.replay import PromptReplay, Replay
from autotune.spec.config import SpecConfig


def test_a_curve_is_measured_on_real_llama_cpp_and_stored(tiny_dir):
    target = tiny_dir / "tiny-target.gguf"
    with PythonEngine(context_size=512, threads=1) as engine:
        engine.load(SpecConfig(target))
        context = engine.context("target", target)
        curve = measure_curve(context, list(range(3, 200)), depths=[16, 64], max_size=24, repeats=2)
        sampler_ms = measure_sampler(context, engine.sampler("target", target), 5, count=10)
    assert curve.sizes[0] == 1 and curve.sizes[-1] == 24 and curve.depths == (16, 64)
    assert all(ms > 0 for row in curve.ms for ms in row) and curve.spread >= 0 and sampler_ms > 0
    model = CostModel(curve, sampler_ms)
    stored = json.loads(json.dumps(model.as_dict()))  # as the study keeps it
    assert stored["target"]["ms"] == [list(row) for row in curve.ms] and stored["sampler_ms"] == sampler_ms
    assert stored["blocks"] == stored["trees"] == {}


def test_interpolation_between_measured_sizes_and_depths():
    curve = Curve(sizes=(1, 5), depths=(100, 300), ms=((10.0, 30.0), (20.0, 60.0)), spread=0.0)
    assert curve.at(1, 100) == 10.0 and curve.at(5, 300) == 60.0
    assert curve.at(3, 100) == pytest.approx(20.0)  # halfway in size
    assert curve.at(3, 200) == pytest.approx(30.0)  # and halfway in depth: between 20 and 40
    assert curve.at(9, 100) == 30.0  # past the largest measured batch: charged as it


def _replay(*prompts: list[int]) -> Replay:
    """A replay whose prompts verify batches of these sizes."""

    def prompt(batch_sizes: list[int]) -> PromptReplay:
        steps = Steps(batch_sizes=batch_sizes, positions=[100] * len(batch_sizes), emitted=list(batch_sizes))
        return PromptReplay("p", 1 + sum(batch_sizes), steps)

    return Replay(tuple(prompt(sizes) for sizes in prompts))


def test_the_calibration_recovers_a_known_scale_and_per_step_time():
    cost = CostModel(Curve(sizes=(1, 8), depths=(100,), ms=((10.0, 45.0),), spread=0.0), sampler_ms=0.5)
    runs = []
    for pattern in ([1] * 40, [8] * 5 + [1] * 2, [4] * 10, [2] * 20):  # 11 prompts of each, lengths varied
        replayed = _replay(*(pattern * (1 + k % 3) for k in range(11)))
        server_ms = [
            1.3 * raw_decode_ms(p, cost, DraftCharge()) + 2.0 * len(p.steps.batch_sizes)  # the "server"
            for p in replayed.prompts
        ]
        runs.append((replayed, DraftCharge(), server_ms))
    calibration = fit_calibration(runs, cost)
    # the prior (scales at the baseline's pace, additive terms 0) leans on the fit only a little
    assert calibration.scale == pytest.approx(1.3, rel=0.03) and calibration.per_step_ms == pytest.approx(2.0, abs=0.5)
    assert calibration.error < 0.01 and calibration.per_row_ms < 0.2
    baseline = predict(runs[0][0], cost, calibration).tok_s
    assert baseline == pytest.approx(
        sum(p.decode_tokens for p in runs[0][0].prompts) * 1000 / sum(runs[0][2]), rel=0.01
    )


def test_references_that_cannot_separate_the_terms_fit_the_scale_alone():
    cost = CostModel(Curve(sizes=(1, 8), depths=(100,), ms=((10.0, 45.0),), spread=0.0), sampler_ms=0.0)
    runs = [
        (_replay([1] * 40), DraftCharge(), [2.0 * 400]),
        (_replay([1] * 38), DraftCharge(), [2.0 * 380]),
    ]  # both one-token steps
    calibration = fit_calibration(runs, cost)
    assert calibration.per_step_ms == pytest.approx(0.0, abs=1e-9) and calibration.scale == pytest.approx(2.0)


def test_prompts_a_reference_never_measured_are_left_out_of_its_fit_and_its_error():
    cost = CostModel(Curve(sizes=(1, 8), depths=(100,), ms=((10.0, 45.0),), spread=0.0), sampler_ms=0.5)
    runs = []
    for number, pattern in enumerate(([1] * 40, [8] * 5 + [1] * 2, [4] * 10, [2] * 20)):
        replayed = _replay(*(pattern * (1 + k % 3) for k in range(11)))
        server_ms = [
            1.3 * raw_decode_ms(p, cost, DraftCharge()) + 2.0 * len(p.steps.batch_sizes) for p in replayed.prompts
        ]
        if number:  # every reference but the baseline left after 3 prompts: the other 8 were never measured
            server_ms = server_ms[:3] + [math.nan] * 8
        runs.append((replayed, DraftCharge(), server_ms))
    calibration = fit_calibration(runs, cost)
    assert calibration.points == 11 + 3 * 3
    assert calibration.scale == pytest.approx(1.3, rel=0.03) and calibration.per_step_ms == pytest.approx(2.0, abs=0.5)
    assert calibration.error < 0.01 and calibration.worst_error < 0.03  # off on the prompts measured, not nan
