"""Commands about model files: `models` lists what is there and what can run; `quantize` writes a quant."""

from __future__ import annotations

import json
from pathlib import Path

import click

from autotune.cli.options import (
    draft_hf_option,
    hf_option,
    hub_model_name,
    model_option,
    models_dir_option,
    server_bin_option,
    space_option,
)
from autotune.settings import default_models_dir


@click.command()
@click.option("--model", "-m", help="Only this model (default: every known model).")
@models_dir_option
@server_bin_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@hf_option
@draft_hf_option
@click.option("--offline", is_flag=True, help="With --hf: download nothing; list what the hub cache holds.")
def models(model, models_dir, server_bin, as_json, hf, draft_hf, offline):
    """List known models, their files (GGUF arch and quant), runnable combinations and why others are not.

    With --hf ORG/REPO[:QUANT], the repo's targets and drafts, found by their names as llama-server
    finds them, are downloaded into the hub cache and their GGUF headers checked.

    \b
    Example:
        autotune models --json
        autotune models --hf ggml-org/Qwen3-8B-GGUF:Q8_0
    """
    from autotune.errors import ServerBinaryError
    from autotune.llamacpp.capabilities import read_capabilities
    from autotune.llamacpp.server_binary import resolve_server_binary
    from autotune.models.inventory import model_inventory
    from autotune.spec.space import known_models, load_model_space

    try:
        server = read_capabilities(resolve_server_binary(server_bin))
    except ServerBinaryError:
        server = None
    if hf is not None or draft_hf is not None:
        from autotune.models.hub import offline_mode
        from autotune.models.hub_names import HubRef
        from autotune.models.hub_space import hub_space

        spaces = [
            hub_space(
                HubRef.parse(hf),
                draft_ref=HubRef.parse(draft_hf, "--draft-hf") if draft_hf else None,
                name=hub_model_name(model, hf, draft_hf),
                offline=offline or offline_mode(),
                note=lambda line: click.echo(f"autotune: {line}", err=True),
            )
        ]
    else:
        spaces = [load_model_space(name) for name in ([model] if model else known_models())]
    reports = [model_inventory(space, models_dir or default_models_dir(), server) for space in spaces]
    if as_json:
        click.echo(json.dumps(reports, indent=2))
        return
    for report in reports:
        click.echo(f"{report['model']}: {report['description']}")
        for row in report["files"]:
            click.echo(
                f"  file     {Path(row['path']).name} ({row['architecture']}, {row['quant']}; {', '.join(row['roles'])})"
            )
        for pattern in report["missing"]:
            click.echo(f"  missing  {pattern}")
        for row in report["runnable"]:
            pair = row["target"] + (f" + {row['draft']}" if row["draft"] else "")
            click.echo(f"  runs     {row['spec_type']}: {pair}")
        for row in report["refused"]:
            click.echo(f"  refused  {row['spec_type']}: {row['target']} + {row['draft']}: {row['reason']}")
        for spec_type, engines in report["engines"].items():
            runs = [name for name, verdict in engines.items() if verdict == "runs"]
            why = "; ".join(f"{name}: {verdict}" for name, verdict in engines.items() if verdict != "runs")
            shown = f"{' and '.join(f'--engine {name}' for name in runs) or 'no engine'}" + (f" ({why})" if why else "")
            click.echo(f"  engines  {spec_type}: {shown}")
        for note in report["notes"]:
            click.echo(f"  note     {note}")


@click.command()
@model_option
@click.option("--quant", required=True, help="Quantization to write, e.g. Q4_0, Q2_K, Q8_0, Q4_K_M.")
@click.option(
    "--source",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File to quantize (default: the most precise target found).",
)
@models_dir_option
@space_option
@click.option("--threads", type=click.IntRange(min=1), help="CPU threads (default: every core this process may use).")
def quantize(model, quant, source, models_dir, space_file, threads):
    """Write a missing quantization of MODEL into the models dir through llama.cpp's quantizer.

    The file is named by the search space's pattern, so the next study finds it (for the demo, a
    Q4_0 or Q2_K copy of Gemma 3 270M becomes a cheaper draft).

    \b
    Example:
        autotune quantize --model gemma3-270m --quant Q4_0
    """
    from autotune.models.quantize import plan_quantization, quantize_file
    from autotune.spec.space import load_model_space

    plan = plan_quantization(load_model_space(model, space_file), models_dir or default_models_dir(), quant, source)
    note = (
        f" (requantizing from {plan.source_quant}: expect more quality loss than from F16/BF16)"
        if plan.requantizes
        else ""
    )
    click.echo(f"quantizing {plan.source.name} ({plan.source_quant}) to {plan.quant}{note}", err=True)
    with click.progressbar(length=1000, label=plan.destination.name, file=click.get_text_stream("stderr")) as bar:
        done = [0]

        def on_progress(fraction: float) -> None:
            step = int(fraction * 1000) - done[0]
            if step > 0:
                bar.update(step)
                done[0] += step

        quantize_file(plan, threads=threads, on_progress=on_progress)
    click.echo(str(plan.destination))
