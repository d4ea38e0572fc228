"""What the study commands print: the best configuration's command line and figures, the
confirmation's table and the list of trials. Plain text; `--json` output is the library's own dicts."""

from __future__ import annotations

import math

from autotune.measure.paired import MIN_EFFECT
from autotune.presets.confirmed import PresetResult
from autotune.spec.command import format_command
from autotune.spec.default import SPEC_DEFAULT_FLAG
from autotune.study.best import BestResult, SetAside
from autotune.study.records import BASELINE_ROLE, SPEC_DEFAULT_ROLE, TrialRecord
from autotune.study.trials import is_spec_default
from autotune.study.verdict import (
    CONFIRM_ROUNDS_CAP,
    RACE_BUDGET_CAP,
    SEARCH_BUDGET_CAP,
    SPACE_BUDGET_CAP,
    RacedConfig,
    RaceVerdict,
    coverage,
)

PLAIN_SPEED = "the plain command's speed"
#: a control (the plain command against itself) whose interval reaches further from 1 says the box is noisy
NOISY_WIDTH = 0.05
ENGINE_LABELS = {"server": "llama-server", "python": "the in-process engine"}


def best_text(result: BestResult | PresetResult) -> str:
    """The command line, then its figures: the race's verdict first (a speedup with its interval, paired
    prompt by prompt with the plain command), `--spec-default` in the same rounds, then the prediction's
    error for this configuration; each names the engine that measured it."""
    lines = [format_command(result.argv)]
    if isinstance(result, PresetResult):
        return "\n".join(lines + [result.summary()])
    confirmed = result.confirmed
    if confirmed is not None:
        lines += race_lines(result.confirmation, confirmed)
        if result.prediction_error is not None:
            lines.append(
                f"# predicted {result.predicted_speedup:.2f}x for it (trial {result.trial.number}), raced "
                f"{confirmed.speedup:.2f}x: the prediction was {abs(result.prediction_error):.1%} "
                f"{'high' if result.prediction_error > 0 else 'low'}"
            )
    else:
        lines.append(_unconfirmed_line(result))
    serving = result.serving()
    if serving["concurrency"] > 1 and serving["aggregate_tok_s"] is not None:
        source = "raced" if confirmed is not None and confirmed.figures else "in the search"
        lines.append(
            f"# {serving['concurrency']} concurrent streams ({source}): aggregate {serving['aggregate_tok_s']:.1f} "
            f"tok/s, per stream {serving['per_stream_tok_s']:.1f} tok/s (10th percentile "
            f"{serving['per_stream_p10_tok_s']:.1f})"
        )
    lines += _front_lines(result)
    if result.set_aside is not None:
        lines.append(set_aside_line(result.set_aside))
    lines += _losing_category_lines(result)
    return "\n".join(lines)


def _losing_category_lines(result: BestResult) -> list[str]:
    """One line where the pick runs slower than the plain command on some categories of the mix (by at
    least the 0.01x the line shows: a 1.00x is no loss to speak of)."""
    pick = result.by_category().get("pick")
    losing = {
        name: figures
        for name, figures in (pick or {}).get("categories", {}).items()
        if round(figures["speedup"], 2) < 1
    }
    if not losing:
        return []
    shown = ", ".join(
        f"{name} {f['speedup']:.2f}x [{f['speedup_ci'][0]:.2f}-{f['speedup_ci'][1]:.2f}]"
        for name, f in sorted(losing.items())
    )
    return [f"# slower than the plain command on {shown}: `autotune best --by-category` shows every category"]


def category_table(result: BestResult) -> str:
    """`best --by-category`: each category's raced speedup (95 % interval) and predicted one, for the pick
    (or, where the plain command is the pick, the race's fastest entrant) and for llama.cpp's --spec-default."""
    found = result.by_category()
    if not found:
        return "# by category: no race timed this pick's prompts one by one"
    lines = []
    for name, heading in (
        ("pick", "the pick"),
        ("fastest", "the plain command is the pick; the fastest entrant"),
        ("spec_default", "llama.cpp's --spec-default"),
    ):
        if name not in found:
            continue
        lines.append(f"# {heading}, {found[name]['label']}: speedup by category [95% CI], predicted")
        for category, f in sorted(found[name]["categories"].items()):
            low, high = f["speedup_ci"]
            interval = f"[{low:.2f}-{high:.2f}]" if math.isfinite(high) else "[-]"
            predicted = f"{f['predicted_speedup']:.2f}x" if f["predicted_speedup"] is not None else "-"
            lines.append(f"#   {category:<24} {f['speedup']:.2f}x {interval:>13}  predicted {predicted}")
    return "\n".join(lines)


