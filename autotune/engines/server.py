"""Server engine: each measurement launches a real llama-server with exactly the emitted argv.

`server_argv()` (autotune.spec.command) spells every flag that shapes the result; this engine adds
only where to listen and how to be observed: `--host/--port` and, when the binary has them,
`--metrics` and `--no-webui`. Per measurement it starts the
server, waits for `/health`, warms up with one short request, then sends each prompt to
`/completion` with the study's sampling settings (greedy by default) and the prompt cache off.

Figures come from llama-server itself, so they mean what DESIGN.md defines:
- `timings.predicted_ms` is t(last token) - t(first token) (server_slot_stats: t_gen_last -
  t_prompt_last, where t_prompt_last is stamped when the first token is sampled), i.e. decode_ms;
  `timings.prompt_ms` runs from the start of prompt processing to the first token.
- verify steps are the delta of `llamacpp:spec_decode_num_drafts_total` on `/metrics` around each
  prompt (the server folds a request's stats into the counters before it answers). A build
  without `--metrics` reports 0 steps, so mean accepted length is then unknown.
Prompts go as token ids computed like the python engine's (see `_prompt_tokens`).

With `concurrency` N > 1 the server runs `-np N` (continuous batching, the context sized per slot) and
N streams send requests at once, each stream the whole mix rotated to start at its own prompt, so at
any moment the streams generate different prompts and all streams do the same work. The busy period
runs from the first request sent to the last answer in; verify steps are the `/metrics` delta around
it (per request they cannot be told apart).

After each measurement `last_argv`, `last_log_tail` (last 30 log lines) and `last_log_errors` (the
log's error lines) say what ran and what the server complained about: llama-server only logs a
draft it cannot use, so that is where "speculation inactive" finds its reason.
"""

from __future__ import annotations

import math
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from autotune.engines.base import WARMUP_TOKENS, Engine, ProgressCallback
from autotune.engines.live import fits_at_once, free_memory
from autotune.engines.orphans import stop_orphaned_servers
from autotune.engines.prompt_tokens import PromptTokens
from autotune.engines.server_process import ServerProcess
from autotune.engines.server_requests import LiveServers, complete, generate_concurrent, generate_mix
from autotune.errors import EngineError, LlamaCppCrashed, ModelFileError, ServerFailure
from autotune.llamacpp.capabilities import ServerCapabilities, read_capabilities
from autotune.llamacpp.server_binary import resolve_server_binary
from autotune.measure.lossless import TieEvidence
from autotune.measure.measurement import Measurement
from autotune.measure.prompts import Prompt, PromptMix
from autotune.spec.command import server_argv
from autotune.spec.config import SpecConfig
from autotune.spec.params import SpecParam
from autotune.spec.sampling import GREEDY, Sampling
from autotune.spec.types import combinations_of

__all__ = ["ServerEngine", "ServerFailure"]

MARGIN_TOP_N = 64  # top log-probabilities asked for per step when replaying a divergence
NOISE_TOP_K = 32  # leading tokens of each path compared to estimate numeric noise (as the python engine)
#: a live server's context is the mix's longest prompt and output, plus the most a draft runs past them, rounded
#: up to a step
DRAFT_OVERSHOOT = 64
LIVE_CONTEXT_STEP = 256


