"""llama-server's rules for the files of a hub repo, read from their names alone.

`llama-server -hf org/repo[:QUANT]` (common/download.cpp, llama.cpp PRs #25811, #25989, #26458) takes as
the model a `.gguf` whose name holds none of `mmproj`, `imatrix`, `mtp-`, `eagle3-`, `dflash-` or
`dspark-`, and finds the drafts beside it by those prefixes (the "sidecars"). A file's quantization is the
last `-` or `.` separated word of its name before `.gguf` (and before `-00001-of-00003` for a split file),
upper-cased: `dflash-Qwen3.6-27B-Q8_0.gguf` is Q8_0. `-hfd org/repo:QUANT` with a draft `--spec-type`
picks that type's sidecar whose name holds `-QUANT.`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.errors import UsageError

#: the sidecar prefixes llama-server looks for, and the spec type each one's file drafts for
SIDECAR_TYPES = {"dspark-": "draft-dspark", "dflash-": "draft-dflash", "mtp-": "draft-mtp", "eagle3-": "draft-eagle3"}
#: words that make a .gguf something other than a model (llama.cpp's gguf_filename_is_model)
_NOT_A_MODEL = ("mmproj", "imatrix", *SIDECAR_TYPES)

_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class HubRef:
    """`org/repo[:QUANT]` as `-hf` takes it: a repo and, optionally, the one quantization wanted."""

    repo: str
    quant: str | None = None

    @classmethod
    def parse(cls, text: str, option: str = "--hf") -> "HubRef":
        repo, _, quant = text.strip().partition(":")
        if not _REPO.match(repo) or "--" in repo or ".." in repo or (_ and not quant):
            raise UsageError(
                f"{option} {text!r}: expected ORG/REPO or ORG/REPO:QUANT, e.g. ggml-org/Qwen3-8B-GGUF:Q8_0"
            )
        return cls(repo, quant.upper() or None)

    def __str__(self) -> str:
        return f"{self.repo}:{self.quant}" if self.quant else self.repo

    @property
    def model_name(self) -> str:
        """The study's model name: the repo's name (and the quant), lower-case: `qwen3.6-27b-gguf-q8_0`."""
        name = self.repo.split("/", 1)[1] + (f"-{self.quant}" if self.quant else "")
        return re.sub(r"[^a-z0-9._]+", "-", name.lower()).strip("-.")


def quant_tag(filename: str) -> str | None:
    """The quantization a file's name gives (llama.cpp's get_gguf_split_info), upper-cased; None without one."""
    stem = filename.rsplit("/", 1)[-1]
    if not stem.lower().endswith(".gguf"):
        return None
    stem = stem[: -len(".gguf")]
    split = _SPLIT.match(stem)
    match = _TAG.search(split.group(1) if split else stem)
    return match.group(1).upper() if match else None


def is_split_part(filename: str) -> bool:
    """A part of a split GGUF (`-00001-of-00003.gguf`)."""
    return filename.lower().endswith(".gguf") and _SPLIT.match(filename[: -len(".gguf")].rsplit("/", 1)[-1]) is not None


def sidecar_type(filename: str) -> str | None:
    """The draft spec type a file's name says it is for (`dflash-…` -> draft-dflash); None for any other file."""
    name = filename.rsplit("/", 1)[-1]
    if not name.lower().endswith(".gguf"):
        return None
    return next((spec_type for prefix, spec_type in SIDECAR_TYPES.items() if prefix in name), None)


def is_model_file(filename: str) -> bool:
    """A .gguf `-hf` may take as the model (no mmproj, imatrix or sidecar in its name)."""
    name = filename.rsplit("/", 1)[-1]
    return name.lower().endswith(".gguf") and not any(word in name for word in _NOT_A_MODEL)
