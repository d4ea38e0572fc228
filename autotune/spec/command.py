"""SpecConfig -> llama-server argv: the one place where llama-server flags are spelled.

The server engine launches exactly this argv (plus where to listen) and `autotune best` prints it,
so what was measured is what the user runs.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Sequence

from autotune.llamacpp.capabilities import spec_types_on_by_default
from autotune.spec.config import SpecConfig
from autotune.spec.default import runs_by_default
from autotune.spec.runtime_flags import COMMAND_DEFAULTS, runtime_argv
from autotune.spec.sampling import GREEDY, Sampling
from autotune.spec.types import SPEC_TYPE_PARAMS, spec_members

DEFAULT_SERVER_BINARY = "llama-server"


def server_argv(
    config: SpecConfig,
    *,
    context_size: int,
    base_flags: Sequence[str] = (),
    binary: str = DEFAULT_SERVER_BINARY,
    threads: int | None = None,
    sampling: Sampling = GREEDY,
    parallel: int = 1,
    spec_types_on: Sequence[str] | None = None,
) -> list[str]:
    """The llama-server command line that runs `config`.

    `parallel` slots (`-np N`, one per concurrent stream) share `-c`, which llama-server splits
    across them, so `-c` is `context_size` (per slot) times N. The searched runtime flags of
    `config.runtime` are written where they differ from llama-server's defaults (a searched `-fa` or
    `-ngld` replaces autotune's own `on`/`all`, and `auto`, llama-server's default, drops the flag).

    One slot (`-np 1`: the whole context for one stream, as measured), every layer on the GPU
    (`-ngl all`, ignored by a CPU build), flash attention on; `-t` only when the user chose a
    thread count (otherwise both engines use llama-server's default); the sampling settings that
    differ from llama-server's defaults (`--temp 0` for a greedy study); `base_flags` come from the
    search-space file. Only parameters the configuration sets are written, the rest keep llama.cpp's
    defaults.

    `spec_types_on`: the spec types the binary runs with no speculative flag (None: read from its
    `--help`). Where some are (llama.cpp PR #28391), those `config` does not run are turned off with
    `--no-spec-type`, so the baseline runs without speculation, and a configuration that is exactly the
    binary's default carries no speculative flag.
    """
    runtime = {**COMMAND_DEFAULTS, **config.runtime}
    argv = [binary, "-m", str(config.target), "-c", str(context_size * parallel), "-np", str(parallel), "-ngl", "all"]
    argv += [] if runtime["flash_attn"] == "auto" else ["-fa", str(runtime["flash_attn"])]
    if threads:
        argv += ["-t", str(threads)]
    argv += runtime_argv(config.runtime, has_draft=config.draft is not None, cli_threads=threads)
    argv += sampling.server_flags()
    argv += list(base_flags)
    on_by_default = spec_types_on_by_default(binary) if spec_types_on is None else tuple(spec_types_on)
    turned_off = [t for t in on_by_default if t not in spec_members(config.spec_type)]
    argv += ["--no-spec-type", ",".join(turned_off)] if turned_off else []
    if config.is_baseline or runs_by_default(config, on_by_default):
        return argv
    argv += ["--spec-type", config.spec_type]
    if config.draft is not None:
        argv += ["-md", str(config.draft)]
        argv += [] if runtime["draft_ngl"] == "auto" else ["-ngld", str(runtime["draft_ngl"])]
    known = SPEC_TYPE_PARAMS[config.spec_type]
    for name in sorted(config.params):
        param, value = known[name], config.value(name)
        if param.requires and not config.value(param.requires):
            continue
        if param.kind is bool:
            argv += [param.flag] if value else []
        elif param.kind is str:
            argv += [param.flag, str(value)]
        else:
            argv += [param.flag, _format_value(value)]
    return argv


@dataclass(frozen=True)
class ServerCommand:
    """Everything besides the SpecConfig that a study's llama-server command carries; stored with the
    study so `confirm`, `best` and presets print the command that was measured."""

    context_size: int
    base_flags: tuple[str, ...] = ()
    binary: str = DEFAULT_SERVER_BINARY  # argv[0] as printed: a bare name only where PATH finds that binary
    threads: int | None = None
    sampling: Sampling = field(default=GREEDY)
    parallel: int = 1  # slots: the study's --concurrency

    def argv(self, config: SpecConfig) -> list[str]:
        return server_argv(
            config,
            context_size=self.context_size,
            base_flags=self.base_flags,
            binary=self.binary,
            threads=self.threads,
            sampling=self.sampling,
            parallel=self.parallel,
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "base_flags": list(self.base_flags), "sampling": self.sampling.as_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> "ServerCommand":
        return cls(
            context_size=int(data["context_size"]),
            base_flags=tuple(data.get("base_flags", ())),
            binary=data.get("binary", DEFAULT_SERVER_BINARY),
            threads=data.get("threads"),
            sampling=Sampling.from_dict(data.get("sampling")),
            parallel=int(data.get("parallel", 1)),
        )


def hub_argv(argv: Sequence[str], *, repo: str, filename: str, draft: str | None = None) -> list[str]:
    """`argv` with its model files named on the Hugging Face Hub instead of by local path, to run on a
    machine without them: `-m PATH` becomes `-hf REPO -hff FILE --no-mmproj` (-hf would also fetch a
    multimodal projector the measured command never loaded), `-md PATH` becomes
    `-hfd ORG/REPO:QUANT` (`draft`): with the command's draft `--spec-type`, llama-server takes that
    type's file of QUANT in the repo (`dflash-…-QUANT.gguf`), or for draft-simple the repo's model of QUANT."""
    hub, words = [], iter(argv)
    for word in words:
        if word == "-m":
            next(words)
            hub += ["-hf", repo, "-hff", filename, "--no-mmproj"]
        elif word == "-md":
            next(words)
            if draft is None:
                raise ValueError("the command has a draft model: name it on the hub (draft)")
            hub += ["-hfd", draft]
        else:
            hub.append(word)
    return hub


def _format_value(value: int | float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def format_command(argv: Sequence[str]) -> str:
    """The argv as one shell-quoted line a user can paste."""
    return shlex.join(argv)
