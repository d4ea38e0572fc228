"""Is a speculative configuration lossless? Compare its greedy output with the baseline's.

Verifying k tokens in one batch does not give bit-identical logits to k one-token decodes, so at a
near-tie the argmax can flip and the texts part ways. At the first difference we therefore ask the
target for its margin logit(baseline token) - logit(speculative token), replayed once one token at
a time as the baseline ran and once as one batch as a verifier runs. Quantized CPU kernels move
logits by up to ~1.3 between the two paths (measured on Gemma 3 270M Q4_K_M), so a flip is a numeric
tie when either margin is below `TIE_EPSILON`; a margin above it on both paths is a real bug
(DESIGN.md, "lossless").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Sequence

TIE_EPSILON = 0.1

#: (prompt index, tokens generated before the difference, token a, token b)
#:     -> (logit a - logit b one token at a time, logit a - logit b in one batch)
LogitMarginsFn = Callable[[int, Sequence[int], int, int], tuple[float, float]]


@dataclass(frozen=True)
class OutputVerdict:
    """How one prompt's speculative output compares with the baseline's."""

    prompt_id: str
    verdict: str  # "same", "tie" (parted at a numeric tie) or "differs"
    diverged_at: int | None = None
    margins: tuple[float, float] | None = None

    @property
    def lossless(self) -> bool:
        return self.verdict != "differs"

    def as_dict(self) -> dict:
        return asdict(self)


def first_difference(expected: Sequence[int], actual: Sequence[int]) -> int | None:
    """Index of the first differing token (a length difference counts); None when equal."""
    for index, (a, b) in enumerate(zip(expected, actual)):
        if a != b:
            return index
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


def compare_outputs(
    prompt_ids: Sequence[str],
    baseline: Sequence[Sequence[int]],
    candidate: Sequence[Sequence[int]],
    logit_margins: LogitMarginsFn,
    epsilon: float = TIE_EPSILON,
) -> list[OutputVerdict]:
    """One verdict per prompt; `logit_margins` is only asked where the outputs part ways."""
    verdicts = []
    for index, (prompt_id, expected, actual) in enumerate(zip(prompt_ids, baseline, candidate)):
        at = first_difference(expected, actual)
        if at is None:
            verdicts.append(OutputVerdict(prompt_id, "same"))
            continue
        if at >= min(len(expected), len(actual)):  # one stopped early: not a tie between two tokens
            verdicts.append(OutputVerdict(prompt_id, "differs", at))
            continue
        margins = logit_margins(index, expected[:at], expected[at], actual[at])
        verdict = "tie" if min(margins) < epsilon else "differs"
        verdicts.append(OutputVerdict(prompt_id, verdict, at, (round(margins[0], 4), round(margins[1], 4))))
    return verdicts
