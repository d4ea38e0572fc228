"""llama-server's speculative step loop, written once: the in-process engine runs it against the target
model, and the replay (autotune.predict.replay) against a stored trajectory.

Each step drafts at most the room left, has `verify` check `[last] + draft` (decode and sample, or
read the trajectory), lets the drafter mirror the batch (`process`), tells it how much was accepted
(`accept`, only after a draft was verified, as `common_speculative_accept`), and appends what was
emitted until the token budget or an end-of-generation token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from autotune.engines.drafters.base import Drafter
from autotune.measure.measurement import extend_until_stop

#: (last, draft, position of `last`) -> the tokens emitted: the accepted draft prefix and one of the target's
Verify = Callable[[int, list[int], int], list[int]]


@dataclass
class Steps:
    """What one generation's decode phase did, step by step: each verify batch's size (1 + draft) and
    position, and how many tokens it emitted."""

    batch_sizes: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    emitted: list[int] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0  # steps that verified a draft (llama-server's spec_decode_num_drafts)


def speculate(
    drafter: Drafter | None,
    verify: Verify,
    *,
    history: list[int],
    generated: list[int],
    max_tokens: int,
    is_eog: Callable[[int], bool],
) -> Steps:
    """Generate after `generated[-1]` (the first token, sampled from the prompt) until `max_tokens` or an
    end-of-generation token; `history` holds every token in the target's KV cache and grows with it."""
    steps = Steps()
    last = generated[-1]
    while len(generated) < max_tokens and not is_eog(last):
        room = max_tokens - len(generated) - 1
        draft = drafter.draft(history, last, room)[:room] if drafter is not None and room > 0 else []
        position = len(history)
        emitted = verify(last, draft, position)
        if drafter is not None:
            drafter.process([last] + draft, position)
        n_ok = len(emitted) - 1
        if draft:
            drafter.accept(n_ok)
            steps.drafted += len(draft)
            steps.accepted += n_ok
            steps.verify_steps += 1
        steps.batch_sizes.append(len(draft) + 1)
        steps.positions.append(position)
        steps.emitted.append(len(emitted))
        history.append(last)
        history.extend(draft[:n_ok])
        extend_until_stop(generated, emitted, max_tokens, is_eog)
        last = generated[-1]
    return steps
