"""Measurement engines: each runs a SpecConfig over a PromptMix with real llama.cpp."""

from autotune.engines.base import Engine, ProgressCallback

ENGINE_NAMES = ("python",)


def create_engine(name: str, **options) -> Engine:
    """The engine called `name` (`python`: in-process through llama-cpp-python)."""
    if name == "python":
        from autotune.engines.python import PythonEngine

        return PythonEngine(**options)
    raise ValueError(f"unknown engine {name!r}")


__all__ = ["ENGINE_NAMES", "Engine", "ProgressCallback", "create_engine"]