def race_lines(confirmation: RaceVerdict, pick: RacedConfig) -> list[str]:
    """What the race says of its pick: its speedup over the plain command (or, where the plain command is
    the pick, the fastest entrant and why it was not picked), then llama.cpp's --spec-default, then the
    control (the plain command against itself) and what it says of the machine."""
    engine = ENGINE_LABELS.get(confirmation.engine, confirmation.engine)
    prompts = pick.prompts or len(confirmation.prompt_ids)
    if confirmation.pairing == "block":
        size = f"{confirmation.repeats} blocks over its {prompts} prompts, paired by block"
    else:
        size = f"{confirmation.repeats} rounds x {prompts} prompts" + (
            ", each prompt paired" + (f", {confirmation.looks} looks" if confirmation.looks else "")
            if confirmation.pairing == "prompt"
            else ", paired by round"
        )
    lines = []
    reference = confirmation.spec_default_of(pick)
    failed = [d for d in confirmation.spec_defaults if d.target == pick.target and d.failure]
    if pick.role == BASELINE_ROLE:
        fastest = confirmation.fastest
        lines.append(
            f"# the plain command: no configuration was proven faster than it by "
            f"{confirmation.min_effect:.0%} on {engine} ({size}; {confirmation.ended})"
        )
        if confirmation.machine_moved:
            lines.append(f"# {confirmation.machine_moved}: no winner is named; race again on a quiet machine")
        if fastest is not None:
            lines.append(
                f"# the fastest, {fastest.label}, ran {_speedup_text(fastest)} (p={_p(fastest)}): "
                + _not_picked(fastest, confirmation)
            )
        if reference is not None and reference.speedup and reference is not fastest:
            lines.append(f"# llama.cpp's --spec-default in the same rounds: {_speedup_text(reference)}")
    else:
        lines += _winner_lines(confirmation, pick, engine, size)
        if pick.role == SPEC_DEFAULT_ROLE:
            searched = [c for c in confirmation.configs if c.role == "trial" and c.speedup]
            if searched:
                best = max(searched, key=lambda c: c.speedup)
                lines.append(
                    f"# this is llama.cpp's --spec-default; the fastest searched configuration ({best.label}) "
                    f"ran {_speedup_text(best)} in the same rounds"
                )
        elif reference is not None and reference.speedup:
            versus = confirmation.versus(pick, reference)
            low, high = versus.interval()
            lines.append(
                f"# llama.cpp's --spec-default in the same rounds: {_speedup_text(reference)}; this command "
                f"runs {versus.ratio:.2f}x its speed [95% CI {low:.2f}-{high:.2f}]"
            )
        baseline = confirmation.baseline_of(pick)
        lines.append(
            f"# {pick.mean_tok_s:.1f} tok/s against the plain command's {baseline.mean_tok_s:.1f} "
            f"(decode, means over {pick.rounds} rounds)"
        )
    lines += [f"# llama.cpp's --spec-default left the race: {d.failure}" for d in failed]
    lines += _control_lines(confirmation)
    if confirmation.void_rounds:
        lines.append(
            f"# {len(confirmation.void_rounds)} round(s) set aside and played again, their control having "
            "moved: " + "; ".join(confirmation.void_rounds)
        )
    return lines


