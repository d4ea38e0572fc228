"""What the study commands print: the best configuration's command line and figures, the
confirmation's table and the list of trials. Plain text; `--json` output is the library's own dicts."""

from __future__ import annotations

from autotune.presets.confirmed import PresetResult
from autotune.spec.command import format_command
from autotune.spec.default import SPEC_DEFAULT_FLAG
from autotune.study.best import BestResult, SetAside
from autotune.study.confirm import Confirmation
from autotune.study.records import SPEC_DEFAULT_ROLE, TrialRecord
from autotune.study.trials import is_spec_default


ENGINE_LABELS = {"server": "llama-server", "python": "the in-process engine"}


def best_text(result: BestResult | PresetResult) -> str:
    """The command line, then its figures: the confirmed ones first, each naming the engine that measured it."""
    lines = [format_command(result.argv)]
    if isinstance(result, PresetResult):
        return "\n".join(lines + [result.summary()])
    confirmed = result.confirmed
    if confirmed is not None and confirmed.role == "baseline":
        confirmation, fastest = result.confirmation, result.confirmation.fastest
        if fastest is None:
            why = "every finalist failed there (see `autotune confirm`)"
        else:
            p_value = fastest.p_value if fastest.p_value is not None else float("nan")
            why = (f"no configuration was significantly faster in {confirmation.repeats} interleaved rounds (the "
                   f"fastest, {fastest.label}, ran {fastest.speedup:.2f}x, p={p_value:.3g}; `autotune confirm "
                   "--repeats N` measures longer)")
        lines.append(f"# the plain command, {confirmed.mean_tok_s:.1f} tok/s [95% CI {confirmed.ci95[0]:.1f}-"
                     f"{confirmed.ci95[1]:.1f}] on {ENGINE_LABELS.get(confirmation.engine, confirmation.engine)}: {why}")
    elif confirmed is not None:
        confirmation = result.confirmation
        baseline = confirmation.baseline_of(confirmed)
        verdict = "significantly faster" if confirmed.significantly_faster else "NOT significantly faster"
        lines.append(
            f"# {confirmed.mean_tok_s:.1f} tok/s [95% CI {confirmed.ci95[0]:.1f}-{confirmed.ci95[1]:.1f}] on "
            f"{ENGINE_LABELS.get(confirmation.engine, confirmation.engine)}, baseline {baseline.mean_tok_s:.1f} "
            f"[{baseline.ci95[0]:.1f}-{baseline.ci95[1]:.1f}], speedup {confirmed.speedup:.2f}x, "
            f"p={confirmed.p_value if confirmed.p_value is not None else float('nan'):.3g} ({verdict}; "
            f"{confirmation.repeats} interleaved rounds)"
        )
        reference = confirmation.spec_default_of(confirmed)
        if confirmed.role == SPEC_DEFAULT_ROLE:  # llama.cpp's default won: the searched best beside it
            finalists = [c for c in confirmation.configs if c.role == "trial" and c.failure is None]
            if finalists:
                fastest = max(finalists, key=lambda c: c.mean_tok_s)
                lines.append(f"# this is llama.cpp's --spec-default: the fastest searched configuration ({fastest.label}) "
                             f"ran {fastest.mean_tok_s:.1f} tok/s [{fastest.ci95[0]:.1f}-{fastest.ci95[1]:.1f}] in the "
                             f"same rounds, {fastest.mean_tok_s / confirmed.mean_tok_s:.2f}x of it")
        elif reference is not None:
            lines.append(f"# over llama.cpp's --spec-default ({reference.mean_tok_s:.1f} tok/s "
                         f"[{reference.ci95[0]:.1f}-{reference.ci95[1]:.1f}], same rounds): "
                         f"{confirmation.speedup_vs_spec_default(confirmed):.2f}x")
    serving = result.serving()
    if serving["concurrency"] > 1 and serving["aggregate_tok_s"] is not None:
        source = "confirmed" if confirmed is not None and confirmed.figures else "in the search"
        lines.append(f"# {serving['concurrency']} concurrent streams ({source}): aggregate {serving['aggregate_tok_s']:.1f} "
                     f"tok/s, per stream {serving['per_stream_tok_s']:.1f} tok/s (10th percentile "
                     f"{serving['per_stream_p10_tok_s']:.1f})")
    if result.front and result.objective == "pareto-throughput":
        lines.append("# pareto front (aggregate tok/s, per-stream tok/s); the pick (*) has the best aggregate tok/s:")
        for member in sorted(result.front, key=lambda t: -t.values[0]):
            mark = "*" if member.number == result.trial.number else " "
            lines.append(f"# {mark} trial {member.number:>3}: {member.values[0]:7.1f} aggregate, {member.values[1]:7.1f} "
                         f"per stream  {TrialRecord.of(member).label}")
    elif result.front:
        lines.append("# pareto front (decode tok/s, prompt tok/s); the pick (*) has the best end-to-end tok/s:")
        for member in sorted(result.front, key=lambda t: -t.values[0]):
            mark = "*" if member.number == result.trial.number else " "
            lines.append(f"# {mark} trial {member.number:>3}: {member.values[0]:7.1f} decode, {member.values[1]:7.1f} prompt, "
                         f"{TrialRecord.of(member).figures['e2e_tok_s']:7.1f} e2e  {TrialRecord.of(member).label}")
    engine = TrialRecord.of(result.trial).engine
    which = f"trial {result.trial.number}" + (f" ({SPEC_DEFAULT_FLAG})" if is_spec_default(result.trial) else "")
    if result.predicted_speedup is not None and engine == "predicted":
        error = "" if result.calibration_error is None else f", cost model {result.calibration_error:.1%} off llama-server"
        measured = (f"predicted {result.tok_s:.1f} tok/s, speedup {result.predicted_speedup:.2f}x ({which}, from the "
                    f"baseline's output and the measured step costs{error})")
    else:
        measured = f"{result.tok_s:.1f} tok/s decode in the search ({which}, {ENGINE_LABELS.get(engine, engine)}, " \
                   "one measurement)"
        if result.baseline_tok_s:
            measured += f", baseline {result.baseline_tok_s:.1f}, speedup {result.speedup:.2f}x"
        if result.speedup_vs_spec_default is not None and not is_spec_default(result.trial):
            measured += f", {result.speedup_vs_spec_default:.2f}x over --spec-default ({result.spec_default_tok_s:.1f})"
    lines.append("# " + measured if confirmed is not None else "# " + measured + " — not confirmed")
    if result.set_aside is not None:
        lines.append(set_aside_line(result.set_aside))
    return "\n".join(lines)


