"""What a study may sample: the target files, and the runnable (target, draft) pairs of each draft type.

Pairs llama.cpp would refuse (or silently run without speculation) are left out here with the
reason, so an incompatible pair never reaches a trial.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autotune.gguf.compat import check_pair
from autotune.gguf.info import read_gguf_info
from autotune.models.files import ModelFiles
from autotune.models.hub import file_revision
from autotune.spec.types import draft_member


@dataclass(frozen=True)
class RefusedPair:
    spec_type: str
    target: Path
    draft: Path
    reason: str

    def describe(self) -> str:
        return f"{self.spec_type}: {self.target.name} + {self.draft.name}: {self.reason}"


@dataclass(frozen=True)
class Candidates:
    targets: tuple[Path, ...]
    pairs: dict[str, tuple[tuple[Path, Path], ...]] = field(default_factory=dict)
    refused: tuple[RefusedPair, ...] = ()

    def spec_types(self, wanted: list[str]) -> list[str]:
        """The spec types of `wanted` that have something to run (a draft type needs a runnable pair)."""
        return [t for t in wanted if t not in self.pairs or self.pairs[t]]

    def fingerprint(self) -> list[str]:
        """File names the study samples from, a hub file's with its commit (`name@commit`): a study
        refuses to resume when they change, as when a new release of a hub file was pulled."""
        names = [_with_revision(t) for t in self.targets]
        for spec_type, pairs in sorted(self.pairs.items()):
            names += [f"{spec_type}:{_with_revision(p[0])} + {_with_revision(p[1])}" for p in pairs]
        return names


def _with_revision(path: Path) -> str:
    revision = file_revision(path)
    return path.name if revision is None else f"{path.name}@{revision['revision']}"


def pair_label(pair: tuple[Path, Path]) -> str:
    return f"{pair[0].name} + {pair[1].name}"


def find_candidates(files: ModelFiles) -> Candidates:
    pairs: dict[str, tuple[tuple[Path, Path], ...]] = {}
    refused: list[RefusedPair] = []
    for spec_type, drafts in files.drafts.items():
        runnable = []
        for target in files.targets:
            for draft in drafts:
                # a combination's draft is its draft member's (`ngram-mod,draft-simple`: draft-simple's checks)
                verdict = check_pair(
                    draft_member(spec_type) or spec_type, read_gguf_info(target), read_gguf_info(draft)
                )
                if verdict.runnable:
                    runnable.append((target, draft))
                else:
                    refused.append(RefusedPair(spec_type, target, draft, verdict.reason))
        pairs[spec_type] = tuple(runnable)
    return Candidates(files.targets, pairs, tuple(refused))
