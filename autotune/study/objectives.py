"""What a study maximizes.

- decode (default): mix decode tok/s, the speed a user sees once text streams.
- e2e: generated tokens per second of whole requests, prompt processing included. DSpark can cut
  prompt speed 3x while raising decode speed; for short answers to long prompts this is the figure.
- pareto: decode tok/s and prompt tok/s together (a two-objective study); the pick on the front is
  the configuration with the best end-to-end tok/s.
- throughput: aggregate tok/s of all concurrent streams (`--concurrency N`): what a shared server
  delivers in total. Per-prompt scores do not bound it, so such a study is not pruned.
- pareto-throughput: aggregate tok/s and per-stream decode tok/s together; the pick on the front is
  the configuration with the best aggregate tok/s (bound the per-stream tail with --min-stream-tok-s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from autotune.measure.measurement import GenerationResult, Measurement


@dataclass(frozen=True)
class Objective:
    name: str
    directions: tuple[str, ...]
    values_of: Callable[[Measurement], list[float]]
    #: one prompt's score, reported to the pruner as one instance (single-objective studies only)
    prompt_score: Callable[[GenerationResult], float] = lambda r: r.decode_tok_s
    #: whether per-prompt scores say anything about the objective (aggregate throughput: they do not)
    prunable: bool = True
    #: a multi-objective study's pick on its front: the member with the highest value of this figure
    pick_figure: str = "e2e_tok_s"
    #: the Measurement figure a confirmation compares with the baseline's
    confirm_figure: str = "mix_tok_s"

    @property
    def is_multi(self) -> bool:
        return len(self.directions) > 1


OBJECTIVES: dict[str, Objective] = {
    "decode": Objective("decode", ("maximize",), lambda m: [m.mix_tok_s]),
    "e2e": Objective("e2e", ("maximize",), lambda m: [m.e2e_tok_s], lambda r: r.e2e_tok_s),
    "pareto": Objective("pareto", ("maximize", "maximize"), lambda m: [m.mix_tok_s, m.prompt_tok_s]),
    "throughput": Objective(
        "throughput", ("maximize",), lambda m: [m.aggregate_tok_s], prunable=False, confirm_figure="aggregate_tok_s"
    ),
    "pareto-throughput": Objective(
        "pareto-throughput",
        ("maximize", "maximize"),
        lambda m: [m.aggregate_tok_s, m.per_stream_tok_s],
        pick_figure="aggregate_tok_s",
    ),
}
DEFAULT_OBJECTIVE = "decode"
