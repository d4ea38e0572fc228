"""Benchmark of the in-process engine on Gemma 3 270M (figures for issue 2's closing note).

(a) baseline decode tok/s of autotune's lean loop vs llama-cpp-python's own `Llama(...)` streamed
    generation, same model, threads, prompts and output length, interleaved;
(b) ngram-simple speedup over the baseline on the summarization and rag categories;
(c) wall time of one study trial and the share of it that is not generation (models loaded).

Run: python examples/benchmarks/python_engine.py [--max-tokens 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import optuna
from llama_cpp import Llama

from autotune.cli.progress import SilentReporter
from autotune.engines.python import PythonEngine
from autotune.llamacpp.runtime import server_default_threads
from autotune.measure.measurement import Measurement
from autotune.measure.prompts import load_prompt_mix
from autotune.models.candidates import find_candidates
from autotune.models.files import resolve_model_files
from autotune.search.inputs import SearchSettings
from autotune.search.measured import Tuner
from autotune.spec.config import SpecConfig
from autotune.spec.space import load_model_space
from autotune.study.records import TrialRecord


def llama_streamed_tok_s(llm: Llama, texts: list[str], max_tokens: int) -> float:
    """Decode tok/s of Llama's streamed completion, defined as autotune defines it (first to last token)."""
    tokens = 0
    seconds = 0.0
    for text in texts:
        llm.reset()
        stamps = [time.perf_counter() for _ in llm(text, max_tokens=max_tokens, temperature=0.0, stream=True)]
        tokens += len(stamps) - 1
        seconds += stamps[-1] - stamps[0]
    return tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    space = load_model_space("gemma3-270m")
    files = resolve_model_files(space, Path(tempfile.gettempdir()) / "autotune-bench-models")
    threads = server_default_threads()
    mix = load_prompt_mix().take(per_category=1)
    engine = PythonEngine(context_size=space.model.context_size, threads=threads)
    baseline = SpecConfig(files.target)
    engine.prepare(baseline, mix, max_tokens=args.max_tokens)
    texts = [engine._models[files.target].chat_prompt(p.text) for p in mix]
    llm = Llama(
        str(files.target),
        n_ctx=space.model.context_size,
        n_threads=threads,
        n_threads_batch=threads,
        n_gpu_layers=-1,
        flash_attn=True,
        verbose=False,
    )

    print(
        f"Gemma 3 270M Q4_K_M, {threads} threads, {len(mix)} prompts x {args.max_tokens} tokens, {args.rounds} rounds"
    )
    print("\n(a) baseline decode tok/s: autotune lean loop vs Llama(...) streamed")
    ours, theirs = [], []
    for round_ in range(args.rounds):
        ours.append(engine.measure(baseline, mix, max_tokens=args.max_tokens).mix_tok_s)
        theirs.append(llama_streamed_tok_s(llm, texts, args.max_tokens))
        print(
            f"  round {round_ + 1}: autotune {ours[-1]:6.1f}   Llama {theirs[-1]:6.1f}   ratio {ours[-1] / theirs[-1]:.3f}"
        )
    print(
        f"  mean: autotune {sum(ours) / len(ours):.1f}  Llama {sum(theirs) / len(theirs):.1f}  "
        f"ratio {sum(ours) / sum(theirs):.3f}"
    )
    del llm

    print("\n(b) ngram-simple speedup over baseline, summarization + rag (4 prompts each), interleaved")
    copy_mix = load_prompt_mix().take(categories=["summarization", "rag"])
    configs = [
        SpecConfig(files.target, "ngram-simple", params={"ngram_simple_size_n": n, "ngram_simple_size_m": m})
        for n, m in ((2, 8), (3, 16), (4, 32))
    ]
    sums: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for config in [baseline, *configs]:
            m: Measurement = engine.measure(config, copy_mix, max_tokens=args.max_tokens)
            sums.setdefault(config.describe(), []).append(m.mix_tok_s)
            if not config.is_baseline:
                sums.setdefault(config.describe() + " acceptance", []).append(m.acceptance or 0.0)
    base_tok_s = sum(sums["none"]) / len(sums["none"])
    print(f"  none: {base_tok_s:.1f} tok/s")
    for config in configs:
        label = config.describe()
        tok_s = sum(sums[label]) / len(sums[label])
        acceptance = sum(sums[label + " acceptance"]) / args.rounds
        print(f"  {label}: {tok_s:.1f} tok/s  speedup {tok_s / base_tok_s:.2f}x  acceptance {acceptance:.0%}")

    print("\n(c) one trial's wall time and its share that is not generation (models already loaded)")
    with tempfile.TemporaryDirectory() as tmp:
        storage = optuna.storages.RDBStorage(f"sqlite:///{tmp}/bench.db")
        tuner = Tuner(
            space.restricted_to(set(engine.runnable_spec_types)),
            find_candidates(files),
            mix,
            engine,
            SearchSettings("gemma3-270m", trials=6, max_tokens=args.max_tokens, seed=0, pruning=False),
            SilentReporter(),
        )
        study = tuner.run(storage)
        for trial in study.trials:
            wall, gen = TrialRecord.of(trial).wall_s, TrialRecord.of(trial).generation_s
            if gen is None:
                print(f"  trial {trial.number} {trial.state.name}")
                continue
            label = TrialRecord.of(trial).label
            print(
                f"  trial {trial.number} {label:<45} wall {wall:6.2f}s generation {gen:6.2f}s "
                f"not generation {100 * (wall - gen) / wall:4.1f}%"
            )
    engine.close()


if __name__ == "__main__":
    main()
