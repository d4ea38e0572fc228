"""`--hf ORG/REPO[:QUANT] [--draft-hf ORG/REPO[:QUANT]]`: the search space of a hub repo, as
`llama-server -hf` would find its files.

The repo's file list gives the targets and the drafts by their names (autotune.models.hub_repo); one line
says what was found and how large it is, then what is not in the hub cache is downloaded (offline:
nothing is, and what the cache holds is used). Each draft's pairing is then checked from the GGUF headers
and the space inferred as for local files (autotune.models.adhoc): the spec type each draft's name
enables, the target's own MTP head, the n-gram types always, and draft-simple with the models of
`--draft-hf` (a smaller model of the same family). The space names its files by repo (`hf`), so the
search, `nightly` and the printed `-hf` command find them in the hub cache.
"""

from __future__ import annotations

from collections.abc import Callable

from autotune.errors import HubSourceError
from autotune.models.adhoc import SpaceDraft, inferred_space
from autotune.models.hub import HubFile, cached_file, fetch_missing
from autotune.models.hub_names import SIDECAR_TYPES, HubRef
from autotune.models.hub_repo import HubModel, discover, found_line, list_repo
from autotune.spec.space import HubSource, SearchSpace


def hub_space(
    ref: HubRef, *, draft_ref: HubRef | None = None, name: str | None = None, offline: bool, note: Callable[[str], None]
) -> SearchSpace:
    """The space of `ref`'s repo (and `draft_ref`'s models as draft-simple drafts), its files downloaded
    into the hub cache first unless `offline`. Raises HubSourceError for a repo without a model file of
    the wanted quantization, or with none of its targets on disk offline; ModelFileError for a draft the
    target cannot use."""
    model = discover(ref, list_repo(ref.repo, offline=offline))
    helper = discover(draft_ref, list_repo(draft_ref.repo, offline=offline), with_sidecars=False) if draft_ref else None
    files = _hub_files(model, helper)
    missing = [f for f in files if cached_file(f.source, f.filename) is None]
    note(found_line(model, helper, missing={f.filename for f in missing}))
    for line in fetch_missing(missing, offline=offline, on_start=note).notes:
        note(line)
    paths = {f: path for f in files if (path := cached_file(f.source, f.filename)) is not None}
    targets = [f for f in files if f.role == "model" and f in paths]
    if not targets:
        raise HubSourceError(
            f"none of {model.repo}'s targets ({', '.join(model.targets)}) is in the hub cache: "
            "run again without --offline (and HF_HUB_OFFLINE) to download them"
        )
    drafts = [
        SpaceDraft(paths[f], {"hf": f.source.repo, "file": f.filename}, _spec_type(f))
        for f in files
        if f.role != "model" and f in paths
    ]
    space = inferred_space(
        name or ref.model_name,
        paths[targets[0]],
        {"hf": model.repo, "target": model.target_pattern, "quants": list(model.quants)},
        drafts,
        description=f"{ref} from the hub ({len(model.targets)} target{'s' if len(model.targets) > 1 else ''}, "
        f"{len(drafts)} draft{'s' if len(drafts) != 1 else ''})",
    )
    if not space.drafts:
        note(
            f"{model.repo} has no draft ({', '.join(SIDECAR_TYPES)} file, or MTP head) and no --draft-hf was "
            "given: searching the n-gram types only"
        )
    return space


def _hub_files(model: HubModel, helper: HubModel | None) -> list[HubFile]:
    """The targets, then the drafts by name, then `--draft-hf`'s models, as hub files of their repos."""
    source = HubSource(model.repo)
    files = [HubFile("model", source, name) for name in model.targets]
    files += [HubFile(f"drafts.{spec_type}", source, name) for name, spec_type in model.drafts.items()]
    if helper is not None:
        files += [HubFile("drafts.draft-simple", HubSource(helper.repo), name) for name in helper.targets]
    return files


def _spec_type(hub_file: HubFile) -> str | None:
    """A sidecar's spec type is the one its name says (as llama-server loads it); --draft-hf's models: None
    (read from the header: a plain model drafts as draft-simple)."""
    return None if hub_file.role == "drafts.draft-simple" else hub_file.role.removeprefix("drafts.")
