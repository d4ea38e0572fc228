"""Whether a printed command runs on the llama-server it names.

autotune prints a command only with options that binary's `--help` lists, and a spec type it runs: a
configuration measured in-process (PCTree drafting trees, say) may need a fork's flags that a mainline
llama-server refuses at start-up. Where no llama-server resolves, the command is for mainline llama.cpp,
so only the flags known to come from a fork (FORK_FLAGS) are held against it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.llamacpp.capabilities import PCTREE_FLAGS, ServerCapabilities, read_capabilities
from autotune.llamacpp.server_binary import command_binary, resolve_server_binary

#: Flags only a fork of llama.cpp has, and which fork.
FORK_FLAGS = {flag: "the PCTree fork of llama.cpp" for flag in PCTREE_FLAGS}

_OPTION = re.compile(r"^--?[A-Za-z][\w-]*$")


@dataclass(frozen=True)
class CommandCheck:
    """What the llama-server a printed command names can run (`capabilities` None: none resolves here)."""

    binary: str
    capabilities: ServerCapabilities | None = None

    def lacking(self, argv: Sequence[str]) -> tuple[str, ...]:
        """The options of `argv` (and a `--spec-type` value) that binary would refuse, in argv order."""
        words = list(argv[1:])
        options = [w for w in words if _OPTION.match(w)]
        if self.capabilities is None:
            return tuple(dict.fromkeys(o for o in options if o in FORK_FLAGS))
        lacking = [o for o in options if not self.capabilities.has_flag(o)]
        if "--spec-type" in words[:-1]:
            spec_type = words[words.index("--spec-type") + 1]
            if not self.capabilities.runs(spec_type):
                lacking.append(f"--spec-type {spec_type}")
        return tuple(dict.fromkeys(lacking))

    def runs(self, argv: Sequence[str]) -> bool:
        return not self.lacking(argv)

    def needs(self, lacking: Sequence[str]) -> str:
        """`needs X, Y (the PCTree fork of llama.cpp), which <this binary> lacks`."""
        forks = sorted({FORK_FLAGS[flag] for flag in lacking if flag in FORK_FLAGS})
        which = f" ({' and '.join(forks)})" if forks else ""
        return f"needs {', '.join(lacking)}{which}, which {self.label} lacks"

    @property
    def label(self) -> str:
        if self.capabilities is None:
            return "mainline llama.cpp (no llama-server resolves here)"
        return f"this llama-server ({self.capabilities.build.removeprefix('llama-server ')})"


def command_check(server_bin: str | os.PathLike | None = None) -> CommandCheck:
    """The check for the llama-server a printed command names (`--server-bin`, else the one that resolves)."""
    binary, missing = command_binary(server_bin)
    if missing:
        return CommandCheck(binary)
    return CommandCheck(binary, read_capabilities(resolve_server_binary(server_bin)))
