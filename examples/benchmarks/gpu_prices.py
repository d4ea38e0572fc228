"""This machine's prices (issue 49): what a plan's units of work cost here, measured with random weights at
Qwen3-8B's real shapes and written where `autotune search --plan` reads them (autotune.search.prices).

The models (autotune.testing.tiny_gguf, random weights, the `test` tokenizer at the real vocabulary):

* a qwen3 target 4096 wide, 151,936 tokens, 32 heads and 8 KV heads of 128, feed-forward 12288, but 2
  layers (`--layers`) so that its file stays small: written in F32, quantized to Q4_K_M (`--target-quant`:
  the qwen3-8b space's first target) by llama.cpp's own quantizer;
* a DSpark draft for it: 5 layers at the same width in F16 (ggml-org's Qwen3-8B drafts: five layers,
  BF16 and Q8_0), block size 16, reading 5 of the target's layers (z-lab's Qwen3-8B DFlash reads five; a
  2-layer target gives them twice over), a Markov head of rank 8;
* a draft-simple model at Qwen3-0.6B's shape: 1024 wide (8 heads of 128: the writer ties the width to
  heads x head size, where Qwen3-0.6B has 16 heads of 128), 28 layers, feed-forward 3072, Q8_0.

Measured in-process with llama-cpp-python, each a median of repeats after a warm-up
(autotune.predict.cost.timed_curve): the target's decode step of one token at DEPTH positions and its
prefill of PREFILL_TOKENS in one batch, each over its layers; the draft's block decode of 1..16 rows
with every row's logits read out and argmaxed (as a DSpark recording decodes them), the same block with no
row read out (the difference: the logits' head, copy to the host and read-out, `logits_copy_ms`), and an
injection of 1..16 rows of the target's layer inputs; the draft-simple model's decode step of one token.
Then one llama-server start of the F32 target (6.5 GB at these shapes, the 8B's Q4_K_M being 5.0 GB),
launch to ready. Every figure is printed (`prices: ...`), then the file written.

gpu_check.sh runs it as a step of the device check, bounded to 5 minutes (`timeout 300`); with `--cpu`
at small shapes: here `--n-embd 256 --vocab 4096 --threads 1` took 20 s (two threads on these 2 shared
cores, 3.6 minutes: every ggml op's barrier waits for a thread the other sessions hold).

Run: python examples/benchmarks/gpu_prices.py [--layers 2] [--n-embd 4096] [--vocab 151936] [--out FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import llama_cpp
import numpy as np

from autotune.engines.dflash import bindings as dfc
from autotune.engines.dflash.contexts import DFlashPair
from autotune.engines.server import ServerEngine
from autotune.engines.server_process import ServerProcess
from autotune.errors import EngineError
from autotune.hardware import hardware_key
from autotune.llamacpp.bindings import Context, LoadedModel, llama_build
from autotune.llamacpp.runtime import Runtime
from autotune.predict.blocks import layer_inputs
from autotune.predict.cost import timed_curve
from autotune.search.plan import Prices, load_prices, prices_path, write_prices
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf

QWEN3_8B = {"n_embd": 4096, "vocab": 151_936, "n_head": 32, "n_head_kv": 8}
CONTEXT = 2048  # in-process contexts: the prefill, the depth and a block
SERVER_CONTEXT = 8192  # the qwen3-8b space's context_size
DEPTH = 256  # positions before each timed decode
PREFILL_TOKENS = 512  # a prompt's batch (llama-server's -ub)
REPEATS = 9


def log(text: str) -> None:
    print(f"prices: {text}", flush=True)


def quantize(source: Path, quant: str, threads: int | None) -> Path:
    """`source` (F32) quantized to `quant` by llama.cpp (Q4_K_M, Q8_0, ...); `source` itself for F32."""
    if quant.upper() == "F32":
        return source
    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = threads or os.cpu_count() or 1
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quant.upper()}")
    out = source.with_name(source.name.replace("F32", quant.upper()))
    if llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise EngineError(f"{source.name}: llama.cpp could not quantize it to {quant}")
    return out


def write_models(scratch: Path, args: argparse.Namespace) -> dict[str, Path]:
    """The F32 target, the measured (quantized) target, the DSpark draft and the draft-simple model."""
    started = time.perf_counter()
    target_f32 = tiny_gguf.write_qwen3_target(
        scratch / "target-F32.gguf",
        vocab_size=args.vocab,
        n_embd=args.n_embd,
        n_layers=args.layers,
        n_head=args.n_head,
        n_head_kv=args.n_head_kv,
        n_ff=args.n_ff,
        ctx=SERVER_CONTEXT,
    )
    target = quantize(target_f32, args.target_quant, args.threads)
    features = [i * args.layers // args.draft_features for i in range(args.draft_features)]
    dspark = tiny_gguf.write_dspark_draft(
        scratch / "dspark-F16.gguf",
        target_path=target_f32,
        n_layers=args.draft_layers,
        n_ff=args.n_ff,
        target_layers=features,
        block_size=args.block_size,
        f16=True,
    )
    heads = max(1, args.simple_n_embd // 128)
    simple = quantize(
        tiny_gguf.write_qwen3_target(
            scratch / "simple-F32.gguf",
            vocab_size=args.vocab,
            n_embd=args.simple_n_embd,
            n_layers=args.simple_layers,
            n_head=heads,
            n_head_kv=heads,
            n_ff=3 * args.simple_n_embd,
            ctx=SERVER_CONTEXT,
        ),
        args.simple_quant,
        args.threads,
    )
    files = {"target F32": target_f32, "target": target, "dspark": dspark, "draft-simple": simple}
    log(
        f"wrote {', '.join(f'{k} {v.stat().st_size / 1e9:.2f} GB' for k, v in files.items())} "
        f"in {time.perf_counter() - started:.1f} s"
    )
    return files


def one_step_ms(context: Context, fill: list[int], depth: int, *, repeats: int) -> float:
    """Median ms of a decode step of one token after `depth` positions."""

    def prepare(d: int) -> None:
        context.clear()
        context.decode(fill[:d], 0)

    def step(_size: int, d: int) -> float:
        started = time.perf_counter()
        context.decode([fill[d]], d)
        elapsed = (time.perf_counter() - started) * 1000
        context.truncate(d)
        return elapsed

    return timed_curve((1,), (depth,), prepare, step, repeats=repeats).ms[0][0]


def prefill_ms(context: Context, fill: list[int]) -> float:
    """Median ms of a prompt of PREFILL_TOKENS in one batch, its last row's logits out."""

    def step(_size: int, _depth: int) -> float:
        started = time.perf_counter()
        context.decode(fill[:PREFILL_TOKENS], 0)
        elapsed = (time.perf_counter() - started) * 1000
        context.clear()
        return elapsed

    return timed_curve((PREFILL_TOKENS,), (0,), lambda _d: context.clear(), step, repeats=5).ms[0][0]


