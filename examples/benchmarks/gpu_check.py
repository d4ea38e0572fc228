"""The device check's measurements (run by gpu_check.sh, which builds and sets up first).

First the quick part, about a minute (`--quick` stops after it): `autotune doctor` on the builds the check
measures (a GPU with a build that has no GPU backend, a crash or a failed decode ends the check there with
exit 1, before the long part is paid for), then Gemma's baseline on both engines for one prompt.

Then the full check. For Gemma 3 270M (baseline, ngram-simple, draft-simple with itself as the draft) and
for the qwen3 fixture pair at Qwen3's 151,936-token vocabulary (baseline, ngram-simple, draft-simple,
draft-dspark, PCTree), on both engines: decode tok/s in-process and on llama-server and their ratio, the
in-process engine's host share of step time (examples/benchmarks/_steps.py: time outside llama_decode),
and the device memory in use after the pair loaded; DSpark and PCTree predicted from the pair's recorded
blocks against the in-process engine's counts and speedups. Then a 6-trial `autotune search` on Gemma
over the same number of prompts, whose race on llama-server, printed command and figures are passed
through. Last, two `autotune search --plan` (issue 40), seconds each: qwen3-8b's space for the seeds'
workload (44 prompts x 512 tokens) priced at 95 tok/s (the device reaches no hub: its files are not
there to measure), and Gemma's measured for real on one prompt of 512 tokens on this device. Every line
starts with its section so a test can read it.

The defaults (4 prompts of 32 tokens) keep the whole check within 1 min 45 s to 2 min 18 s on this 2-core
box with `--cpu` (the longer when the search ends with a race; issue 30 asks at most 5 minutes, so that a
lent GPU's 15 hold the build, the check and a rerun); the quick part took 10 s. `--prompts 11
--max-tokens 64` measures as the first device check did (594 s in issue 30's run on the CPU).

Run: python examples/benchmarks/gpu_check.py --gemma FILE [--quick] [--max-tokens 32] [--prompts 4] [--trials 6]
"""

from __future__ import annotations

import argparse
import json
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
from autotune.measure.prompts import PromptMix, continuation_mix_path, load_prompt_mix  # noqa: E402
from autotune.predict.block_drafts import BlockPlan  # noqa: E402
from autotune.predict.target import measure_target  # noqa: E402
from autotune.spec.config import SpecConfig  # noqa: E402
from autotune.spec.types import SPEC_TYPE_PARAMS  # noqa: E402
from autotune.testing.dspark_fixtures import QWEN3_VOCAB, write_qwen3_pair  # noqa: E402

CONTEXT = 4096
QUICK_TOKENS = 32  # Gemma's baseline in the quick part: one prompt


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
    return config.spec_type in server.runnable_spec_types and all(
        server.supports_param(known[name]) for name in config.params
    )


def compare(
    label: str,
    configs: dict[str, SpecConfig],
    mix: PromptMix,
    max_tokens: int,
    server: ServerEngine | None,
    threads: int | None,
) -> None:
    print(
        f"{label}: {'config':<26}{'python tok/s':>13}{'server tok/s':>13}{'ratio':>7}{'host %':>8}"
        f"{'host ms/step':>13}{'used MiB':>10}",
        flush=True,
    )
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
            shown = (
                f"{theirs:>13.1f}{ours.mix_tok_s / theirs:>7.2f}" if theirs else f"{'-':>13}{'-':>7}"
            )  # '-': not on it
            print(
                f"{label}: {name:<26}{ours.mix_tok_s:>13.1f}{shown}{100 * tally.host_share:>7.1f}%"
                f"{tally.host_ms_per_step:>13.3f}{used:>10}",
                flush=True,
            )


