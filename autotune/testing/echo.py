"""Does a generation restate its prompt or loop on its own text? What n-gram lookup drafts for free.

A base model given an instruction tends to repeat it, and a small model tends to repeat itself; both
make n-gram drafting look better than on real work. Both checks compare runs of `n` words
(whitespace-separated, lower-cased): an output *restates* its prompt when one of its runs appears
in the prompt, and *loops* when one of its runs appears twice in the output itself.
"""

from __future__ import annotations

from dataclasses import dataclass

RUN_WORDS = 8


def _runs(words: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def _words(text: str) -> list[str]:
    return text.lower().split()


def restates(prompt: str, output: str, n: int = RUN_WORDS) -> bool:
    """Whether some run of `n` words of `output` appears in `prompt`."""
    in_prompt = set(_runs(_words(prompt), n))
    return any(run in in_prompt for run in _runs(_words(output), n))


def loops(output: str, n: int = RUN_WORDS) -> bool:
    """Whether some run of `n` words appears twice in `output`."""
    runs = _runs(_words(output), n)
    return len(set(runs)) < len(runs)


@dataclass(frozen=True)
class EchoCount:
    """Over a set of (prompt, output) pairs: how many restate their prompt, and how many more loop."""

    total: int
    restated: int
    looped_only: int  # loop without restating the prompt

    @property
    def echoing(self) -> int:
        return self.restated + self.looped_only

    def __str__(self) -> str:
        return f"{self.restated} of {self.total} restate the prompt, {self.looped_only} more loop"


def count_echoes(pairs: list[tuple[str, str]], n: int = RUN_WORDS) -> EchoCount:
    restated = sum(restates(p, o, n) for p, o in pairs)
    looped_only = sum(loops(o, n) and not restates(p, o, n) for p, o in pairs)
    return EchoCount(len(pairs), restated, looped_only)
