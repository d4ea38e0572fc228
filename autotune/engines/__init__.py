"""Measurement engines: each runs a SpecConfig over a PromptMix with real llama.cpp."""

from autotune.engines.base import Engine, ProgressCallback
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

        return ServerEngine(context_size=context_size, threads=threads, binary=server_bin, base_flags=base_flags,
                            sampling=sampling, concurrency=concurrency)
    raise ValueError(f"unknown engine {name!r}")


__all__ = ["DEFAULT_ENGINE", "ENGINE_NAMES", "Engine", "ProgressCallback", "create_engine"]
