"""Where a generation step's time goes in the in-process engine: inside llama.cpp's decode, in its
sampler chain, or in autotune's own host code, and how many bytes each step copies off the device.

`StepProfile` wraps, for as long as it is entered, the few libllama calls the engine's loops make
(`llama_decode`, `llama_process`, `llama_sampler_sample`, the KV cache's `llama_memory_seq_*`, and the
batch calls that mark output rows),
looked up as module attributes by the engine, so nothing in autotune changes to be measured. A decode
is followed by `llama_synchronize`, so on a GPU the device's work lands inside the decode's time
instead of in whatever reads the logits next. Bytes copied off the device per decode are counted from
the batch: logits rows (n_vocab floats each), the DSpark draft's confidence rows, and the target's
layer inputs for every token of a target batch when layer-input extraction is on.

Per step figures are over the decode phase only (first token to last), one step per target decode.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field

import llama_cpp

from autotune.engines.dflash import bindings as dfc

_KV_CALLS = ("llama_memory_seq_rm", "llama_memory_seq_cp", "llama_memory_seq_keep")


@dataclass
class Tally:
    """Accumulated over the decode phases of the generations profiled."""

    steps: int = 0  # target decodes
    wall_s: float = 0.0
    decode_s: float = 0.0  # inside llama_decode/llama_process, device work included
    sampler_s: float = 0.0  # inside llama_sampler_sample (llama-server runs the same chain per position)
    kv_s: float = 0.0  # inside llama_memory_seq_rm/cp/keep (llama-server rolls its caches back the same way)
    logits_bytes: int = 0
    other_bytes: int = 0  # layer inputs and confidence rows

    @property
    def host_ms_per_step(self) -> float:
        return 1000 * (self.wall_s - self.decode_s) / self.steps if self.steps else 0.0

    @property
    def sampler_ms_per_step(self) -> float:
        return 1000 * self.sampler_s / self.steps if self.steps else 0.0

    @property
    def kv_ms_per_step(self) -> float:
        return 1000 * self.kv_s / self.steps if self.steps else 0.0

    @property
    def own_ms_per_step(self) -> float:
        """Host time that is autotune's own (Python, numpy): not in llama.cpp's decode, sampler or KV cache."""
        return self.host_ms_per_step - self.sampler_ms_per_step - self.kv_ms_per_step

    @property
    def host_share(self) -> float:
        return (self.wall_s - self.decode_s) / self.wall_s if self.wall_s else 0.0

    def bytes_per_step(self) -> tuple[float, float]:
        return (self.logits_bytes / self.steps, self.other_bytes / self.steps) if self.steps else (0.0, 0.0)


def address(ptr) -> int:
    """A ctypes pointer's address (0 for NULL)."""
    return ctypes.cast(ptr, ctypes.c_void_p).value or 0


@dataclass
class StepProfile:
    """Counts calls into llama.cpp while entered; `tally()` gives one generation's decode phase."""

    n_vocab: int
    target_ctx: int = 0  # address of the target context: its decodes are the steps
    feature_width: int = 0  # floats of layer inputs per target token (0: extraction off)
    conf_width: int = 0  # floats per confidence row of the draft (0: none read)
    events: list[tuple[float, float, str, int, int]] = field(default_factory=list)  # start, seconds, kind, ctx, rows
    _saved: dict = field(default_factory=dict)
    _saved_kv: dict = field(default_factory=dict)
    _ext_outputs: int = 0

    def __enter__(self) -> "StepProfile":
        decode, process, sample = llama_cpp.llama_decode, dfc.llama_process, llama_cpp.llama_sampler_sample
        set_output = dfc.llama_batch_ext_set_output_logits
        self._saved = {"decode": decode, "process": process, "sample": sample, "set_output": set_output}
        self._saved_kv = {name: getattr(llama_cpp, name) for name in _KV_CALLS}

        def timed_decode(ctx, batch):
            rows = sum(1 for i in range(batch.n_tokens) if batch.logits[i]) if batch.logits else 1
            start = time.perf_counter()
            status = decode(ctx, batch)
            llama_cpp.llama_synchronize(ctx)
            self.events.append(
                (start, time.perf_counter() - start, "decode", address(ctx), rows * 1000_000 + batch.n_tokens)
            )
            return status

        def timed_process(ctx, kind, batch):
            rows, self._ext_outputs = self._ext_outputs, 0
            start = time.perf_counter()
            status = process(ctx, kind, batch)
            llama_cpp.llama_synchronize(ctx)
            self.events.append((start, time.perf_counter() - start, "process", address(ctx), rows * 1000_000))
            return status

        def counted_output(batch, idx, value):
            self._ext_outputs += bool(value)
            return set_output(batch, idx, value)

        def timed_sample(chain, ctx, idx):
            start = time.perf_counter()
            token = sample(chain, ctx, idx)
            self.events.append((start, time.perf_counter() - start, "sample", 0, 0))
            return token

        for name, call in self._saved_kv.items():
            setattr(llama_cpp, name, self._timed_kv(call))
        llama_cpp.llama_decode = timed_decode
        dfc.llama_process = timed_process
        dfc.llama_batch_ext_set_output_logits = counted_output
        llama_cpp.llama_sampler_sample = timed_sample
        return self

    def _timed_kv(self, call):
        def timed(*args):
            start = time.perf_counter()
            value = call(*args)
            self.events.append((start, time.perf_counter() - start, "kv", 0, 0))
            return value

        return timed

    def __exit__(self, *exc) -> None:
        for name, call in self._saved_kv.items():
            setattr(llama_cpp, name, call)
        llama_cpp.llama_decode = self._saved["decode"]
        dfc.llama_process = self._saved["process"]
        dfc.llama_batch_ext_set_output_logits = self._saved["set_output"]
        llama_cpp.llama_sampler_sample = self._saved["sample"]

    def tally(self, first_token_at: float, ended: float, into: Tally) -> None:
        """Add the events between the first token and the last to `into`, and forget all events."""
        into.wall_s += ended - first_token_at
        for start, seconds, kind, ctx, packed in self.events:
            if not first_token_at <= start < ended:
                continue
            if kind == "sample":
                into.sampler_s += seconds
                continue
            if kind == "kv":
                into.kv_s += seconds
                continue
            into.decode_s += seconds
            rows, n_tokens = divmod(packed, 1000_000)
            into.logits_bytes += 4 * rows * self.n_vocab
            if kind == "process":
                into.other_bytes += 4 * rows * self.conf_width
            elif ctx == self.target_ctx:
                into.steps += 1
                into.other_bytes += 4 * n_tokens * self.feature_width
        self.events.clear()