def _winner_lines(confirmation: RaceVerdict, pick: RacedConfig, engine: str, size: str) -> list[str]:
    """A winner's verdict: the interval of the test that decided, at its level, with that test's point at the
    decision; then the round after the decision, printed apart as a replication; then any rival the budget
    left within reach. A record from before the deciding test was stored prints its one interval."""
    if pick.decided_by is None:
        after = " on fresh servers after the decision" if pick.speedup_at_decision is not None else ""
        lines = [f"# {_speedup_text(pick, PLAIN_SPEED + after)} on {engine} (p={_p(pick)}, {size})"]
        if pick.speedup_at_decision is not None:
            lines.append(
                f"# decided in round {(confirmation.decided_round or 0) + 1}, where it read "
                f"{pick.speedup_at_decision:.2f}x; a race stops where its estimate is high, so the figure "
                "above is the round run after the decision, and the interval spans every round"
            )
        return lines
    point = pick.speedup_at_decision if pick.speedup_at_decision is not None else pick.speedup
    low, high = pick.speedup_ci
    lines = [
        f"# {point:.2f}x {PLAIN_SPEED} [{pick.ci_label} {low:.2f}-{high:.2f}] on {engine} (p={_p(pick)}, {size}): "
        f"proven by the {pick.decided_by} in round {(confirmation.decided_round or 0) + 1}"
    ]
    if pick.speedup_at_decision is not None:
        replication = (
            f" [{coverage(0.025)} {pick.replication_ci[0]:.2f}-{pick.replication_ci[1]:.2f}]"
            if pick.replication_ci
            else ""
        )
        after = confirmation.after_decision_round
        ran = len(pick.decode_ms[after]) if after is not None and after < len(pick.decode_ms) else pick.prompts
        part = (
            f", {ran} of its {pick.prompts} prompts (one a category, as the budget asked)" if ran < pick.prompts else ""
        )
        lines.append(
            f"# replicated on fresh servers after the decision: {pick.speedup:.2f}x{replication}, that round "
            f"alone{part} (a race stops where its estimate is high; this is the figure to expect)"
        )
    if confirmation.within_reach:
        lines.append(
            f"# the budget ended before every rival was ruled out: {', '.join(confirmation.within_reach)} "
            f"may still be within {confirmation.min_effect:.0%} of it; {races_longer(confirmation)}"
        )
    return lines


def _control_lines(confirmation: RaceVerdict) -> list[str]:
    """The control's figure, and a word where it says the machine was noisy (its interval wider than
    NOISY_WIDTH either side of 1)."""
    control = confirmation.control
    if control is None or control.speedup_ci is None:
        return []
    low, high = control.speedup_ci
    line = f"# the plain command against itself (the race's control): {_speedup_text(control)}"
    if math.isfinite(high) and (high > 1 + NOISY_WIDTH or low < 1 - NOISY_WIDTH):
        line += (
            f"; the machine was noisy (a quiet one keeps this within {1 - NOISY_WIDTH:.2f}-{1 + NOISY_WIDTH:.2f}): "
            "every interval above is that much wider"
        )
    return [line]


#: the option that races longer, by what capped the race (autotune.study.verdict.BUDGET_CAPS)
RACES_LONGER = {
    RACE_BUDGET_CAP: "`--race-budget N` races longer",
    CONFIRM_ROUNDS_CAP: "`--repeats N` races longer",
    SEARCH_BUDGET_CAP: "a longer `--budget` races longer",
    SPACE_BUDGET_CAP: "a longer `--budget` (the search space's budget_per_target capped it) races longer",
}


def races_longer(confirmation: RaceVerdict) -> str:
    """The advice where the race's budget ended before a verdict: the option that races longer."""
    return RACES_LONGER.get(confirmation.budget_cap, RACES_LONGER[RACE_BUDGET_CAP])


def _not_picked(fastest: RacedConfig, confirmation: RaceVerdict) -> str:
    """Why the race's fastest entrant is not the pick, and whether racing longer could change that."""
    threshold = 1 + confirmation.min_effect
    low, high = fastest.speedup_ci or (0.0, float("inf"))
    if high < threshold:
        return f"its whole interval lies below the minimum effect ({threshold:.2f}x): no longer race would pick it"
    if low <= threshold:
        return f"its interval reaches below the minimum effect; {races_longer(confirmation)}"
    return f"not significant once shared among the entrants; {races_longer(confirmation)}"


