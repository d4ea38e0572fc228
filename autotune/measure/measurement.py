"""What an engine reports, with the figures defined once (DESIGN.md, "Definitions").

decode tok/s of one generation = (n_generated - 1) / (time of last token - time of first token),
which is llama-server's `timings.predicted_per_second`; mix tok/s sums tokens and times over the
mix instead of averaging rates.

With N concurrent streams (`--concurrency N`, one llama-server with `-np N`): aggregate tok/s = all
streams' generated tokens / wall time of the busy period (first request sent to last answer in);
per-stream tok/s is each request's decode tok/s, summarized by its mean and 10th percentile (the slow
tail a user of a loaded server sees); time to first token is llama-server's prompt time of a request
(with N streams on N slots no request waits for a slot, so that is all of it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from autotune.measure.ledger import charge


@dataclass
class GenerationResult:
    """One prompt's generation."""

    prompt_id: str
    category: str
    n_prompt: int
    prompt_ms: float
    n_generated: int
    decode_ms: float
    n_drafted: int = 0
    n_accepted: int = 0
    n_verify_steps: int = 0
    tokens: list[int] = field(default_factory=list)
    stream: int = 0  # which of the concurrent streams generated it (0 with one stream)

    @property
    def decode_tokens(self) -> int:
        """Tokens that count towards decode speed (the first comes from prompt processing)."""
        return max(self.n_generated - 1, 0)

    @property
    def decode_tok_s(self) -> float:
        return _rate(self.decode_tokens, self.decode_ms)

    @property
    def prompt_tok_s(self) -> float:
        return _rate(self.n_prompt, self.prompt_ms)

    @property
    def e2e_tok_s(self) -> float:
        return _rate(self.n_generated, self.prompt_ms + self.decode_ms)

    def figures(self) -> dict:
        """JSON-ready per-prompt figures (without the token ids, which are stored apart)."""
        row = {k: v for k, v in asdict(self).items() if k != "tokens"}
        row["decode_tok_s"] = round(self.decode_tok_s, 3)
        row["prompt_tok_s"] = round(self.prompt_tok_s, 3)
        return row


