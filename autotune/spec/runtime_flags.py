"""The llama-server runtime flags a search space's `[runtime]` table may search, jointly with the
speculative parameters: threads, batch sizes, KV cache types of target and draft, draft offload,
flash attention and device sampling.

Each is a `RuntimeParam`: its name in the file (and as an Optuna parameter), the flag llama-server
spells, llama-server's own default (the printed command carries a flag only where the value differs
from it), whether the in-process engine applies it (the others are refused for that engine), and
whether it only means something with a draft model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from autotune.llamacpp.runtime import CACHE_TYPES, FLASH_ATTN_VALUES, server_default_threads
from autotune.spec.params import SpecParam

#: -ngld takes a layer count or one of these
DRAFT_NGL_WORDS = ("auto", "all")


@dataclass(frozen=True)
class RuntimeParam(SpecParam):
    """One runtime flag of llama-server. `default` is llama-server's; `negative` spells a switch that
    is on by default when turned off; `python` says whether the in-process engine applies it."""

    spelling: str = ""
    negative: str | None = None
    python: bool = True
    draft_only: bool = False

    @property
    def flag(self) -> str:
        return self.spelling


def _param(name: str, kind: type, default, spelling: str, **kwargs) -> RuntimeParam:
    return RuntimeParam(name, kind, default, spelling=spelling, **kwargs)


RUNTIME_PARAMS: dict[str, RuntimeParam] = {
    p.name: p
    for p in (
        _param("threads", int, 0, "-t"),  # 0: llama-server's default, the physical cores (server_default_threads)
        _param("threads_batch", int, 0, "-tb"),  # 0: the same as -t
        _param("batch_size", int, 2048, "-b"),
        _param("ubatch_size", int, 512, "-ub"),
        _param("flash_attn", str, "auto", "-fa", choices=FLASH_ATTN_VALUES),
        _param("cache_type_k", str, "f16", "-ctk", choices=CACHE_TYPES),
        _param("cache_type_v", str, "f16", "-ctv", choices=CACHE_TYPES),
        _param("draft_cache_type_k", str, "f16", "-ctkd", choices=CACHE_TYPES, draft_only=True),
        _param("draft_cache_type_v", str, "f16", "-ctvd", choices=CACHE_TYPES, draft_only=True),
        _param("draft_ngl", str, "auto", "-ngld", python=False, draft_only=True),
        _param("backend_sampling", bool, False, "-bs", python=False),
        _param(
            "draft_backend_sampling",
            bool,
            True,
            "--spec-draft-backend-sampling",
            negative="--no-spec-draft-backend-sampling",
            python=False,
            draft_only=True,
        ),
    )
}

#: What autotune's printed command sets even when nothing is searched (a value searched replaces it).
COMMAND_DEFAULTS = {"flash_attn": "on", "draft_ngl": "all"}


def runtime_argv(
    runtime: Mapping[str, int | str | bool], *, has_draft: bool, cli_threads: int | None = None
) -> list[str]:
    """The flags that set `runtime`, leaving out every value equal to llama-server's default (-fa and
    -ngld are written by `server_argv` itself, which always sets them). `cli_threads` is the
    --threads option, which already wrote `-t`."""
    argv: list[str] = []
    threads = int(runtime.get("threads") or cli_threads or server_default_threads())
    for name, value in runtime.items():
        param = RUNTIME_PARAMS.get(name)
        if param is None:
            raise ValueError(f"unknown runtime parameter {name!r}")
        if name in COMMAND_DEFAULTS or (param.draft_only and not has_draft):
            continue
        if name == "threads":
            if value and int(value) != server_default_threads():
                argv += ["-t", str(value)]
            continue
        if name == "threads_batch":
            if value and int(value) != threads:
                argv += ["-tb", str(value)]
            continue
        if param.kind is bool:
            if bool(value) != bool(param.default):
                argv.append(param.spelling if value else (param.negative or ""))
            continue
        if str(value) != str(param.default):
            argv += [param.spelling, str(value)]
    return [a for a in argv if a]


def describe_runtime(runtime: Mapping[str, int | str | bool]) -> str:
    """`-t 2 -ub 256` style label of the searched runtime values (all of them, defaults included)."""
    parts = []
    for name in sorted(runtime):
        param = RUNTIME_PARAMS[name]
        value = runtime[name]
        if param.kind is bool:
            parts.append(param.spelling if value else (param.negative or f"no{param.spelling}"))
        else:
            parts.append(f"{param.spelling} {value}")
    return " ".join(parts)