def predict_blocks(files: dict[str, Path], mix: PromptMix, max_tokens: int, threads: int | None) -> None:
    """DSpark and PCTree predicted from the fixture pair's recorded blocks (issue 25) against the in-process
    engine: replayed and measured drafted/accepted/verify steps, predicted and measured speedup (one
    measurement each), the recording's and one prediction's host time."""
    target, dspark = files["target"], files["dspark"]
    configs = {
        "draft-dspark n_max=8": SpecConfig(target, "draft-dspark", dspark, {"draft_n_max": 8}),
        "draft-dspark n_max=3": SpecConfig(target, "draft-dspark", dspark, {"draft_n_max": 3}),
        "pctree k=3 n=16": SpecConfig(
            target,
            "draft-dspark",
            dspark,
            {"draft_n_max": 8, "dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 16},
        ),
    }
    with PythonEngine(context_size=CONTEXT, threads=threads) as engine:
        for config in configs.values():
            engine.prepare(config, mix, max_tokens=max_tokens)
        baseline = engine.measure(SpecConfig(target), mix, max_tokens=max_tokens)
        started = time.perf_counter()
        plan = BlockPlan("draft-dspark", n_maxes=(3, 8), pctree=True, p_min=False, tree_k=3, tree_n=16)
        model = measure_target(
            engine,
            target,
            baseline,
            mix,
            arbiter="python",
            max_tokens=max_tokens,
            drafts=[],
            chain_length=3,
            block_drafts=[(plan, dspark)],
            note=lambda _: None,
        )
        print(f"blocks: recorded and costed in {time.perf_counter() - started:.1f} s", flush=True)
        for name, config in configs.items():
            started = time.perf_counter()
            predicted = model.prediction(config)
            predict_ms = (time.perf_counter() - started) * 1000
            measured = engine.measure(config, mix, max_tokens=max_tokens)
            replayed = predicted.replay
            ours = f"{replayed.drafted}/{replayed.accepted}/{replayed.verify_steps}"
            theirs = f"{measured.n_drafted}/{measured.n_accepted}/{sum(r.n_verify_steps for r in measured.results)}"
            print(
                f"blocks: {name:<26} replayed {ours} measured {theirs} predicted {predicted.speedup or 0:.2f}x "
                f"measured {measured.mix_tok_s / baseline.mix_tok_s:.2f}x prediction {predict_ms:.1f} ms",
                flush=True,
            )


def doctor(models_dir: Path) -> int:
    """`autotune doctor` on the builds the check measures (the server of AUTOTUNE_LLAMA_SERVER), its lines passed
    through; its exit code."""
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "doctor", "--models-dir", str(models_dir)], stdout=subprocess.PIPE, text=True
    )
    for line in done.stdout.splitlines():
        print(f"doctor: {line}", flush=True)
    return done.returncode


def quick(gemma: Path, models_dir: Path, mix: PromptMix, server: ServerEngine | None, threads: int | None) -> bool:
    """The first minute: doctor, then Gemma's baseline on both engines for a few tokens; False when doctor
    found a problem (the full check would measure a broken build)."""
    if doctor(models_dir) != 0:
        print("quick: doctor found a problem (above): the check stops here", flush=True)
        return False
    compare("quick", {"none": SpecConfig(gemma)}, PromptMix(mix.source, mix.prompts[:1]), QUICK_TOKENS, server, threads)
    return True


def search(models_dir: Path, args: argparse.Namespace) -> int:
    """A short measured `autotune search` on Gemma over the first `--prompts` categories of the continuation mix
    (the mix a study of this base model measures), its output passed through; its exit code."""
    prompts = models_dir / "prompts.jsonl"
    chosen = load_prompt_mix(continuation_mix_path()).take(per_category=1).prompts[: args.prompts]
    prompts.write_text(
        "".join(json.dumps({"id": p.id, "category": p.category, "prompt": p.text}) + "\n" for p in chosen)
    )
    argv = [
        sys.executable,
        "-m",
        "autotune",
        "search",
        "--strategy",
        "measure",
        "--model",
        "gemma3-270m",
        "--trials",
        str(args.trials),
        "--max-tokens",
        str(args.max_tokens),
        "--prompts",
        str(prompts),
        "--per-category",
        "1",
        "--models-dir",
        str(models_dir),
        "--seed",
        "0",
        *args.search_args.split(),
    ]
    print(f"search: {' '.join(argv[1:])}", flush=True)
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    for line in done.stdout.splitlines():
        print(f"search: {line}", flush=True)
    print(f"search: exit {done.returncode}", flush=True)
    return done.returncode


