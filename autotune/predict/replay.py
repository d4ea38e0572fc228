"""Replay a configuration over the baseline's trajectories with the engine's own drafters and step loop
(autotune.engines.speculation): what it would draft, what the target would accept, and every verify
batch, without running the target.

The replay is a measurement as the engines take one: one drafter for the whole mix, the warm-up
request first (the first tokens of the first prompt), each prompt's batch mirrored into the drafter
(`process`, then `begin`), drafts cut to the tokens left. Verification reads the trajectory: a draft
is accepted while it equals what the baseline generated, then the baseline's next token follows.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.engines.base import WARMUP_TOKENS
from autotune.engines.drafters.base import Drafter
from autotune.engines.speculation import Steps, speculate
from autotune.predict.trajectory import Trajectories, Trajectory

#: stands for the end-of-generation token a trajectory that stopped leaves out (no draft equals it)
END = -1


@dataclass(frozen=True)
class PromptReplay:
    """One prompt's replayed generation."""

    prompt_id: str
    n_generated: int
    steps: Steps
    draft_decodes: int = 0  # a draft model's single-token decodes (draft-simple), a block draft's blocks
    #: the prompt's decode tokens per token its steps emitted: 1 for a full replay, more where the steps are
    #: a sample of the trajectory's positions (autotune.predict.block_sample); every count and cost scales by it
    scale: float = 1.0

    @property
    def decode_tokens(self) -> int:
        return max(self.n_generated - 1, 0)


@dataclass(frozen=True)
class Replay:
    """A configuration's replay over a mix."""

    prompts: tuple[PromptReplay, ...]
    #: relative standard error of the tokens per step where the steps are a sample (None: a full replay)
    sampling_error: float | None = None

    @property
    def drafted(self) -> int:
        return round(sum(p.steps.drafted * p.scale for p in self.prompts))

    @property
    def accepted(self) -> int:
        return round(sum(p.steps.accepted * p.scale for p in self.prompts))

    @property
    def verify_steps(self) -> int:
        return round(sum(p.steps.verify_steps * p.scale for p in self.prompts))

    @property
    def tokens_per_step(self) -> float:
        """Decode tokens per target step (a verify or a plain decode)."""
        steps = sum(len(p.steps.batch_sizes) * p.scale for p in self.prompts)
        return sum(p.decode_tokens for p in self.prompts) / steps if steps else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def counts(self) -> dict:
        """JSON-ready counts: drafted, accepted, verify steps, and how many steps had each batch size."""
        sizes: dict[int, float] = {}
        for prompt in self.prompts:
            for size in prompt.steps.batch_sizes:
                sizes[size] = sizes.get(size, 0) + prompt.scale
        found = {
            "drafted": self.drafted,
            "accepted": self.accepted,
            "verify_steps": self.verify_steps,
            "acceptance": None if self.acceptance is None else round(self.acceptance, 4),
            "batch_sizes": {str(k): round(v) for k, v in sorted(sizes.items())},
        }
        if self.sampling_error is not None:
            found.update(tokens_per_step=round(self.tokens_per_step, 4), sampling_error=round(self.sampling_error, 5))
        return found


def replay(drafter: Drafter | None, trajectories: Trajectories, *, warmup_tokens: int = WARMUP_TOKENS) -> Replay:
    """Replay `drafter` (fresh, for one configuration; None: the baseline) over every trajectory."""
    first = trajectories.prompts[0]
    replay_prompt(drafter, first, min(warmup_tokens, trajectories.max_tokens))
    return Replay(tuple(replay_prompt(drafter, t, trajectories.max_tokens) for t in trajectories.prompts))


def replay_prompt(drafter: Drafter | None, trajectory: Trajectory, max_tokens: int) -> PromptReplay:
    """One request: the drafter sees the prompt, then drafts against the trajectory up to `max_tokens`."""
    script = script_of(trajectory, max_tokens)
    prompt = list(trajectory.prompt_tokens)
    if drafter is not None:
        drafter.process(prompt, 0)
        drafter.begin(prompt)

    def verify(last: int, draft: list[int], position: int) -> list[int]:
        k = position - len(prompt) + 1  # the index in `script` of the token after `last`
        n_ok = 0
        while n_ok < len(draft) and k + n_ok < len(script) and draft[n_ok] == script[k + n_ok]:
            n_ok += 1
        return script[k : k + n_ok + 1]

    decodes_before = drafter.draft_decodes if drafter is not None else 0
    generated = script[:1]
    steps = speculate(
        drafter,
        verify,
        history=list(prompt),
        generated=generated,
        max_tokens=max_tokens,
        is_eog=lambda token: token == END,
    )
    decodes = drafter.draft_decodes - decodes_before if drafter is not None else 0
    return PromptReplay(trajectory.prompt_id, len(generated), steps, decodes)


def script_of(trajectory: Trajectory, max_tokens: int) -> list[int]:
    """What the target generates in a replay of `trajectory`: its tokens up to `max_tokens`, and END where
    it stopped before."""
    script = list(trajectory.tokens[:max_tokens])
    if trajectory.stopped and len(trajectory.tokens) < max_tokens:
        script.append(END)
    return script
