"""Is a speculative configuration lossless? Compare its greedy output with the baseline's.

Verifying k tokens in one batch does not give bit-identical logits to k one-token decodes, so at a
near-tie the argmax can flip and the texts part ways. At the first difference we therefore ask the
target for its margin logit(baseline token) - logit(speculative token), replayed once one token at
a time as the baseline ran and once as one batch as a verifier runs, and for how far the two paths
disagree on the leading logits (their RMS difference: the numeric noise of this engine, model and
hardware). A flip is a numeric tie when a margin lies below `TIE_EPSILON` or within `NOISE_BAND`
times that noise; a clear preference on both paths is a real bug (DESIGN.md, "lossless").
Quantized CPU kernels make the noise large: on Gemma 3 270M Q4_K_M here it measured 0.11-0.25,
and flips happened at margins up to 0.18.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Sequence

TIE_EPSILON = 0.1
NOISE_BAND = 3.0


@dataclass(frozen=True)
class TieEvidence:
    """The target's view of a divergence: logit(a) - logit(b) on both decode paths, and their noise."""

    margin_one_by_one: float
    margin_batched: float
    noise_rms: float

    def is_tie(self, epsilon: float = TIE_EPSILON) -> bool:
        threshold = max(epsilon, NOISE_BAND * self.noise_rms)
        return min(self.margin_one_by_one, self.margin_batched) < threshold


#: (prompt index, tokens generated before the difference, token a, token b) -> TieEvidence
TieEvidenceFn = Callable[[int, Sequence[int], int, int], TieEvidence]


@dataclass(frozen=True)
class OutputVerdict:
    """How one prompt's speculative output compares with the baseline's."""

    prompt_id: str
    verdict: str  # "same", "tie" (parted at a numeric tie) or "differs"
    diverged_at: int | None = None
    evidence: TieEvidence | None = None

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
    tie_evidence: TieEvidenceFn,
    epsilon: float = TIE_EPSILON,
) -> list[OutputVerdict]:
    """One verdict per prompt; `tie_evidence` is only asked where the outputs part ways."""
    verdicts = []
    for index, (prompt_id, expected, actual) in enumerate(zip(prompt_ids, baseline, candidate)):
        at = first_difference(expected, actual)
        if at is None:
            verdicts.append(OutputVerdict(prompt_id, "same"))
            continue
        if at >= min(len(expected), len(actual)):  # one stopped early: not a tie between two tokens
            verdicts.append(OutputVerdict(prompt_id, "differs", at))
            continue
        evidence = tie_evidence(index, expected[:at], expected[at], actual[at])
        verdicts.append(OutputVerdict(prompt_id, "tie" if evidence.is_tie(epsilon) else "differs", at, evidence))
    return verdicts