def plan(models_dir: Path) -> int:
    """The two plans (module docstring), their output passed through; the first failing exit code, else 0."""
    empty = models_dir.parent / "no-models"
    empty.mkdir(exist_ok=True)
    runs = [
        ["--model", "qwen3-8b", "--offline", "--plan-tok-s", "95", "--models-dir", str(empty)],
        ["--model", "gemma3-270m", "--models-dir", str(models_dir)],
    ]
    codes = []
    for extra in runs:
        argv = [
            sys.executable,
            "-m",
            "autotune",
            "search",
            "--max-tokens",
            "512",
            "--per-category",
            "4",
            "--plan",
            "--storage",
            f"sqlite:///{models_dir.parent / 'plan-never-written.db'}",
            *extra,
        ]
        print(f"plan: {' '.join(argv[1:])}", flush=True)
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        for line in done.stdout.splitlines():
            print(f"plan: {line}", flush=True)
        print(f"plan: exit {done.returncode}", flush=True)
        codes.append(done.returncode)
    return next((code for code in codes if code), 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemma", type=Path, required=True, help="gemma-3-270m-q4_k_m.gguf")
    parser.add_argument("--quick", action="store_true", help="the quick part only: doctor and Gemma's baseline")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=4, help="prompts of the bundled mix, one per category")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=QWEN3_VOCAB)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-server", action="store_true", help="in-process figures only")
    parser.add_argument("--search-args", default="", help="extra options of the search, e.g. --no-confirm")
    args = parser.parse_args()

    for device in memory.devices():
        print(
            f"device: {device.name} ({device.description}), {device.total / 2**30:.1f} GiB, "
            f"{device.free / 2**30:.1f} GiB free",
            flush=True,
        )
    mix = PromptMix("check", tuple(load_prompt_mix().take(per_category=1).prompts[: args.prompts]))
    with tempfile.TemporaryDirectory(prefix="autotune-gpu-check-") as scratch:  # 174 MB at Qwen3's vocabulary
        code = check(args, mix, Path(scratch))
    sys.exit(code)


def check(args: argparse.Namespace, mix: PromptMix, scratch: Path) -> int:
    """The quick part, then (unless `--quick`) the full one, with its files under `scratch`; the exit code."""
    gemma = args.gemma
    models_dir = scratch / "models"
    models_dir.mkdir()
    (models_dir / gemma.name).symlink_to(gemma.resolve())
    server = None if args.no_server else ServerEngine(context_size=CONTEXT, threads=args.threads)
    try:
        if server is not None:
            print(f"server: {server.binary} ({server.build_info})", flush=True)
        if not quick(gemma, models_dir, mix, server, args.threads):
            return 1
        if args.quick:
            return 0
        compare(
            "gemma",
            {
                "none": SpecConfig(gemma),
                "ngram-simple n4 m16": SpecConfig(
                    gemma, "ngram-simple", None, {"ngram_simple_size_n": 4, "ngram_simple_size_m": 16}
                ),
                "draft-simple n_max=4": SpecConfig(gemma, "draft-simple", gemma, {"draft_n_max": 4}),
            },
            mix,
            args.max_tokens,
            server,
            args.threads,
        )
        (scratch / "fixture").mkdir()
        files = write_qwen3_pair(scratch / "fixture", vocab_size=args.vocab, ctx=CONTEXT)
        target = files["target"]
        compare(
            "fixture",
            {
                "none": SpecConfig(target),
                "ngram-simple n2 m8": SpecConfig(
                    target, "ngram-simple", None, {"ngram_simple_size_n": 2, "ngram_simple_size_m": 8}
                ),
                "draft-simple n_max=4": SpecConfig(target, "draft-simple", files["draft"], {"draft_n_max": 4}),
                "draft-dspark n_max=8": SpecConfig(target, "draft-dspark", files["dspark"], {"draft_n_max": 8}),
                "pctree k=3 n=16": SpecConfig(
                    target,
                    "draft-dspark",
                    files["dspark"],
                    {"draft_n_max": 8, "dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 16},
                ),
            },
            mix,
            args.max_tokens,
            server,
            args.threads,
        )
        predict_blocks(files, mix, args.max_tokens, args.threads)
    finally:
        if server is not None:
            server.close()
    return search(models_dir, args) or plan(models_dir)


if __name__ == "__main__":
    main()
