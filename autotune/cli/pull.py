"""`autotune pull`: download the model files a search space names on the Hugging Face Hub."""

from __future__ import annotations

import click

from autotune.cli.options import model_option, space_option


@click.command()
@model_option
@space_option
def pull(model, space_file):
    """Download the files MODEL's search space names on the Hugging Face Hub that are not in the hub cache.

    A target or draft table names its source with `hf = "org/repo"` (and optionally a pinned
    `revision`); files go to huggingface_hub's cache (HF_HUB_CACHE), never half-written into the
    models dir. Prints each file's path and revision. `autotune nightly` also fetches new revisions.

    \b
    Example:
        autotune pull --model qwen3-8b --space my-qwen3-8b.toml
    """
    from autotune.models.hub import file_revision, hub_files
    from autotune.models.hub import pull as pull_files
    from autotune.spec.space import load_model_space

    space = load_model_space(model, space_file)
    if not hub_files(space):
        click.echo(f'{model}: the search space names no hub source (hf = "org/repo"); nothing to pull', err=True)
        return
    result = pull_files(
        space, latest=False, on_file=lambda f, why: click.echo(f"autotune: downloading {f.label} ({why})", err=True)
    )
    for hub_file, path, downloaded in result.files:
        revision = file_revision(path) or {}
        state = "downloaded" if downloaded else "present"
        click.echo(f"{path}\t{hub_file.source.repo}@{revision.get('revision', '?')}\t{state}")