def _speedup_text(row: RacedConfig, of: str = "") -> str:
    """`1.24x [98.3% CI 1.15-1.34]`, or with `of`: `1.24x the plain command's speed [98.3% CI 1.15-1.34]`; the
    interval is the anytime-valid one at the level the race judged the row at."""
    text = f"{row.speedup:.2f}x" + (f" {of}" if of else "")
    if row.speedup_ci is not None and all(map(math.isfinite, row.speedup_ci)):
        text += f" [{row.ci_label} {row.speedup_ci[0]:.2f}-{row.speedup_ci[1]:.2f}]"
    return text


def _p(row: RacedConfig) -> str:
    """The one-sided p-value of `row`'s speedup against the minimum effect (the race's null)."""
    return "-" if row.p_value is None else f"{row.p_value:.2g} against {1 + MIN_EFFECT:.2f}x"


def _unconfirmed_line(result: BestResult) -> str:
    """A study without a race: its search figure, said to be one measurement (or a prediction)."""
    engine = TrialRecord.of(result.trial).engine
    which = f"trial {result.trial.number}" + (f" ({SPEC_DEFAULT_FLAG})" if is_spec_default(result.trial) else "")
    if result.predicted_speedup is not None and engine == "predicted":
        return (
            f"# predicted {result.tok_s:.1f} tok/s, speedup {result.predicted_speedup:.2f}x ({which}, from the "
            "baseline's output and the measured step costs) — not raced"
        )
    measured = (
        f"{result.tok_s:.1f} tok/s decode in the search ({which}, {ENGINE_LABELS.get(engine, engine)}, one measurement)"
    )
    if result.baseline_tok_s and result.speedup is not None:
        measured += f", baseline {result.baseline_tok_s:.1f}, speedup {result.speedup:.2f}x"
    if result.speedup_vs_spec_default is not None and not is_spec_default(result.trial):
        measured += f", {result.speedup_vs_spec_default:.2f}x over --spec-default ({result.spec_default_tok_s:.1f})"
    return "# " + measured + " — not confirmed"


def _front_lines(result: BestResult) -> list[str]:
    """A pareto study's front, the pick marked."""
    if not result.front:
        return []
    if result.objective == "pareto-throughput":
        heading = "(aggregate tok/s, per-stream tok/s); the pick (*) has the best aggregate tok/s"
        columns = lambda t: f"{t.values[0]:7.1f} aggregate, {t.values[1]:7.1f} per stream"  # noqa: E731
    else:
        heading = "(decode tok/s, prompt tok/s); the pick (*) has the best end-to-end tok/s"
        columns = lambda t: (
            f"{t.values[0]:7.1f} decode, {t.values[1]:7.1f} prompt, "  # noqa: E731
            f"{TrialRecord.of(t).figures['e2e_tok_s']:7.1f} e2e"
        )
    lines = [f"# pareto front {heading}:"]
    for member in sorted(result.front, key=lambda t: -t.values[0]):
        mark = "*" if member.number == result.trial.number else " "
        lines.append(f"# {mark} trial {member.number:>3}: {columns(member)}  {TrialRecord.of(member).label}")
    return lines


def set_aside_line(set_aside: SetAside) -> str:
    """The faster configuration the printed command's llama-server cannot run, and what it needs."""
    record = TrialRecord.of(set_aside.trial)
    speedup = f"{set_aside.speedup:.2f}x, " if set_aside.speedup is not None else ""
    engine = ENGINE_LABELS.get(record.engine, record.engine)
    return (
        f"# faster in the search: trial {set_aside.trial.number}, {record.label} ({speedup}{engine}): it "
        f"{set_aside.needs}; `autotune best --server-bin BINARY` with a build that has them prints its command"
    )


