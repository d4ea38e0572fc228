"""The baseline's greedy output on every prompt of a mix, prompt tokens included: what every lossless
configuration generates too, so the replay drafts against it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from autotune.measure.measurement import Measurement


@dataclass(frozen=True)
class Trajectory:
    """One prompt's baseline generation."""

    prompt_id: str
    prompt_tokens: tuple[int, ...]
    tokens: tuple[int, ...]  # generated, the first included, an end-of-generation token left out
    stopped: bool  # ended by an end-of-generation token before the token budget

    def as_dict(self) -> dict:
        return {
            "prompt_id": self.prompt_id,
            "prompt_tokens": list(self.prompt_tokens),
            "tokens": list(self.tokens),
            "stopped": self.stopped,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Trajectory":
        return cls(data["prompt_id"], tuple(data["prompt_tokens"]), tuple(data["tokens"]), bool(data["stopped"]))


@dataclass(frozen=True)
class Trajectories:
    """A target's baseline over a mix, as measured by `engine` (llama-server's own output where one ran)."""

    target: str
    engine: str
    max_tokens: int
    prompts: tuple[Trajectory, ...]
    #: per prompt, the first position where the in-process engine's greedy output differs (None: same)
    divergence: tuple[int | None, ...] = ()

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "engine": self.engine,
            "max_tokens": self.max_tokens,
            "prompts": [p.as_dict() for p in self.prompts],
            "divergence": list(self.divergence),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Trajectories":
        return cls(
            data["target"],
            data["engine"],
            int(data["max_tokens"]),
            tuple(Trajectory.from_dict(p) for p in data["prompts"]),
            tuple(data.get("divergence", ())),
        )

    @classmethod
    def from_measurement(
        cls,
        target: str,
        engine: str,
        measurement: Measurement,
        prompt_tokens: Sequence[Sequence[int]],
        max_tokens: int,
        is_eog: Callable[[int], bool],
    ) -> "Trajectories":
        prompts = []
        for result, tokens in zip(measurement.results, prompt_tokens):
            generated = list(result.tokens)
            stopped = bool(generated) and is_eog(generated[-1])
            if stopped:
                generated.pop()
            stopped = stopped or len(generated) < max_tokens
            prompts.append(Trajectory(result.prompt_id, tuple(tokens), tuple(generated), stopped))
        return cls(target, engine, max_tokens, tuple(prompts))
