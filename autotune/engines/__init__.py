"""Measurement engines: each runs a SpecConfig over a PromptMix with real llama.cpp."""

from autotune.engines.base import Engine, ProgressCallback

ENGINE_NAMES = ("python", "server")


def create_engine(
    name: str,
    *,
    context_size: int,
    threads: int | None = None,
    server_bin: str | None = None,
    base_flags: tuple[str, ...] = (),
) -> Engine:
    """`python`: in-process through llama-cpp-python; `server`: a real llama-server per measurement."""
    if name == "python":
        from autotune.engines.python import PythonEngine

        return PythonEngine(context_size=context_size, threads=threads)
    if name == "server":
        from autotune.engines.server import ServerEngine

        return ServerEngine(context_size=context_size, threads=threads, binary=server_bin, base_flags=base_flags)
    raise ValueError(f"unknown engine {name!r}")


__all__ = ["ENGINE_NAMES", "Engine", "ProgressCallback", "create_engine"]
