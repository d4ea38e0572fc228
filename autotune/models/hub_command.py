"""`best --hf-command`: the printed command with its model files named on the hub (`-hf`, `-hfd`) instead
of local paths, so it runs on a machine that has none of them (autotune.spec.command.hub_argv spells it).

A file is a hub file when it lies in a hub cache snapshot (its repo and commit are read from the path).
The draft is named as `-hfd ORG/REPO:QUANT`, which llama-server resolves by its naming rules
(autotune.models.hub_names): the file must carry its quant in its name, and a sidecar's prefix must be the
spec type's. The command uses only flags this llama-server lists, as the printed command does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from autotune.errors import UsageError
from autotune.llamacpp.runnable import CommandCheck
from autotune.models.hub import file_revision
from autotune.models.hub_names import quant_tag, sidecar_type
from autotune.spec.command import hub_argv
from autotune.spec.config import SpecConfig
from autotune.spec.types import draft_member


@dataclass(frozen=True)
class HubCommand:
    """The command with hub names, and the revisions the measured files came from."""

    argv: list[str]
    measured_at: tuple[str, ...]  # `ggml-org/Qwen3-8B-GGUF@abc1234`, each repo once

    def note(self) -> str:
        """The line printed under the command: -hf fetches a repo's current files, not the measured ones."""
        return f"# measured with the files of {', '.join(self.measured_at)}; -hf downloads each repo's current revision"


def hub_command(argv: Sequence[str], config: SpecConfig, check: CommandCheck) -> HubCommand:
    """`argv` (which runs `config`) with hub names; UsageError where a file did not come from the hub, the
    draft's name does not let `-hfd` find it, or the llama-server of `check` lacks a flag."""
    target = _hub_file(config.target, "target")
    draft_ref = None
    revisions = [f"{target['repo']}@{target['revision'][:7]}"]
    if config.draft is not None:
        draft = _hub_file(config.draft, "draft")
        draft_ref = f"{draft['repo']}:{_draft_quant(config.draft, draft_member(config.spec_type) or config.spec_type)}"
        revisions.append(f"{draft['repo']}@{draft['revision'][:7]}")
    hub = hub_argv(argv, repo=target["repo"], filename=config.target.name, draft=draft_ref)
    lacking = check.lacking(hub)
    if lacking:
        raise UsageError(f"the command with hub names {check.needs(lacking)}: print it without --hf-command")
    return HubCommand(hub, tuple(dict.fromkeys(revisions)))


def _hub_file(path: Path, role: str) -> dict[str, str]:
    revision = file_revision(path)
    if revision is None:
        raise UsageError(
            f"the {role} {path} is a local file, not one from the hub cache: --hf-command names hub "
            'files only (tune with --hf ORG/REPO or a search space with hf = "org/repo")'
        )
    return revision


def _draft_quant(draft: Path, spec_type: str) -> str:
    """The QUANT of `-hfd ORG/REPO:QUANT` that makes llama-server take exactly `draft`."""
    quant = quant_tag(draft.name)
    kind = sidecar_type(draft.name)
    if quant is None or f"-{quant}." not in draft.name.upper() or kind not in (None, spec_type):
        raise UsageError(
            f"-hfd cannot name {draft.name} for {spec_type}: llama-server finds a draft by its type's "
            "prefix (dspark-, dflash-, mtp-, eagle3-) and a -QUANT.gguf ending"
        )
    return quant
