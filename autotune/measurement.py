"""What an engine reports, with the figures defined once (DESIGN.md, "Definitions").

decode tok/s of one generation = (n_generated - 1) / (time of last token - time of first token),
which is llama-server's `timings.predicted_per_second`; mix tok/s sums tokens and times over the
mix instead of averaging rates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


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
        }


def extend_until_stop(generated: list[int], new_tokens: list[int], max_tokens: int, is_eog) -> None:
    """Append `new_tokens` to `generated`, stopping at `max_tokens` or an end-of-generation token."""
    for token in new_tokens:
        generated.append(token)
        if len(generated) >= max_tokens or is_eog(token):
            return


def timed_result(
    prompt_id: str, category: str, n_prompt: int, started: float, first_token_at: float, ended: float,
    generated: list[int], n_drafted: int, n_accepted: int, n_verify_steps: int,
) -> GenerationResult:
    """A GenerationResult from perf_counter stamps: start, first token, last token."""
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
