"""SpecConfig -> llama-server argv: the one place where llama-server flags are spelled.

The server engine launches exactly this argv (plus where to listen) and `autotune best` prints it,
so what was measured is what the user runs.
"""

from __future__ import annotations

import shlex
from typing import Sequence

from autotune.spec import SPEC_TYPE_PARAMS, SpecConfig

DEFAULT_SERVER_BINARY = "llama-server"


def server_argv(
    config: SpecConfig,
    *,
    context_size: int,
    base_flags: Sequence[str] = (),
    binary: str = DEFAULT_SERVER_BINARY,
    threads: int | None = None,
) -> list[str]:
    """The llama-server command line that runs `config`.

    One slot (`-np 1`: the whole context for one stream, as measured), every layer on the GPU
    (`-ngl all`, ignored by a CPU build), flash attention on; `-t` only when the user chose a
    thread count; `base_flags` come from the search-space file. Only parameters the configuration
    sets are written, the rest keep llama.cpp's defaults.
    """
    argv = [binary, "-m", str(config.target), "-c", str(context_size), "-np", "1", "-ngl", "all", "-fa", "on"]
    if threads:
        argv += ["-t", str(threads)]
    argv += list(base_flags)
    if config.is_baseline:
        return argv
    argv += ["--spec-type", config.spec_type]
    if config.draft is not None:
        argv += ["-md", str(config.draft), "-ngld", "all"]
    known = SPEC_TYPE_PARAMS[config.spec_type]
    for name in sorted(config.params):
        param, value = known[name], config.value(name)
        if param.requires and not config.value(param.requires):
            continue
        if param.kind is bool:
            argv += [param.flag] if value else []
        else:
            argv += [param.flag, _format_value(value)]
    return argv


def _format_value(value: int | float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def format_command(argv: Sequence[str]) -> str:
    """The argv as one shell-quoted line a user can paste."""
    return shlex.join(argv)
