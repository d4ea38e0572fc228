"""The device check's measurements (run by gpu_check.sh, which builds and sets up first).

For Gemma 3 270M (baseline, ngram-simple, draft-simple with itself as the draft) and for the qwen3
fixture pair at Qwen3's 151,936-token vocabulary (baseline, ngram-simple, draft-simple, draft-dspark,
PCTree), on both engines: decode tok/s in-process and on llama-server and their ratio, the in-process
engine's host share of step time (examples/benchmarks/_steps.py: time outside llama_decode), and the
device memory in use after the pair loaded; DSpark and PCTree predicted from the pair's recorded blocks
against the in-process engine's counts and speedups. Then a 6-trial `autotune search` on Gemma, whose printed
command and figures are passed through. Every line starts with its section so a test can read it.

Run: python examples/benchmarks/gpu_check.py --gemma FILE [--max-tokens 64] [--prompts 11] [--trials 6]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_overhead import measure_profiled  # noqa: E402

from autotune.engines import memory  # noqa: E402
from autotune.engines.python import PythonEngine  # noqa: E402
from autotune.engines.server import ServerEngine  # noqa: E402
from autotune.errors import AutotuneError  # noqa: E402
from autotune.measure.prompts import PromptMix, load_prompt_mix  # noqa: E402
from autotune.predict.block_drafts import BlockPlan  # noqa: E402
from autotune.predict.target import measure_target  # noqa: E402
from autotune.spec.config import SpecConfig  # noqa: E402
from autotune.spec.types import SPEC_TYPE_PARAMS  # noqa: E402
from autotune.testing.dspark_fixtures import QWEN3_VOCAB, write_qwen3_pair  # noqa: E402

CONTEXT = 4096


def used_mib() -> str:
    """Memory in use on the GPUs (all of it, as the devices report), else this process's resident set, in MiB."""
    gpus = [d for d in memory.devices() if d.is_gpu]
    if gpus:
        return "+".join(f"{(d.total - d.free) / 2**20:.0f}" for d in gpus)
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return f"{pages * os.sysconf('SC_PAGE_SIZE') / 2**20:.0f} rss"


def server_runs(server: ServerEngine, config: SpecConfig) -> bool:
    """Whether this llama-server has the type and every flag of `config` (PCTree needs a fork's)."""
    known = SPEC_TYPE_PARAMS[config.spec_type]
    return config.spec_type in server.runnable_spec_types and all(server.supports_param(known[name]) for name in config.params)


def compare(label: str, configs: dict[str, SpecConfig], mix: PromptMix, max_tokens: int, server: ServerEngine | None,
            threads: int | None) -> None:
    print(f"{label}: {'config':<26}{'python tok/s':>13}{'server tok/s':>13}{'ratio':>7}{'host %':>8}"
          f"{'host ms/step':>13}{'used MiB':>10}", flush=True)
    with PythonEngine(context_size=CONTEXT, threads=threads) as engine:
        for name, config in configs.items():
            try:
                tally, ours = measure_profiled(engine, config, mix, max_tokens)
            except AutotuneError as exc:
                print(f"{label}: {name:<26} python: {exc}", flush=True)
                continue
            used = used_mib()
            theirs = None
            if server is not None and server_runs(server, config):
                try:
                    theirs = server.measure(config, mix, max_tokens=max_tokens).mix_tok_s
                except AutotuneError as exc:
                    print(f"{label}: {name:<26} server: {exc}", flush=True)
            shown = f"{theirs:>13.1f}{ours.mix_tok_s / theirs:>7.2f}" if theirs else f"{'-':>13}{'-':>7}"  # '-': not on it
            print(f"{label}: {name:<26}{ours.mix_tok_s:>13.1f}{shown}{100 * tally.host_share:>7.1f}%"
                  f"{tally.host_ms_per_step:>13.3f}{used:>10}", flush=True)


