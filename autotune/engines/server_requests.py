"""What the server engine sends a running llama-server and what its answers mean: one `/completion` per
prompt with the prompt cache off and the token ids returned, the figures read from the server's own
`timings` and the verify steps from its `/metrics` (see autotune.engines.server); a whole mix on one
server (`generate_mix`), N streams at once (`generate_concurrent`), and one prompt at a time on
servers kept running side by side (`LiveServers`).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace

from autotune.engines.base import WARMUP_TOKENS, ProgressCallback
from autotune.engines.server_process import ServerProcess
from autotune.measure.ledger import charge
from autotune.measure.measurement import GenerationResult, Measurement
from autotune.measure.prompts import Prompt
from autotune.spec.sampling import GREEDY, Sampling

_VERIFY_STEPS = re.compile(r"^llamacpp:spec_decode_num_drafts_total\s+(\S+)", re.MULTILINE)


class LiveServers:
    """The running servers of `ServerEngine.live`, by position; one prompt per call."""

    def __init__(
        self,
        servers: list[ServerProcess | None],
        tokens: list[list[list[int]]],
        prompts: list[Prompt],
        max_tokens: int,
        sampling: Sampling,
    ):
        self._servers, self._tokens, self._prompts = servers, tokens, prompts
        self._max_tokens, self._sampling = max_tokens, sampling

    def generate(self, index: int, prompt_index: int) -> GenerationResult:
        """Server `index` generates prompt `prompt_index`; ServerFailure (or LlamaCppCrashed) if it cannot."""
        server = self._servers[index]
        prompt = self._prompts[prompt_index]
        steps_before = _verify_steps(server)
        answer = complete(
            server,
            self._tokens[index][prompt_index],
            self._max_tokens,
            what=f"prompt {prompt.id}",
            sampling=self._sampling,
        )
        return _result(prompt, answer, _verify_steps(server) - steps_before)

    def error_lines(self, index: int) -> tuple[str, ...]:
        """Server `index`'s error lines so far (why it drafts nothing, for one)."""
        return tuple(self._servers[index].error_lines())


def generate_mix(
    server: ServerProcess,
    prompts: list[tuple[Prompt, list[int]]],
    max_tokens: int,
    sampling: Sampling = GREEDY,
    on_prompt: ProgressCallback | None = None,
) -> Measurement:
    """Warm up with one short request, then generate each (prompt, tokens) on a running server and read
    its own timings; the verify steps come from `/metrics` around each request. The busy period is
    the sum of the requests' wall times (the `/metrics` reads between them left out)."""
    complete(server, prompts[0][1], min(WARMUP_TOKENS, max_tokens), what="the warm-up request", sampling=sampling)
    results = []
    busy_s = 0.0
    for index, (prompt, tokens) in enumerate(prompts):
        steps_before = _verify_steps(server)
        sent = time.perf_counter()
        answer = complete(server, tokens, max_tokens, what=f"prompt {prompt.id}", sampling=sampling)
        busy_s += time.perf_counter() - sent
        results.append(_result(prompt, answer, _verify_steps(server) - steps_before))
        if on_prompt is not None:
            on_prompt(index, results[-1])
    return Measurement(results, busy_ms=busy_s * 1000)


def stream_order(n_prompts: int, n_streams: int, stream: int) -> list[int]:
    """The prompt indices stream `stream` generates: the whole mix, rotated to start at its own share."""
    start = (stream * n_prompts) // n_streams
    return [(start + k) % n_prompts for k in range(n_prompts)]


def generate_concurrent(
    server: ServerProcess,
    prompts: list[tuple[Prompt, list[int]]],
    max_tokens: int,
    n_streams: int,
    sampling: Sampling = GREEDY,
    on_prompt: ProgressCallback | None = None,
) -> Measurement:
    """N streams at once on a server with N slots: each sends the whole mix, rotated (`stream_order`),
    one request after the other. Warm-up: one short request per stream, all at once. `on_prompt` sees
    stream 0's results in mix order once the busy period is over (never during it)."""

    def run_streams(orders: list[list[tuple[Prompt, list[int]]]], n_predict: int) -> list[list[tuple]]:
        finished: list[list[tuple]] = [[] for _ in orders]
        errors: list[BaseException] = []
        start = threading.Barrier(len(orders))

        def stream(index: int) -> None:
            try:
                start.wait()
                for prompt, tokens in orders[index]:
                    answer = complete(
                        server, tokens, n_predict, what=f"prompt {prompt.id} (stream {index + 1})", sampling=sampling
                    )
                    finished[index].append((prompt, answer))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                errors.append(exc)
                start.abort()

        threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(len(orders))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            failure = next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
            raise failure
        return finished

    run_streams([[prompts[i % len(prompts)]] for i in range(n_streams)], min(WARMUP_TOKENS, max_tokens))
    orders = [[prompts[i] for i in stream_order(len(prompts), n_streams, s)] for s in range(n_streams)]
    steps_before = _verify_steps(server)
    began = time.perf_counter()
    finished = run_streams(orders, max_tokens)
    busy_ms = (time.perf_counter() - began) * 1000
    steps = max(_verify_steps(server) - steps_before, 0)
    results = [
        replace(_result(prompt, answer, 0), stream=s) for s, done in enumerate(finished) for prompt, answer in done
    ]
    if on_prompt is not None:
        first = {r.prompt_id: r for r in results if r.stream == 0}
        for index, (prompt, _) in enumerate(prompts):
            on_prompt(index, first[prompt.id])
    # stream 0's results first, in mix order: they are what the lossless check compares
    order = {prompt.id: i for i, (prompt, _) in enumerate(prompts)}
    results.sort(key=lambda r: (r.stream, order[r.prompt_id] if r.stream == 0 else 0))
    return Measurement(results, concurrency=n_streams, busy_ms=busy_ms, n_verify_steps_total=steps)


def complete(
    server: ServerProcess,
    tokens: list[int],
    n_predict: int,
    *,
    what: str,
    n_probs: int = 0,
    sampling: Sampling = GREEDY,
) -> dict:
    """One `/completion` request; the divergence replays (n_probs) always run greedily."""
    body = {
        "prompt": tokens,
        "n_predict": n_predict,
        **sampling.request_fields(),
        "cache_prompt": False,
        "return_tokens": True,
        "stream": False,
    }
    if n_probs:
        body.update(n_probs=n_probs, post_sampling_probs=False)
    answer = server.post("/completion", body, what=what)
    if "timings" not in answer or "tokens" not in answer:
        raise server.failure(f"llama-server's answer to {what} has no timings or tokens")
    charge(tokens=len(answer["tokens"]))
    return answer


def _result(prompt: Prompt, answer: dict, verify_steps: int) -> GenerationResult:
    timings = answer["timings"]
    return GenerationResult(
        prompt_id=prompt.id,
        category=prompt.category,
        n_prompt=int(timings["prompt_n"]),
        prompt_ms=float(timings["prompt_ms"]),
        n_generated=int(timings["predicted_n"]),
        decode_ms=float(timings["predicted_ms"]),
        n_drafted=int(timings.get("draft_n", 0)),
        n_accepted=int(timings.get("draft_n_accepted", 0)),
        n_verify_steps=max(verify_steps, 0),
        tokens=[int(t) for t in answer["tokens"]],
    )


def _verify_steps(server: ServerProcess) -> int:
    """The server's verify-step counter (0 without `--metrics`, so the delta is 0 too)."""
    text = server.get_text("/metrics")
    match = _VERIFY_STEPS.search(text or "")
    return int(float(match.group(1))) if match else 0
