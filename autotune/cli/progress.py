"""Progress on the terminal: a bar over trials, a live line per prompt, a summary line per trial."""

from __future__ import annotations

import shutil
import sys
from typing import TextIO

import optuna

from autotune.measure.measurement import GenerationResult
from autotune.spec.config import SpecConfig
from autotune.spec.default import SPEC_DEFAULT_FLAG
from autotune.study.records import SPEC_DEFAULT_ROLE, TrialRecord

_BAR_WIDTH = 20


class SilentReporter:
    """Shows nothing: for scripts and benchmarks that drive a Tuner themselves."""

    def note(self, text: str) -> None: ...

    def trial_started(self, number: int, index: int, total: int, config: SpecConfig) -> None: ...

    def prompt_done(self, index: int, total: int, result: GenerationResult) -> None: ...

    def trial_finished(self, trial: optuna.trial.FrozenTrial) -> None: ...

    def race_status(self, text: str) -> None: ...


class TerminalReporter:
    """Prints to stderr; on a terminal the bar line is redrawn in place, elsewhere only summaries print."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.index = 0
        self.total = 0
        self.label = ""

    def note(self, text: str) -> None:
        self._clear()
        print(f"autotune: {text}", file=self.stream, flush=True)

    def trial_started(self, number: int, index: int, total: int, config: SpecConfig) -> None:
        self.index, self.total, self.label = index, total, config.describe()
        self._redraw("warming up")

    def prompt_done(self, index: int, total: int, result: GenerationResult) -> None:
        self._redraw(f"prompt {index + 1}/{total} {result.decode_tok_s:6.1f} tok/s")

    def trial_finished(self, trial: optuna.trial.FrozenTrial) -> None:
        self._clear()
        record = TrialRecord.of(trial)
        label = record.label or "?"
        if record.role == SPEC_DEFAULT_ROLE:
            label = f"{SPEC_DEFAULT_FLAG} ({label})"
        if record.drift_check:
            label += " (drift check)"
        head = f"[{self.index}/{self.total}] trial {trial.number:>3} {label}"
        if trial.state == optuna.trial.TrialState.COMPLETE:
            tail = f"-> {record.tok_s or 0:.1f} tok/s"
            if record.speedup is not None:
                tail += f" ({record.speedup:.2f}x)"
            if record.figure("acceptance") is not None:
                tail += f", acceptance {record.figure('acceptance'):.0%}"
            if record.drift is not None:
                tail += f", drift {record.drift:.3f} of the first baseline"
            if record.lossless is False:
                tail += ", OUTPUT DIFFERS from baseline (excluded)"
        else:
            reason = record.fail_reason or record.prune_reason or "no reason recorded"
            tail = f"-> {trial.state.name}: {reason}"
        print(f"{head} {tail}", file=self.stream, flush=True)

    def race_status(self, text: str) -> None:
        """On a terminal, the race's live line redrawn in place (each entrant's interval, the time left);
        elsewhere the per-round lines say it."""
        self._write_live(text)

    def _redraw(self, status: str) -> None:
        done = int(_BAR_WIDTH * (self.index - 1) / max(self.total, 1))
        bar = "#" * done + "-" * (_BAR_WIDTH - done)
        self._write_live(f"[{bar}] trial {self.index}/{self.total} {self.label}: {status}")

    def _write_live(self, line: str) -> None:
        if not self.live:
            return
        width = shutil.get_terminal_size().columns - 1
        self.stream.write("\r" + line[:width].ljust(width))
        self.stream.flush()

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r" + " " * (shutil.get_terminal_size().columns - 1) + "\r")