class BareBlock:
    """The draft's decode of a noise block with no row's logits read out (DraftContext.block reads every row's)."""

    def __init__(self, pair: DFlashPair):
        self.ptr = pair.draft.ptr
        self.batch = dfc.llama_batch_ext_init(self.ptr)
        self.pos = (llama_cpp.llama_pos * 4)()

    def __call__(self, tokens: list[int], pos0: int) -> None:
        dfc.llama_batch_ext_clear(self.batch)
        for i, token in enumerate(tokens):
            idx = dfc.llama_batch_ext_add_token(self.batch, 0, token)
            self.pos[0] = pos0 + i
            dfc.llama_batch_ext_set_pos(self.batch, idx, self.pos)
        status = dfc.llama_process(self.ptr, dfc.LLAMA_PROCESS_TYPE_DECODE, self.batch)
        if status != 0:
            raise EngineError(f"a block with no logits read out failed with status {status}")
        llama_cpp.llama_synchronize(self.ptr)

    def free(self) -> None:
        dfc.llama_batch_ext_free(self.batch)


def block_prices(pair: DFlashPair, fill: list[int], rows: int) -> dict[str, tuple[float, ...]]:
    """block_ms, logits_copy_ms and inject_ms for 1..`rows` rows, after DEPTH injected positions."""
    draft, sizes = pair.draft, tuple(range(1, rows + 1))
    features = layer_inputs(pair, fill[: DEPTH + rows])
    bare = BareBlock(pair)

    def prepare(depth: int) -> None:
        draft.clear()
        draft.inject(features[:depth], 0)

    def timed(run):
        def step(size: int, depth: int) -> float:
            started = time.perf_counter()
            run(size, depth)
            elapsed = (time.perf_counter() - started) * 1000
            draft.truncate(depth)
            return elapsed

        return timed_curve(sizes, (DEPTH,), prepare, step, repeats=REPEATS).ms[0]

    def noise(size: int, depth: int) -> list[int]:
        return [fill[depth]] + [pair.mask_token] * (size - 1)

    try:
        read = timed(lambda size, depth: draft.block(noise(size, depth), depth, confidence=False)[0].argmax(axis=1))
        unread = timed(lambda size, depth: bare(noise(size, depth), depth))
        injected = timed(lambda size, depth: draft.inject(features[depth : depth + size], depth))
    finally:
        bare.free()
    return {
        "block_ms": tuple(read),
        "logits_copy_ms": tuple(max(0.0, a - b) for a, b in zip(read, unread)),
        "inject_ms": tuple(injected),
    }


def server_start(path: Path, threads: int | None) -> tuple[float, str]:
    """Seconds of one llama-server start of `path`, launch to ready, and the server's build."""
    engine = ServerEngine(context_size=SERVER_CONTEXT, threads=threads)
    try:
        argv, build = engine.argv(SpecConfig(path)), engine.build_info
        started = time.perf_counter()
        with ServerProcess(argv, startup_timeout_s=240, request_timeout_s=60):
            start_s = time.perf_counter() - started
    finally:
        engine.close()
    return start_s, build


