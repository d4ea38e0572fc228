"""Predictions held against llama-server, the way the default search makes them: the baseline measured
on llama-server (its output the trajectory), the step costs and draft chains measured in-process, the
references chosen and measured by the search's own calibration (autotune.search.predicted.calibrate);
then every configuration predicted, and measured on llama-server with the baseline in interleaved
rounds, paired prompt by prompt. What examples/benchmarks/predictor.py prints and
tests/predict/test_prediction_bounds.py bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from autotune.engines.python import PythonEngine
from autotune.engines.server import ServerEngine
from autotune.measure.paired import Speedup
from autotune.measure.prompts import PromptMix
from autotune.predict.target import measure_target
from autotune.race.entrants import Entrant, speedup_of
from autotune.race.race import measure_rounds
from autotune.search.predicted import Replayed, calibrate
from autotune.spec.command import ServerCommand
from autotune.spec.config import SpecConfig
from autotune.spec.types import family_of


@dataclass(frozen=True)
class Checked:
    """One configuration's prediction and what llama-server measured of it."""

    config: SpecConfig
    predicted: float  # speedup
    measured: Speedup  # paired over the rounds
    reference: bool  # the calibration measured it (its error is in sample)
    replayed_counts: tuple[int, int]  # drafted, accepted (every prompt)
    server_counts: tuple[int, int]  # drafted, accepted on llama-server (every prompt, first round)
    dropped: str | None = None  # why the rounds stopped measuring it (its output parted from the baseline's)

    @property
    def family(self) -> str | None:
        return family_of(self.config.spec_type)

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted / self.measured.ratio - 1


def check_predictions(
    target: Path,
    drafts: list[Path],
    configs: list[SpecConfig],
    mix: PromptMix,
    *,
    max_tokens: int,
    rounds: int,
    context_size: int = 4096,
    note: Callable[[str], None] = lambda line: None,
) -> list[Checked]:
    """Predict `configs` (of `target`, with draft models among `drafts`) and measure them (see the module
    docstring); one Checked per configuration, in order."""
    command = ServerCommand(context_size)
    with ServerEngine(context_size=context_size) as server:
        baseline = server.measure(SpecConfig(target), mix, max_tokens=max_tokens)
    with PythonEngine(context_size=context_size) as local:
        model = measure_target(
            local,
            target,
            baseline,
            mix,
            arbiter="server",
            max_tokens=max_tokens,
            drafts=drafts,
            chain_length=8,
            block_drafts=[],
            note=note,
        )
    targets = {target: model}
    replayed = [Replayed(config, *model.replay(config)) for config in configs]
    with ServerEngine(context_size=context_size) as server:
        references = calibrate(
            targets,
            replayed,
            server,
            mix,
            max_tokens=max_tokens,
            command=command,
            runs=None,
            with_spec_default=True,
            note=note,
        )
        entrants = [Entrant("baseline", None, SpecConfig(target))]
        entrants += [Entrant("trial", index, config) for index, config in enumerate(configs)]
        pairing = measure_rounds(
            server,
            entrants,
            mix,
            max_tokens=max_tokens,
            rounds=rounds,
            command=command,
            on_measured=lambda r, e, s: note(f"round {r + 1}: {e.label}"),
        )
    measured_as_reference = {e.config.describe() for e in references}
    found = []
    for entrant, item in zip(entrants[1:], replayed):
        first = entrant.rounds[0] if entrant.rounds else None
        found.append(
            Checked(
                item.config,
                model.predicted(item.replay, item.charge).speedup or 0.0,
                speedup_of(entrant, entrants, "mix_tok_s", pairing),
                item.config.describe() in measured_as_reference,
                (item.replay.drafted, item.replay.accepted),
                (first.n_drafted, first.n_accepted) if first is not None else (0, 0),
                entrant.dropped,
            )
        )
    return found
