"""Unattended re-tuning: when model files are new or changed, run a new study version warm-started
with the previous winners, confirm on llama-server, and replace the preset only when the new winner
is significantly faster than the configuration in use.

Exit codes for cron and systemd (README, "Nightly re-tuning"): 0 improved (preset replaced),
3 unchanged (preset kept), 4 regressed (the preset's own configuration now measures slower than when
it was recorded), 1 failed, 2 bad input.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.study.confirm import Confirmation, ConfirmedConfig
from storage.presets import Preset

EXIT_CODES = {"improved": 0, "unchanged": 3, "regressed": 4}
SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class NightlyOutcome:
    status: str  # "improved", "unchanged" or "regressed"
    summary: str
    new_winner: ConfirmedConfig | None = None  # set when the preset should be replaced

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]


def combined_exit_code(outcomes: list[NightlyOutcome]) -> int:
    """One exit code for the levels of `--concurrency 1,2,4`: improved if any level improved, else
    regressed if any regressed, else unchanged."""
    statuses = {o.status for o in outcomes}
    for status in ("improved", "regressed"):
        if status in statuses:
            return EXIT_CODES[status]
    return EXIT_CODES["unchanged"]


def unchanged_files(model: str) -> NightlyOutcome:
    return NightlyOutcome("unchanged", f"{model}: no new or changed model files; preset kept")


def decide(model: str, confirmation: Confirmation, preset: Preset | None) -> NightlyOutcome:
    """Compare the confirmed new winner with the preset's configuration measured in the same run."""
    winner = confirmation.winner
    if winner is None:
        return NightlyOutcome("unchanged", f"{model}: no configuration could be confirmed; preset kept")
    figures = f"{winner.label} {winner.mean_tok_s:.1f} tok/s ({winner.speedup:.2f}x)"
    if preset is None:
        return NightlyOutcome("improved", f"{model}: first preset: {figures}", winner)
    current = confirmation.preset
    if current is None:
        return NightlyOutcome("improved", f"{model}: the preset's files are gone; new preset {figures}", winner)
    if list(winner.argv) == list(current.argv):
        return _unless_regressed(model, current, preset, f"{model}: the preset is still the best ({figures}); kept")
    p_value = confirmation.welch_p(winner, current)
    if winner.mean_tok_s > current.mean_tok_s and p_value is not None and p_value < SIGNIFICANCE:
        return NightlyOutcome(
            "improved", f"{model}: {figures} beats the preset's {current.mean_tok_s:.1f} tok/s (p={p_value:.3g})", winner
        )
    shown = "n/a" if p_value is None else f"{p_value:.3g}"
    return _unless_regressed(
        model, current, preset,
        f"{model}: {figures} is not significantly faster than the preset's {current.mean_tok_s:.1f} tok/s "
        f"(p={shown}); kept",
    )


def _unless_regressed(model: str, current: ConfirmedConfig, preset: Preset, summary: str) -> NightlyOutcome:
    """`unchanged`, unless the preset's configuration now measures below its recorded 95% interval."""
    if preset.ci95_low is not None and current.ci95[1] < preset.ci95_low:
        return NightlyOutcome(
            "regressed",
            f"{model}: the preset now runs {current.mean_tok_s:.1f} tok/s, below its recorded "
            f"{preset.ci95_low:.1f}-{preset.ci95_high:.1f}; kept (check drivers, llama.cpp build, other load)",
        )
    return NightlyOutcome("unchanged", summary)