@dataclass
class Measurement:
    """All generations of one configuration over a prompt mix."""

    results: list[GenerationResult]
    startup_ms: float = 0.0  # what the engine spent getting ready (a server's launch until /health)
    concurrency: int = 1  # streams generating at once
    busy_ms: float | None = None  # wall time of the busy period; None: the sum of the requests' own times
    n_verify_steps_total: int | None = None  # with concurrent streams only the total is known
    log_errors: tuple[str, ...] = ()  # a llama-server's error lines while it measured (why it drafted nothing)

    @classmethod
    def pooled(cls, measurements: list["Measurement"]) -> "Measurement":
        """Several measurements of one configuration as one (their busy periods add up)."""
        busy = [m.busy_ms for m in measurements]
        steps = [m.n_verify_steps_total for m in measurements]
        return cls(
            [r for m in measurements for r in m.results],
            sum(m.startup_ms for m in measurements),
            concurrency=measurements[0].concurrency if measurements else 1,
            busy_ms=None if None in busy else sum(busy),
            n_verify_steps_total=None if None in steps else sum(steps),
        )

    @property
    def aggregate_tok_s(self) -> float:
        """All streams' generated tokens / wall time of the busy period (one stream without a measured
        busy period: its requests' own prompt + decode time)."""
        wall_ms = self.busy_ms if self.busy_ms is not None else self.generation_ms
        return _rate(sum(r.n_generated for r in self.results), wall_ms)

    @property
    def per_stream_tok_s(self) -> float:
        """Mean decode tok/s of one request (what one user of the server sees once text streams)."""
        rates = [r.decode_tok_s for r in self.results if r.decode_tokens]
        return float(np.mean(rates)) if rates else 0.0

    @property
    def per_stream_p10_tok_s(self) -> float:
        """10th percentile of the requests' decode tok/s: the slow tail."""
        rates = [r.decode_tok_s for r in self.results if r.decode_tokens]
        return float(np.percentile(rates, 10)) if rates else 0.0

    @property
    def ttft_ms(self) -> float:
        """Mean time to first token of a request."""
        return float(np.mean([r.prompt_ms for r in self.results])) if self.results else 0.0

    @property
    def mix_tok_s(self) -> float:
        return _rate(sum(r.decode_tokens for r in self.results), sum(r.decode_ms for r in self.results))

    @property
    def prompt_tok_s(self) -> float:
        return _rate(sum(r.n_prompt for r in self.results), sum(r.prompt_ms for r in self.results))

    @property
    def e2e_tok_s(self) -> float:
        """Generated tokens per second of whole requests, prompt processing included."""
        return _rate(sum(r.n_generated for r in self.results), self.generation_ms)

    @property
    def n_drafted(self) -> int:
        return sum(r.n_drafted for r in self.results)

    @property
    def n_accepted(self) -> int:
        return sum(r.n_accepted for r in self.results)

    @property
    def acceptance(self) -> float | None:
        """Accepted draft tokens / drafted tokens; None when nothing was drafted."""
        return self.n_accepted / self.n_drafted if self.n_drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """1 + accepted / verify steps: tokens gained per target decode that verified a draft."""
        steps = self.n_verify_steps_total
        if steps is None:
            steps = sum(r.n_verify_steps for r in self.results)
        return 1 + self.n_accepted / steps if steps else None

    @property
    def generation_ms(self) -> float:
        return sum(r.prompt_ms + r.decode_ms for r in self.results)

    def per_category(self) -> dict[str, dict]:
        """Mix figures of each prompt category."""
        groups: dict[str, list[GenerationResult]] = {}
        for result in self.results:
            groups.setdefault(result.category, []).append(result)
        return {name: Measurement(rows).summary() for name, rows in groups.items()}

    def summary(self) -> dict:
        return {
            "mix_tok_s": round(self.mix_tok_s, 3),
            "prompt_tok_s": round(self.prompt_tok_s, 3),
            "e2e_tok_s": round(self.e2e_tok_s, 3),
            "acceptance": None if self.acceptance is None else round(self.acceptance, 4),
            "mean_accepted_length": None if self.mean_accepted_length is None else round(self.mean_accepted_length, 4),
            "n_generated": sum(r.n_generated for r in self.results),
            "n_drafted": self.n_drafted,
            "n_accepted": self.n_accepted,
            "concurrency": self.concurrency,
            "aggregate_tok_s": round(self.aggregate_tok_s, 3),
            "per_stream_tok_s": round(self.per_stream_tok_s, 3),
            "per_stream_p10_tok_s": round(self.per_stream_p10_tok_s, 3),
            "ttft_ms": round(self.ttft_ms, 3),
        }


def extend_until_stop(generated: list[int], new_tokens: list[int], max_tokens: int, is_eog) -> None:
    """Append `new_tokens` to `generated`, stopping at `max_tokens` or an end-of-generation token."""
    for token in new_tokens:
        generated.append(token)
        if len(generated) >= max_tokens or is_eog(token):
            return


def timed_result(
    prompt_id: str,
    category: str,
    n_prompt: int,
    started: float,
    first_token_at: float,
    ended: float,
    generated: list[int],
    n_drafted: int,
    n_accepted: int,
    n_verify_steps: int,
) -> GenerationResult:
    """A GenerationResult from perf_counter stamps: start, first token, last token (its tokens charged to
    the ledger's active phase)."""
    charge(tokens=len(generated))
    return GenerationResult(
        prompt_id=prompt_id,
        category=category,
        n_prompt=n_prompt,
        prompt_ms=(first_token_at - started) * 1000,
        n_generated=len(generated),
        decode_ms=(ended - first_token_at) * 1000,
        n_drafted=n_drafted,
        n_accepted=n_accepted,
        n_verify_steps=n_verify_steps,
        tokens=generated,
    )


def _rate(count: float, ms: float) -> float:
    return count * 1000.0 / ms if ms > 0 else 0.0
