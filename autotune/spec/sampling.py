"""How tokens are sampled during a measurement, applied identically by both engines.

llama-server samples every position it emits, drafted or not, with the request's sampler chain
(common/sampling.cpp, `common_sampler_init`): top-k -> top-p -> min-p -> temperature -> dist, plus
samplers that do nothing at their defaults (penalties, DRY, typical, XTC, top-n-sigma). At
temperature 0 the temperature sampler keeps only the top token, so the chain is greedy — but it
still runs over the whole vocabulary at every position, which is part of what a token costs.

The default here is greedy (temperature 0): speedups are then lossless and checkable. Settings that
differ from llama-server's own defaults go into the printed command, so a client that sends no
sampling fields gets what was measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: llama-server's defaults (common/common.h, common_params_sampling).
SERVER_TEMPERATURE = 0.8
SERVER_TOP_K = 40
SERVER_TOP_P = 0.95
SERVER_MIN_P = 0.05


@dataclass(frozen=True)
class Sampling:
    """The sampling settings of every request a study sends (and the in-process engine's chain)."""

    temperature: float = 0.0
    top_k: int = SERVER_TOP_K
    top_p: float = SERVER_TOP_P
    min_p: float = SERVER_MIN_P
    seed: int = 0  # with temperature > 0: the same seed repeats the same output

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= 0

    def request_fields(self) -> dict:
        """The `/completion` body fields that select these settings."""
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "min_p": self.min_p,
            "seed": self.seed,
        }

    def server_flags(self) -> list[str]:
        """llama-server flags for the settings that differ from its defaults (the seed only matters when
        sampling is random)."""
        flags: list[str] = []
        if self.temperature != SERVER_TEMPERATURE:
            flags += ["--temp", f"{self.temperature:g}"]
        if self.top_k != SERVER_TOP_K:
            flags += ["--top-k", str(self.top_k)]
        if self.top_p != SERVER_TOP_P:
            flags += ["--top-p", f"{self.top_p:g}"]
        if self.min_p != SERVER_MIN_P:
            flags += ["--min-p", f"{self.min_p:g}"]
        if not self.is_greedy:
            flags += ["--seed", str(self.seed)]
        return flags

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "Sampling":
        return cls(**data) if data else cls()

    def describe(self) -> str:
        if self.is_greedy:
            return "greedy"
        return (
            f"temperature {self.temperature:g}, top-k {self.top_k}, top-p {self.top_p:g}, min-p {self.min_p:g}, "
            f"seed {self.seed}"
        )


GREEDY = Sampling()
