"""The llama-server runtime settings around speculation (threads, batch sizes, flash attention, KV
cache types) as the in-process engine applies them, with llama-server's defaults.

The in-process engine must do the work llama-server does per token, so it starts from llama-server's
defaults (common/common.h): `-t` = the number of physical cores (common_cpu_get_num_math, which
counts distinct `thread_siblings` sets), `-b 2048`, `-ub 512`. A search space's `base_flags` may set
these; a flag the in-process engine cannot apply is refused as bad input rather than silently
measured without it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from autotune.errors import UsageError

SERVER_BATCH_SIZE = 2048
SERVER_UBATCH_SIZE = 512
FLASH_ATTN_VALUES = ("on", "off", "auto")
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def server_default_threads() -> int:
    """llama-server's default `-t` on this machine: its count of physical cores (distinct
    /sys/.../topology/thread_siblings), else hardware_concurrency halved above 4, as llama.cpp does."""
    siblings = set()
    cpu = 0
    while True:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings")
        try:
            siblings.add(path.read_text().strip())
        except OSError:
            break
        cpu += 1
    if siblings:
        return len(siblings)
    n = os.cpu_count() or 4
    return n if n <= 4 else n // 2


@dataclass(frozen=True)
class Runtime:
    """Runtime settings of one measurement; None means llama-server's default."""

    threads: int | None = None
    threads_batch: int | None = None
    batch_size: int = SERVER_BATCH_SIZE
    ubatch_size: int = SERVER_UBATCH_SIZE
    flash_attn: str = "on"  # the printed command carries `-fa on`
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    draft_cache_type_k: str = "f16"  # -ctkd
    draft_cache_type_v: str = "f16"  # -ctvd

    def with_values(self, values: dict) -> "Runtime":
        """These settings with a configuration's searched runtime values (autotune.spec.runtime_flags) applied;
        UsageError for one the in-process engine cannot apply. A threads value of 0 means the default."""
        applied = {}
        for name, value in values.items():
            if name not in _APPLIED:
                raise UsageError(f"the python engine cannot apply the runtime setting {name!r}; use --engine server")
            applied[name] = (value or None) if name in ("threads", "threads_batch") else value
        return replace(self, **applied)

    def for_draft(self) -> "Runtime":
        """The settings of a draft model's context: the draft's KV cache types (llama-server's -ctkd/-ctvd)."""
        return replace(self, cache_type_k=self.draft_cache_type_k, cache_type_v=self.draft_cache_type_v)

    @property
    def n_threads(self) -> int:
        return self.threads or server_default_threads()

    @property
    def n_threads_batch(self) -> int:
        return self.threads_batch or self.n_threads


# flag spellings -> (Runtime field, parser)
_FLAGS = {
    ("-t", "--threads"): ("threads", int),
    ("-tb", "--threads-batch"): ("threads_batch", int),
    ("-b", "--batch-size"): ("batch_size", int),
    ("-ub", "--ubatch-size"): ("ubatch_size", int),
    ("-fa", "--flash-attn"): ("flash_attn", str),
    ("-ctk", "--cache-type-k"): ("cache_type_k", str),
    ("-ctv", "--cache-type-v"): ("cache_type_v", str),
}
#: Runtime fields a search space's [runtime] table may set for this engine
_APPLIED = frozenset(
    {
        "threads",
        "threads_batch",
        "batch_size",
        "ubatch_size",
        "flash_attn",
        "cache_type_k",
        "cache_type_v",
        "draft_cache_type_k",
        "draft_cache_type_v",
    }
)
_CHOICES = {"flash_attn": FLASH_ATTN_VALUES, "cache_type_k": CACHE_TYPES, "cache_type_v": CACHE_TYPES}


def runtime_from_flags(flags: Sequence[str], *, threads: int | None = None, source: str = "base_flags") -> Runtime:
    """The Runtime that llama-server flags select (later flags win, as in llama-server); `threads`
    (the --threads option) wins over a `-t` in the flags. UsageError for a flag the in-process
    engine cannot apply, naming it and `source`."""
    runtime = Runtime()
    spellings = {spelling: entry for names, entry in _FLAGS.items() for spelling in names}
    items = list(flags)
    i = 0
    while i < len(items):
        flag = items[i]
        name, value = flag.split("=", 1) if flag.startswith("--") and "=" in flag else (flag, None)
        entry = spellings.get(name)
        if entry is None:
            raise UsageError(
                f"{source}: the python engine cannot apply {flag!r} (it applies "
                f"{', '.join(n[1] for n in _FLAGS)}); use --engine server or remove the flag"
            )
        if value is None:
            if i + 1 >= len(items):
                raise UsageError(f"{source}: {flag} needs a value")
            value = items[i + 1]
            i += 1
        i += 1
        field, parse = entry
        try:
            parsed = parse(value)
        except ValueError:
            raise UsageError(f"{source}: {flag} {value!r}: expected a whole number") from None
        if field in _CHOICES and parsed not in _CHOICES[field]:
            raise UsageError(f"{source}: {flag} {value!r}: expected one of {', '.join(_CHOICES[field])}")
        if parse is int and parsed <= 0:
            raise UsageError(f"{source}: {flag} {value!r}: must be positive")
        runtime = replace(runtime, **{field: parsed})
    return replace(runtime, threads=threads) if threads else runtime