def set_aside_line(set_aside: SetAside) -> str:
    """The faster configuration the printed command's llama-server cannot run, and what it needs."""
    record = TrialRecord.of(set_aside.trial)
    speedup = f"{set_aside.speedup:.2f}x, " if set_aside.speedup is not None else ""
    engine = ENGINE_LABELS.get(record.engine, record.engine)
    return (f"# faster in the search: trial {set_aside.trial.number}, {record.label} ({speedup}{engine}): it "
            f"{set_aside.needs}; `autotune best --server-bin BINARY` with a build that has them prints its command")


def confirmation_table(result: Confirmation) -> str:
    """What `autotune confirm` prints: each row's mean tok/s, interval, speedup and p-value."""
    lines = []
    rows = [*result.baselines, *result.configs]
    level = rows[0].concurrency if rows else 1
    if level > 1:
        lines.append(f"# --concurrency {level} (-np {level}): after each configuration, its aggregate tok/s of all "
                     "streams and per-stream decode tok/s (mean, 10th percentile)")
    lines.append(f"{'tok/s':>8} {'95% CI':>17} {'speedup':>7} {'p':>8}  configuration ({result.engine} engine, {result.repeats} repeats)")
    for row in [*result.baselines, *result.configs]:
        if row.failure:
            lines.append(f"{'-':>8} {'':>17} {'':>7} {'':>8}  {row.label} [{row.failure}]")
            continue
        speedup = f"{row.speedup:.2f}x" if row.speedup is not None else "-"
        p_value = f"{row.p_value:.3g}" if row.p_value is not None else "-"
        ci = f"[{row.ci95[0]:.1f}, {row.ci95[1]:.1f}]"
        serving = ""
        if level > 1 and row.figures:
            mean = {name: sum(values) / len(values) for name, values in row.figures.items() if values}
            serving = (f"  [aggregate {mean.get('aggregate_tok_s', 0):.1f}, per stream {mean.get('per_stream_tok_s', 0):.1f}"
                       f", p10 {mean.get('per_stream_p10_tok_s', 0):.1f}]")
        lines.append(f"{row.mean_tok_s:>8.1f} {ci:>17} {speedup:>7} {p_value:>8}  {row.label}{serving}")
    return "\n".join(lines)


def trials_table(rows: list[dict]) -> str:
    """What `autotune trials` prints: one line per trial."""
    lines = []
    lines.append(f"{'#':>3}  {'state':<8} {'tok/s':>7} {'95% CI':>13} {'speedup':>7} {'pred':>6} {'accept':>6}  "
                 "configuration")
    for row in rows:
        tok_s = f"{row['tok_s']:.1f}" if row["tok_s"] is not None else "-"
        ci95 = f"{row['ci95'][0]:.1f}-{row['ci95'][1]:.1f}" if row["ci95"] else "-"
        speedup = f"{row['speedup']:.2f}x" if row["speedup"] is not None else "-"
        accept = f"{row['acceptance']:.0%}" if row["acceptance"] is not None else "-"
        predicted = f"{row['predicted_speedup']:.2f}x" if row.get("predicted_speedup") is not None else "-"
        label = row["label"] or "-"
        if row["role"] == "baseline":
            label += " (baseline" + (f", drift {row['drift']:.3f})" if row["drift"] is not None else ")")
        elif row["role"] == "spec-default":
            label += " (llama.cpp's --spec-default" + (", drift check)" if row.get("drift_check") else ")")
        if row["lossless"] is False:
            label += f" [output differs, excluded: {row['lossless_reason']}]"
        if row["fail_reason"]:
            label += f" [{row['fail_reason']}]"
        lines.append(f"{row['number']:>3}  {row['state']:<8} {tok_s:>7} {ci95:>13} {speedup:>7} {predicted:>6} "
                     f"{accept:>6}  {label}")
    return "\n".join(lines)
