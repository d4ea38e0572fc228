"""Measurement engines: each runs a SpecConfig over a PromptMix with real llama.cpp.

`base` is the interface; `python` measures in-process through llama-cpp-python (`worker` keeps it in
a process of its own, `memory` budgets the device, `sampler` and `prompt_tokens` match llama-server's
sampler chain and tokens, `drafters/` and `dflash/` draft as llama.cpp does); `server` launches a
real llama-server (`server_process`) with exactly the printed argv. `coverage` says which spec types
each engine runs. `choose_engine` is the one rule for which engine measures what.
"""

from __future__ import annotations

from typing import Callable

from autotune.engines.base import Engine, ProgressCallback
from autotune.errors import ServerBinaryError, UsageError
from autotune.llamacpp.server_binary import server_binary_available
from autotune.spec.sampling import GREEDY, Sampling

ENGINE_NAMES = ("python", "server")
DEFAULT_ENGINE = "python"


def create_engine(
    name: str,
    *,
    context_size: int,
    threads: int | None = None,
    server_bin: str | None = None,
    base_flags: tuple[str, ...] = (),
    sampling: Sampling = GREEDY,
    concurrency: int = 1,
) -> Engine:
    """`python`: through llama-cpp-python in a worker process that keeps the models loaded (a crash of
    llama.cpp fails one trial); `server`: a real llama-server per measurement, with `concurrency` slots
    and streams. The python engine measures one stream only."""
    if name == "python":
        if concurrency != 1:
            raise ValueError("the python engine measures one stream; use the server engine for concurrency")
        from autotune.engines.worker import WorkerEngine

        return WorkerEngine(context_size=context_size, threads=threads, base_flags=base_flags, sampling=sampling)
    if name == "server":
        from autotune.engines.server import ServerEngine

        return ServerEngine(
            context_size=context_size,
            threads=threads,
            binary=server_bin,
            base_flags=base_flags,
            sampling=sampling,
            concurrency=concurrency,
        )
    raise ValueError(f"unknown engine {name!r}")


def choose_engine(
    requested: str | None,
    *,
    concurrency: int = 1,
    server_bin: str | None = None,
    note: Callable[[str], None] | None = None,
) -> str:
    """The engine that measures: `requested`, or with None the arbiter (llama-server when a binary
    resolves, else in-process). Above one stream always the server engine, since the in-process engine
    runs one sequence at a time, not the server's batched slots; a switch is said through `note`, and
    no llama-server for it is bad input."""
    if concurrency < 1:
        raise UsageError(f"--concurrency {concurrency}: must be at least 1")
    if requested is None:
        requested = "server" if server_binary_available(server_bin) else "python"
    if concurrency == 1 or requested == "server":
        return requested
    if not server_binary_available(server_bin):
        raise ServerBinaryError(
            f"--concurrency {concurrency} runs on llama-server, and none resolves: "
            "pass --server-bin PATH or `pip install -e '.[server]'`"
        )
    if note is not None:
        note(f"the python engine measures one stream: --concurrency {concurrency} runs on the server engine")
    return "server"


__all__ = ["DEFAULT_ENGINE", "ENGINE_NAMES", "Engine", "ProgressCallback", "choose_engine", "create_engine"]