class ServerEngine(Engine):
    name = "server"
    fresh_each_measure = True

    def __init__(
        self,
        *,
        context_size: int,
        threads: int | None = None,
        binary: str | None = None,
        base_flags: Sequence[str] = (),
        sampling: Sampling = GREEDY,
        startup_timeout_s: float = 120,
        request_timeout_s: float = 600,
        concurrency: int = 1,
    ):
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self.context_size = context_size
        self.threads = threads
        self.binary = resolve_server_binary(binary)
        self.base_flags = list(base_flags)
        self.sampling = sampling
        self.startup_timeout_s = startup_timeout_s
        self.request_timeout_s = request_timeout_s
        self.last_argv: list[str] = []
        self.last_log_tail = ""
        self.last_log_errors: list[str] = []
        self._prompts = PromptTokens(context_size)
        self._margin_server: tuple[Path, ServerProcess] | None = None
        self.startup_notes = tuple(
            f"stopped llama-server (pid {r.server_pid}) left running by autotune pid {r.owner_pid}, which is gone"
            for r in stop_orphaned_servers()
        )

    @property
    def capabilities(self) -> ServerCapabilities:
        return read_capabilities(self.binary)

    @property
    def runnable_spec_types(self) -> frozenset[str]:
        """The binary's spec types and, where `--spec-type` takes a list, their combinations."""
        capabilities = self.capabilities
        if not capabilities.combines_spec_types:
            return capabilities.spec_types
        return capabilities.spec_types | combinations_of(capabilities.spec_types)

    @property
    def build_info(self) -> str:
        return self.capabilities.build

    def supports_param(self, param: SpecParam) -> bool:
        return self.capabilities.has_flag(param.flag)

    def supports_runtime(self, param: SpecParam) -> bool:
        return self.capabilities.has_flag(param.flag)

    def argv(self, config: SpecConfig, context_size: int | None = None) -> list[str]:
        """What is launched for `config`, without `--host/--port` (added at start), at the search space's
        context size or `context_size`."""
        argv = server_argv(
            config,
            context_size=context_size or self.context_size,
            base_flags=self.base_flags,
            binary=self.binary,
            threads=self.threads,
            sampling=self.sampling,
            parallel=self.concurrency,
        )
        return argv + [flag for flag in ("--metrics", "--no-webui") if self.capabilities.has_flag(flag)]

    def prepare(self, config: SpecConfig, mix: PromptMix, *, max_tokens: int) -> None:
        read_capabilities(self.binary)  # runs --version and --help: a binary that cannot run fails here
        for path in {config.target, config.draft} - {None}:
            if not path.is_file():
                raise ModelFileError(f"model file not found: {path}")
        self._prompts.mix_tokens(config.target, mix, max_tokens)

    def measure(
        self,
        config: SpecConfig,
        mix: PromptMix,
        *,
        max_tokens: int,
        on_prompt: ProgressCallback | None = None,
        deadline_s: float | None = None,  # checked between prompts by on_prompt's caller
    ) -> Measurement:
        self._stop_margin_server()  # never two servers (and two copies of the weights) at once
        prompts = self._prompts.mix_tokens(config.target, mix, max_tokens)
        self.last_log_tail, self.last_log_errors = "", []
        self.last_argv = self.argv(config)
        launched = time.perf_counter()
        try:
            with self._launch(self.last_argv) as server:
                startup_ms = (time.perf_counter() - launched) * 1000
                try:
                    if self.concurrency > 1:
                        measurement = generate_concurrent(
                            server, prompts, max_tokens, self.concurrency, self.sampling, on_prompt
                        )
                    else:
                        measurement = generate_mix(server, prompts, max_tokens, self.sampling, on_prompt)
                finally:
                    self.last_log_tail, self.last_log_errors = server.log_tail(), server.error_lines()
        except (ServerFailure, LlamaCppCrashed) as exc:
            self.last_log_tail = exc.log_tail
            raise
        measurement.startup_ms = startup_ms
        measurement.log_errors = tuple(self.last_log_errors)
        return measurement

    def holds_at_once(self, configs: Sequence[SpecConfig], mix: PromptMix, *, max_tokens: int) -> bool:
        """Whether one server per configuration fits the machine's memory at once (autotune.engines.live), each
        with the context `live` gives it; `memory_note` says why not where the free memory is not known."""
        if self.concurrency != 1:
            return False
        free = free_memory()
        self.memory_note = free.note
        return fits_at_once(configs, free, context_size=self.live_context(configs, mix, max_tokens))

    def live_context(self, configs: Sequence[SpecConfig], mix: PromptMix, max_tokens: int) -> int:
        """The context of `live`'s servers: the mix's longest prompt, its output and a draft's overshoot, rounded
        up to LIVE_CONTEXT_STEP, at most the search space's context_size. Each server holds the KV cache of
        its whole context, and a race's servers need only what the mix asks; decode speed is the same
        (llama.cpp attends over the cells in use, not the context), so the printed command keeps the space's."""
        longest = max((len(self._prompts.tokens(c.target, p, max_tokens)) for c in configs for p in mix), default=0)
        needed = longest + max_tokens + DRAFT_OVERSHOOT
        return min(self.context_size, -(-needed // LIVE_CONTEXT_STEP) * LIVE_CONTEXT_STEP)

    @contextmanager
    def live(self, configs: Sequence[SpecConfig], mix: PromptMix, *, max_tokens: int) -> Iterator[LiveServers]:
        """One warmed-up server per configuration, all running until the block ends, each answering one
        prompt at a time: what lets a race measure a prompt's configurations seconds apart."""
        self._stop_margin_server()
        prompts = {
            config.target: [self._prompts.tokens(config.target, p, max_tokens) for p in mix] for config in configs
        }
        context = self.live_context(configs, mix, max_tokens)
        with ExitStack() as stack:
            servers: list[ServerProcess | None] = []
            for config in configs:
                server = stack.enter_context(self._launch(self.argv(config, context)))
                complete(
                    server,
                    prompts[config.target][0],
                    min(WARMUP_TOKENS, max_tokens),
                    what="the warm-up request",
                    sampling=self.sampling,
                )
                servers.append(server)
            yield LiveServers(servers, [prompts[c.target] for c in configs], list(mix), max_tokens, self.sampling)

    def tie_evidence(
        self, target: Path, prompt: Prompt, generated: Sequence[int], token_a: int, token_b: int
    ) -> TieEvidence:
        """Replayed on a baseline server from `/completion` log-probabilities before sampling.

        log p(x) = logit(x) - logsumexp, a constant per step, so log-probability differences are
        logit differences. One token at a time: the prompt, then greedy generation through
        `generated` (checked to follow it). In one batch: prompt + `generated` as one prompt.
        The server returns the top MARGIN_TOP_N tokens of each step. On the one-at-a-time path `a`
        is the top token, and a `b` outside the returned ones counts as the lowest returned one,
        so that margin is a lower bound (far above any tie). The batch path asks again for the
        whole vocabulary when a token is missing, so its margin is exact. The noise is the
        mean-centred RMS difference of the leading log-probabilities both paths returned.
        """
        server = self._margin_server_for(target)
        tokens = self._prompts.tokens(target, prompt, 0)
        generated = [int(t) for t in generated]
        answer = complete(server, tokens, len(generated) + 1, what="the divergence replay", n_probs=MARGIN_TOP_N)
        steps = answer.get("completion_probabilities", [])
        if answer["tokens"][: len(generated)] != generated or len(steps) <= len(generated):
            raise EngineError(
                f"prompt {prompt.id}: llama-server did not reproduce the baseline's tokens, so the divergence "
                "cannot be replayed"
            )
        one_by_one = _logprobs(steps[len(generated)])
        for n_probs in (MARGIN_TOP_N, self._prompts.model(target).n_vocab):
            answer = complete(server, tokens + generated, 1, what="the divergence replay", n_probs=n_probs)
            batched = _logprobs(answer["completion_probabilities"][0])
            if {token_a, token_b} <= batched.keys():
                break
        else:
            raise EngineError(
                f"prompt {prompt.id}: llama-server returned no log-probability for token {token_a} or {token_b}"
            )
        return TieEvidence(
            margin_one_by_one=_margin(one_by_one, token_a, token_b),
            margin_batched=batched[token_a] - batched[token_b],
            noise_rms=_noise_rms(one_by_one, batched),
        )

    def close(self) -> None:
        try:
            self._stop_margin_server()
        finally:
            self._prompts.close()

    def _launch(self, argv: list[str]) -> ServerProcess:
        return ServerProcess(argv, startup_timeout_s=self.startup_timeout_s, request_timeout_s=self.request_timeout_s)

    def _margin_server_for(self, target: Path) -> ServerProcess:
        if self._margin_server is not None and self._margin_server[0] != target:
            self._stop_margin_server()
        if self._margin_server is None:
            server = self._launch(self.argv(SpecConfig(target))).__enter__()
            self._margin_server = (target, server)
        return self._margin_server[1]

    def _stop_margin_server(self) -> None:
        if self._margin_server is not None:
            _, server = self._margin_server
            self._margin_server = None
            server.close()


def _logprobs(step: dict) -> dict[int, float]:
    """token id -> log-probability of one step's returned top tokens."""
    logprobs = {int(entry["id"]): float(entry["logprob"]) for entry in step.get("top_logprobs") or []}
    if not logprobs:
        raise EngineError("llama-server returned no log-probabilities for the divergence replay")
    return logprobs


def _margin(logprobs: dict[int, float], token_a: int, token_b: int) -> float:
    """logprob(a) - logprob(b); a token not returned counts as the lowest returned one."""
    floor = min(logprobs.values())
    return logprobs.get(token_a, floor) - logprobs.get(token_b, floor)


def _noise_rms(one_by_one: dict[int, float], batched: dict[int, float]) -> float:
    """Mean-centred RMS difference between the paths over the leading tokens both returned."""
    candidates = _top(one_by_one, NOISE_TOP_K) | _top(batched, NOISE_TOP_K)
    leading = [t for t in candidates if t in one_by_one and t in batched]
    if len(leading) < 2:
        return 0.0
    differences = [one_by_one[t] - batched[t] for t in leading]
    mean = sum(differences) / len(differences)
    return math.sqrt(sum((d - mean) ** 2 for d in differences) / len(differences))


def _top(logprobs: dict[int, float], k: int) -> set[int]:
    return set(sorted(logprobs, key=logprobs.__getitem__, reverse=True)[:k])