def predict_blocks(files: dict[str, Path], mix: PromptMix, max_tokens: int, threads: int | None) -> None:
    """DSpark and PCTree predicted from the fixture pair's recorded blocks (issue 25) against the in-process
    engine: replayed and measured drafted/accepted/verify steps, predicted and measured speedup (one
    measurement each), the recording's and one prediction's host time."""
    target, dspark = files["target"], files["dspark"]
    configs = {
        "draft-dspark n_max=8": SpecConfig(target, "draft-dspark", dspark, {"draft_n_max": 8}),
        "draft-dspark n_max=3": SpecConfig(target, "draft-dspark", dspark, {"draft_n_max": 3}),
        "pctree k=3 n=16": SpecConfig(target, "draft-dspark", dspark, {
            "draft_n_max": 8, "dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 16}),
    }
    with PythonEngine(context_size=CONTEXT, threads=threads) as engine:
        for config in configs.values():
            engine.prepare(config, mix, max_tokens=max_tokens)
        baseline = engine.measure(SpecConfig(target), mix, max_tokens=max_tokens)
        started = time.perf_counter()
        plan = BlockPlan("draft-dspark", n_maxes=(3, 8), pctree=True, p_min=False, tree_k=3, tree_n=16)
        model = measure_target(engine, target, baseline, None, mix, arbiter="python", max_tokens=max_tokens, drafts=[],
                               chain_length=3, block_drafts=[(plan, dspark)], note=lambda _: None)
        print(f"blocks: recorded and costed in {time.perf_counter() - started:.1f} s", flush=True)
        for name, config in configs.items():
            started = time.perf_counter()
            predicted = model.prediction(config)
            predict_ms = (time.perf_counter() - started) * 1000
            measured = engine.measure(config, mix, max_tokens=max_tokens)
            replayed = predicted.replay
            ours = f"{replayed.drafted}/{replayed.accepted}/{replayed.verify_steps}"
            theirs = f"{measured.n_drafted}/{measured.n_accepted}/{sum(r.n_verify_steps for r in measured.results)}"
            print(f"blocks: {name:<26} replayed {ours} measured {theirs} predicted {predicted.speedup or 0:.2f}x "
                  f"measured {measured.mix_tok_s / baseline.mix_tok_s:.2f}x prediction {predict_ms:.1f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemma", type=Path, required=True, help="gemma-3-270m-q4_k_m.gguf")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=11, help="prompts of the bundled mix, one per category")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=QWEN3_VOCAB)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-server", action="store_true", help="in-process figures only")
    parser.add_argument("--search-args", default="", help="extra options of the search, e.g. --no-confirm")
    args = parser.parse_args()

    for device in memory.devices():
        print(f"device: {device.name} ({device.description}), {device.total / 2**30:.1f} GiB, "
              f"{device.free / 2**30:.1f} GiB free", flush=True)
    mix = PromptMix("check", tuple(load_prompt_mix().take(per_category=1).prompts[: args.prompts]))
    server = None if args.no_server else ServerEngine(context_size=CONTEXT, threads=args.threads)
    try:
        if server is not None:
            print(f"server: {server.binary} ({server.build_info})", flush=True)
        gemma = args.gemma
        compare("gemma", {
            "none": SpecConfig(gemma),
            "ngram-simple n4 m16": SpecConfig(gemma, "ngram-simple", None, {"ngram_simple_size_n": 4, "ngram_simple_size_m": 16}),
            "draft-simple n_max=4": SpecConfig(gemma, "draft-simple", gemma, {"draft_n_max": 4}),
        }, mix, args.max_tokens, server, args.threads)
        root = Path(tempfile.mkdtemp(prefix="autotune-gpu-check-"))
        files = write_qwen3_pair(root, vocab_size=args.vocab, ctx=CONTEXT)
        target = files["target"]
        compare("fixture", {
            "none": SpecConfig(target),
            "ngram-simple n2 m8": SpecConfig(target, "ngram-simple", None, {"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}),
            "draft-simple n_max=4": SpecConfig(target, "draft-simple", files["draft"], {"draft_n_max": 4}),
            "draft-dspark n_max=8": SpecConfig(target, "draft-dspark", files["dspark"], {"draft_n_max": 8}),
            "pctree k=3 n=16": SpecConfig(target, "draft-dspark", files["dspark"], {
                "draft_n_max": 8, "dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 16}),
        }, mix, args.max_tokens, server, args.threads)
        predict_blocks(files, mix, args.max_tokens, args.threads)
    finally:
        if server is not None:
            server.close()

    models_dir = Path(tempfile.mkdtemp(prefix="autotune-gpu-check-models-"))
    (models_dir / gemma.name).symlink_to(gemma.resolve())
    argv = [sys.executable, "-m", "autotune", "search", "--strategy", "measure", "--model", "gemma3-270m", "--trials", str(args.trials),
            "--max-tokens", str(args.max_tokens), "--per-category", "1", "--models-dir", str(models_dir), "--seed", "0",
            *args.search_args.split()]
    print(f"search: {' '.join(argv[1:])}", flush=True)
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    for line in done.stdout.splitlines():
        print(f"search: {line}", flush=True)
    print(f"search: exit {done.returncode}", flush=True)
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