def measure(files: dict[str, Path], args: argparse.Namespace) -> Prices:
    rng = np.random.default_rng(0)
    fill = rng.integers(len(tiny_gguf.SPECIAL_TOKENS), args.vocab, size=CONTEXT).tolist()
    runtime = Runtime(threads=args.threads)
    target = LoadedModel(files["target"])
    try:
        context = Context(target, n_ctx=CONTEXT, runtime=runtime)
        try:
            step_ms = one_step_ms(context, fill, DEPTH, repeats=2 * REPEATS)
            log(
                f"target step {step_ms:.3f} ms: {step_ms / args.layers:.4f} ms a layer ({args.layers} layers, "
                f"{args.target_quant}, {args.n_embd} wide, {args.vocab:,} tokens)"
            )
            prefill = prefill_ms(context, fill)
            log(
                f"prefill {prefill:.2f} ms for {PREFILL_TOKENS} tokens: "
                f"{prefill / PREFILL_TOKENS / args.layers:.5f} ms a token a layer"
            )
        finally:
            context.free()
        draft = LoadedModel(files["dspark"])
        try:
            pair = DFlashPair(target, draft, n_ctx=CONTEXT, runtime=runtime)
            try:
                blocks = block_prices(pair, fill, pair.n_draft_max("draft-dspark"))
            finally:
                pair.free()
        finally:
            draft.free()
    finally:
        target.free()
    log(
        f"DSpark draft, {args.draft_layers} layers F16, after {DEPTH} positions: rows, block ms (every row's "
        "logits read out), of which the logits, injection ms"
    )
    for row, (block, logits, inject) in enumerate(zip(*blocks.values()), start=1):
        log(f"  {row:>2} {block:9.3f} {logits:9.3f} {inject:9.3f}")
    simple = LoadedModel(files["draft-simple"])
    try:
        context = Context(simple, n_ctx=CONTEXT, runtime=runtime)
        try:
            simple_ms = one_step_ms(context, fill, DEPTH, repeats=2 * REPEATS)
        finally:
            context.free()
    finally:
        simple.free()
    simple_shape = f"{args.simple_n_embd} wide, {args.simple_layers} layers, {args.simple_quant}"
    log(f"draft-simple token {simple_ms:.3f} ms ({simple_shape})")
    start_s, server_build = server_start(files["target F32"], args.threads)
    log(f"llama-server start {start_s:.2f} s ({files['target F32'].stat().st_size / 1e9:.2f} GB file; {server_build})")
    return Prices(
        hardware=hardware_key(),
        measured_on=datetime.date.today().isoformat(),
        llama_build=llama_build(),
        server_build=server_build,
        n_embd=args.n_embd,
        n_vocab=args.vocab,
        target_layers=args.layers,
        target_quant=args.target_quant,
        target_step_ms_per_layer=step_ms / args.layers,
        prefill_ms_per_token_layer=prefill / PREFILL_TOKENS / args.layers,
        draft_layers=args.draft_layers,
        draft_quant="F16",
        **blocks,
        draft_simple_shape=simple_shape,
        draft_simple_token_ms=simple_ms,
        server_start_s=start_s,
        server_start_file_bytes=files["target F32"].stat().st_size,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--layers", type=int, default=2, help="the target's layers (the per-layer figures divide by it)"
    )
    parser.add_argument("--n-embd", type=int, default=QWEN3_8B["n_embd"])
    parser.add_argument("--vocab", type=int, default=QWEN3_8B["vocab"])
    parser.add_argument("--n-head", type=int, default=QWEN3_8B["n_head"])
    parser.add_argument("--n-head-kv", type=int, default=QWEN3_8B["n_head_kv"])
    parser.add_argument(
        "--n-ff", type=int, default=None, help="feed-forward width (default: 3 x --n-embd, as Qwen3-8B)"
    )
    parser.add_argument("--target-quant", default="Q4_K_M", help="the target's weights: a llama.cpp ftype, or F32")
    parser.add_argument("--draft-layers", type=int, default=5)
    parser.add_argument("--draft-features", type=int, default=5, help="target layers the DSpark draft reads")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--simple-n-embd", type=int, default=None, help="draft-simple width (default: --n-embd / 4)")
    parser.add_argument("--simple-layers", type=int, default=28)
    parser.add_argument("--simple-quant", default="Q8_0")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--out", type=Path, default=None, help="the prices file (default: this machine's, under the autotune home)"
    )
    args = parser.parse_args()
    args.n_ff = args.n_ff or 3 * args.n_embd
    args.simple_n_embd = args.simple_n_embd or args.n_embd // 4
    started = time.perf_counter()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # `timeout`'s: the scratch models are removed
    log(f"machine: {hardware_key()}; {llama_build()}")
    with tempfile.TemporaryDirectory(prefix="autotune-prices-") as scratch:
        prices = measure(write_models(Path(scratch), args), args)
    path = write_prices(prices, args.out or prices_path(prices.hardware))
    assert load_prices(path) == prices
    log(f"wrote {path} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
