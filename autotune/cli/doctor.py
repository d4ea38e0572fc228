"""`autotune doctor`: the llama.cpp builds, the GPUs, a 4-token decode on each engine, and what to fix."""

from __future__ import annotations

import json
import sys

import click

from autotune.cli.options import json_option, models_dir_option, server_bin_option, space_option
from autotune.settings import default_models_dir


@click.command()
@click.option(
    "--model",
    "-m",
    default=None,
    help="The model whose target file the two engines decode (a search_spaces/<name>.toml file); "
    "default: the smallest known model on disk, the demo's Gemma 3 270M first.",
)
@space_option
@models_dir_option
@server_bin_option
@json_option
def doctor(model, space_file, models_dir, server_bin, as_json):
    """Check this machine: each llama.cpp build (path, version, backend, CPU features), the GPUs, and a
    4-token decode in-process and on llama-server. One line per fact, a `problem:` line for each thing
    that keeps a search from running right and a `warning:` line for what is only worth knowing; exits 1
    when there is a problem.

    \b
    Example:
        autotune doctor
        autotune doctor --model qwen3-8b --json
    """
    from autotune.doctor import examine

    report = examine(model, models_dir or default_models_dir(), server_bin, space_file)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for line in report_lines(report):
            click.echo(line)
    if not report.usable:
        sys.exit(1)


def report_lines(report) -> list[str]:
    lines = [f"model: {report.model or 'none on disk'}, decoding {report.target or 'nothing (see below)'}"]
    isa = " ".join(report.cpu_extensions) if report.cpu_extensions is not None else "not read (not x86-64 Linux)"
    lines.append(f"cpu: {report.cpu}; extensions enabled: {isa or 'none'}")
    lines += [f"gpu: {g['index']}: {g['name']}, {g['memory_mib']} MiB, driver {g['driver']}" for g in report.gpus] or [
        "gpu: none seen (no nvidia-smi, or it lists none)"
    ]
    for build in report.builds:
        backends = "+".join(build.backends) if build.backends is not None else "unknown"
        features = " ".join(build.cpu_features) if build.cpu_features is not None else "unknown"
        devices = "; ".join(build.devices) if build.devices else "none but the CPU"
        lines.append(
            f"build {build.engine}: {build.package or 'llama-server'} at {build.path}: llama.cpp "
            f"{build.identity}; backend {backends}; CPU features {features}; devices {devices}"
        )
    for decode in report.decodes:
        if decode.error is None:
            rate = f", {decode.decode_tok_s:.1f} tok/s" if decode.decode_tok_s else ""
            lines.append(f"decode {decode.engine}: {decode.n_generated} tokens{rate} ({decode.wall_s:.1f} s in all)")
    lines += [f"{'problem' if f.unusable else 'warning'}: {f.text}" for f in report.findings]
    lines.append(
        "usable: yes" if report.usable else f"usable: no, {sum(f.unusable for f in report.findings)} problem(s) above"
    )
    return lines
