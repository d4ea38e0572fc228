"""`nightly --all`: re-tune every preset of this machine whose hub source moved.

A preset records the hub revision of each file it ran (`file_revisions`: repo and commit). Its source
moved when a repo's current commit is another one and holds other files: a new `.src_sha` for a
ggml-org/convert repo, any new commit for a repo without one (autotune.models.releases.sources_moved).
Each such preset is re-tuned through the normal nightly path (autotune.presets.nightly.run_nightly) with
the options of the command line, its model and load taken from the preset: a bundled model by name, a
`--hf` model from the repo its target came from. Each re-tuning claims its preset's lease without
waiting: in a fleet sharing one database, a preset another worker is re-tuning is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from autotune.errors import HubSourceError, LeaseHeld
from autotune.hardware import hardware_key
from autotune.models.hub import HubUnreachable, offline_mode, repo_info
from autotune.models.hub_names import HubRef, quant_tag
from autotune.models.releases import sources_moved
from autotune.presets.nightly import NightlyOutcome, run_nightly
from autotune.race.race import RaceBudget
from autotune.search.inputs import SearchOptions, SearchReporter
from autotune.search.plan import SearchBudget
from autotune.spec.space import HubSource, known_models
from autotune.study.records import config_from_attrs
from storage import resolve_storage_url
from storage.presets import Preset, PresetStore


@dataclass(frozen=True)
class MovedPreset:
    """A preset and the repos whose current revision moved since it was made (`repo@old -> new`)."""

    preset: Preset
    moved: tuple[str, ...]

    @property
    def label(self) -> str:
        level = f" (--concurrency {self.preset.concurrency})" if self.preset.concurrency > 1 else ""
        return f"{self.preset.model}{level}"


def moved_presets(store: PresetStore, *, offline: bool, note: Callable[[str], None]) -> list[MovedPreset]:
    """This machine's presets whose hub source moved. A repo the hub cannot be asked about (offline, out of
    reach, gone) moves nothing: `note` hears it once."""
    hardware = hardware_key()
    commits: dict[str, str | None] = {}
    found = []
    for preset in store.list():
        if preset.hardware != hardware or not preset.file_revisions:
            continue
        recorded = {rev["repo"]: rev["revision"] for rev in preset.file_revisions.values()}
        moved = []
        for repo, old in recorded.items():
            if repo not in commits:
                commits[repo] = _current_commit(repo, offline=offline, note=note)
            new = commits[repo]
            if new is not None and sources_moved(repo, old, new):
                moved.append(f"{repo}@{old[:7]} -> {new[:7]}")
        if moved:
            found.append(MovedPreset(preset, tuple(moved)))
    return found


def preset_options(template: SearchOptions, preset: Preset) -> SearchOptions:
    """The nightly options that re-tune `preset`: `template`'s, for its model and load. A model with no
    bundled search space was tuned from a hub repo (`--hf`): the repo its target came from (with the
    target's quant where the model's name says so), and a draft from another repo as `--draft-hf`."""
    settings = replace(template.settings, model=preset.model, concurrency=preset.concurrency)
    options = replace(template, settings=settings, levels=(preset.concurrency,))
    if preset.model in known_models():
        return options
    config = config_from_attrs(preset.params)
    target = preset.file_revisions.get(config.target.name)
    if target is None:
        raise HubSourceError(
            f"the preset of {preset.model} names no bundled model and its target "
            f"{config.target.name} came from no hub repo: re-tune it with `autotune nightly --model`"
        )
    ref = HubRef(target["repo"])
    with_quant = HubRef(target["repo"], quant_tag(config.target.name))
    draft = preset.file_revisions.get(config.draft.name) if config.draft is not None else None
    draft_repo = draft["repo"] if draft is not None and draft["repo"] != ref.repo else None
    return replace(options, hf=str(with_quant if with_quant.model_name == preset.model else ref), draft_hf=draft_repo)


def _current_commit(repo: str, *, offline: bool, note: Callable[[str], None]) -> str | None:
    try:
        return repo_info(HubSource(repo), offline=offline).sha
    except (HubUnreachable, HubSourceError) as exc:
        note(f"{repo}: not asked for a new revision ({exc}); its presets are kept")
        return None


def run_nightly_all(
    template: SearchOptions,
    *,
    top: int,
    race_budget: RaceBudget,
    server_bin: str | None,
    reporter: SearchReporter,
    budget: SearchBudget | None = None,
) -> list[tuple[MovedPreset, NightlyOutcome]]:
    """Re-tune each preset of this machine whose hub source moved, one after the other, through
    `run_nightly` with `template`'s options; returns each with its outcome (none moved: an empty list).
    `budget` caps each preset's night on its own (None: the space's default of each)."""
    with PresetStore(resolve_storage_url(template.storage_url)) as store:
        moved = moved_presets(store, offline=template.offline or offline_mode(), note=reporter.note)
    outcomes = []
    for entry in moved:
        reporter.note(f"{entry.label}: the hub source moved ({'; '.join(entry.moved)}): re-tuning")
        try:  # a fleet: a preset whose lease another worker holds is that worker's to re-tune
            outcome = run_nightly(
                replace(preset_options(template, entry.preset), wait=False),
                top=top,
                race_budget=race_budget,
                budget=budget,
                server_bin=server_bin,
                reporter=reporter,
            )
        except LeaseHeld as held:
            reporter.note(f"{entry.label}: skipped, {held}")
            continue
        outcomes.append((entry, outcome))
    return outcomes
