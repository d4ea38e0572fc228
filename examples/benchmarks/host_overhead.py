"""Host work per generation step of the in-process engine at a real model's vocabulary (issue 14).

A qwen3 target with Qwen3's 151,936-token vocabulary (random weights, tiny layers: the decode itself is
cheap, so what is left is host work) with a draft-simple draft, a DSpark draft (Markov head) and a
DFlash draft (dspark_fixtures.write_qwen3_pair). For each spec type it prints, per step (one target
decode) of the decode phase:

* host ms: wall time outside llama_decode / llama_process (device work included in those: each is
  followed by llama_synchronize), split into llama.cpp's sampler chain (`llama_sampler_sample`, which
  llama-server runs per position too), its KV cache calls (`llama_memory_seq_*`, llama-server's too) and
  autotune's own Python and numpy work;
* host share: host time / step time;
* bytes copied off the device: logits rows, and layer inputs plus DSpark confidence rows.

This is a benchmark that prints figures, not a test. Figures depend on load: run it on a quiet machine.

Run: python examples/benchmarks/host_overhead.py [--max-tokens 32] [--prompts 3] [--vocab 151936]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _steps import StepProfile, Tally, address  # noqa: E402

from autotune.engines.python import PythonEngine  # noqa: E402
from autotune.measure.measurement import Measurement  # noqa: E402
from autotune.measure.prompts import PromptMix, load_prompt_mix  # noqa: E402
from autotune.spec.config import SpecConfig  # noqa: E402
from autotune.spec.types import DFLASH_TYPES  # noqa: E402
from autotune.testing.dspark_fixtures import QWEN3_VOCAB, write_qwen3_pair  # noqa: E402

CONTEXT = 2048


def configs(files: dict[str, Path], n_max: int) -> dict[str, SpecConfig]:
    target = files["target"]
    out = {
        "none": SpecConfig(target),
        "ngram-simple n2 m8": SpecConfig(
            target, "ngram-simple", None, {"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}
        ),
        "draft-simple n_max=4": SpecConfig(target, "draft-simple", files["draft"], {"draft_n_max": 4}),
        f"dflash n_max={n_max - 1}": SpecConfig(target, "draft-dflash", files["dflash"], {"draft_n_max": n_max - 1}),
        f"dspark n_max={n_max}": SpecConfig(target, "draft-dspark", files["dspark"], {"draft_n_max": n_max}),
    }
    for k in (2, 3, 4):
        for n in (8, 16, 32):
            out[f"pctree k={k} n={n}"] = SpecConfig(
                target,
                "draft-dspark",
                files["dspark"],
                {"draft_n_max": n_max, "dspark_pctree": True, "dspark_pctree_k": k, "dspark_pctree_n": n},
            )
    return out


def profile_of(engine: PythonEngine, config: SpecConfig) -> StepProfile:
    """What to count for `config`: which context is the target, what else its decodes copy off the device."""
    model = engine._models[config.target]
    if config.spec_type not in DFLASH_TYPES:
        return StepProfile(model.n_vocab, target_ctx=address(engine.context("target", config.target).ptr))
    pair = engine.dflash_pair(config)
    return StepProfile(
        model.n_vocab,
        target_ctx=address(pair.target.ptr),
        feature_width=len(pair.layer_ids) * pair.target.n_embd,
        conf_width=pair.draft.n_embd,
    )


def measure_profiled(
    engine: PythonEngine, config: SpecConfig, mix: PromptMix, max_tokens: int
) -> tuple[Tally, Measurement]:
    """A warm-up on the mix's first prompt (contexts made, caches touched), then the whole mix profiled: its
    decode phases' tally and the measurement."""
    engine.prepare(config, mix, max_tokens=max_tokens)
    engine.measure(config, PromptMix(mix.source, mix.prompts[:1]), max_tokens=max_tokens)
    tally = Tally()
    with profile_of(engine, config) as profile:

        def on_prompt(index, result) -> None:
            ended = time.perf_counter()
            profile.tally(ended - result.decode_ms / 1000, ended, tally)

        measured = engine.measure(config, mix, max_tokens=max_tokens, on_prompt=on_prompt)
    return tally, measured


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=3, help="prompts of the bundled mix, one per category")
    parser.add_argument("--vocab", type=int, default=QWEN3_VOCAB)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--markov-rank", type=int, default=8)
    parser.add_argument("--block-size", type=int, default=8, help="the DSpark draft's block (n_max)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--models-dir", type=Path, default=None, help="reuse fixture files written there before")
    args = parser.parse_args()

    root = args.models_dir or Path(tempfile.mkdtemp(prefix="autotune-host-overhead-"))
    if not (root / "target.gguf").exists():
        root.mkdir(parents=True, exist_ok=True)
        write_qwen3_pair(
            root, vocab_size=args.vocab, n_embd=args.n_embd, markov_rank=args.markov_rank, block_size=args.block_size
        )
    files = {name: root / f"{name}.gguf" for name in ("target", "draft", "dspark", "dflash")}
    mix = PromptMix("host", tuple(load_prompt_mix().take(per_category=1).prompts[: args.prompts]))
    with PythonEngine(context_size=CONTEXT, threads=args.threads) as engine:
        print(f"{engine.build_info}")
        print(
            f"vocab {args.vocab}, n_embd {args.n_embd}, Markov rank {args.markov_rank}, block {args.block_size}, "
            f"{len(mix.prompts)} prompts x {args.max_tokens} tokens"
        )
        print(
            f"{'spec type':<22}{'steps':>6}{'host ms':>9}{'sampler':>9}{'kv':>7}{'own ms':>8}{'host %':>8}"
            f"{'logits KiB':>12}{'other KiB':>11}   (per step)"
        )
        for label, config in configs(files, args.block_size).items():
            t, _ = measure_profiled(engine, config, mix, args.max_tokens)
            logits, other = t.bytes_per_step()
            print(
                f"{label:<22}{t.steps:>6}{t.host_ms_per_step:>9.3f}{t.sampler_ms_per_step:>9.3f}{t.kv_ms_per_step:>7.3f}"
                f"{t.own_ms_per_step:>8.3f}{100 * t.host_share:>7.1f}%{logits / 1024:>12.1f}{other / 1024:>11.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