def race_table(result: RaceVerdict) -> str:
    """What `autotune confirm` prints: each entrant's paired speedup over its baseline with its interval,
    p-value and whether the race proved it, its rounds and mean tok/s; then the pick."""
    lines = []
    rows = result.rows + result.controls
    level = rows[0].concurrency if rows else 1
    if level > 1:
        lines.append(
            f"# --concurrency {level} (-np {level}): after each configuration, its aggregate tok/s of all "
            "streams and per-stream decode tok/s (mean, 10th percentile)"
        )
    lines.append(
        f"{'speedup':>8} {'interval (CI)':>19} {'p':>8} {'proven':>6} {'rounds':>6} {'tok/s':>7}  configuration "
        f"({result.engine} engine, {result.pairing} pairing, {result.ended})"
    )
    for row in rows:
        if row.failure:
            lines.append(f"{'-':>8} {'':>19} {'':>8} {'':>6} {'':>6} {'-':>7}  {row.label} [{row.failure}]")
            continue
        decided = row.decided_by is not None and row.speedup_at_decision is not None  # its interval is the decision's
        point = row.speedup_at_decision if decided else row.speedup
        speedup = f"{point:.2f}x" if point is not None else "-"
        ci = (
            f"{row.ci_coverage:.1%} {row.speedup_ci[0]:.2f}-{row.speedup_ci[1]:.2f}"
            if row.speedup_ci and all(map(math.isfinite, row.speedup_ci))
            else "-"
        )
        proven = "yes" if row.significant else "-" if row.role == BASELINE_ROLE else "no"
        serving = ""
        if level > 1 and row.figures:
            mean = {name: sum(values) / len(values) for name, values in row.figures.items() if values}
            serving = (
                f"  [aggregate {mean.get('aggregate_tok_s', 0):.1f}, per stream {mean.get('per_stream_tok_s', 0):.1f}"
                f", p10 {mean.get('per_stream_p10_tok_s', 0):.1f}]"
            )
        dropped = f" [left in round {row.rounds}: {row.dropped}]" if row.dropped else ""
        dropped += f" [at the decision; replicated {row.speedup:.2f}x after it]" if decided else ""
        lines.append(
            f"{speedup:>8} {ci:>19} {_p(row):>8} {proven:>6} {row.rounds:>6} {row.mean_tok_s:>7.1f}  "
            f"{row.label}{serving}{dropped}"
        )
    lines.append(
        "# intervals: anytime-valid, each row's at the coverage it shows: a winner's from the test that "
        "decided, at the look and level that decided; any other's at the level its last look judged it at"
    )
    if result.machine_moved:
        lines.append(f"# {result.machine_moved}: no winner is named")
    pick = result.pick
    if pick is not None:
        lines.append(f"# pick: {'the plain command' if pick.role == BASELINE_ROLE else pick.label}")
    return "\n".join(lines)


def trials_table(rows: list[dict]) -> str:
    """What `autotune trials` prints: one line per trial."""
    lines = []
    lines.append(
        f"{'#':>3}  {'state':<8} {'tok/s':>7} {'95% CI':>13} {'speedup':>7} {'pred':>6} {'90% band':>11} "
        f"{'error':>6} {'accept':>6}  configuration"
    )
    for row in rows:
        tok_s = f"{row['tok_s']:.1f}" if row["tok_s"] is not None else "-"
        ci95 = f"{row['ci95'][0]:.1f}-{row['ci95'][1]:.1f}" if row["ci95"] else "-"
        speedup = f"{row['speedup']:.2f}x" if row["speedup"] is not None else "-"
        accept = f"{row['acceptance']:.0%}" if row["acceptance"] is not None else "-"
        predicted = f"{row['predicted_speedup']:.2f}x" if row.get("predicted_speedup") is not None else "-"
        error = f"{row['prediction_error']:+.0%}" if row.get("prediction_error") is not None else "-"
        band = f"{row['predicted_band'][0]:.2f}-{row['predicted_band'][1]:.2f}" if row.get("predicted_band") else "-"
        label = row["label"] or "-"
        if row["role"] == "baseline":
            label += " (baseline" + (f", drift {row['drift']:.3f})" if row["drift"] is not None else ")")
        elif row["role"] == "spec-default":
            label += " (llama.cpp's --spec-default" + (", drift check)" if row.get("drift_check") else ")")
        if row["lossless"] is False:
            label += f" [output differs, excluded: {row['lossless_reason']}]"
        if row["fail_reason"]:
            label += f" [{row['fail_reason']}]"
        lines.append(
            f"{row['number']:>3}  {row['state']:<8} {tok_s:>7} {ci95:>13} {speedup:>7} {predicted:>6} "
            f"{band:>11} {error:>6} {accept:>6}  {label}"
        )
    return "\n".join(lines)
