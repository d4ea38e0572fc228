"""Write a missing quantization of a model through llama-cpp-python's `llama_model_quantize`.

llama.cpp reports no progress, so progress is read off the output file's growth against an estimate
of its final size (the source's weights at the target type's bits per weight).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import llama_cpp

from autotune.errors import EngineError, UsageError
from autotune.gguf.header import check_gguf
from autotune.gguf.info import read_gguf_info
from autotune.llamacpp.bindings import last_log_error
from autotune.models.files import resolve_model_files
from autotune.spec.space import QUANT_PLACEHOLDER, SearchSpace

#: Approximate bits per weight of the llama.cpp types, for the progress estimate only.
_BITS_PER_WEIGHT = {
    "F32": 32,
    "F16": 16,
    "BF16": 16,
    "Q8_0": 8.5,
    "Q6_K": 6.56,
    "Q5_K_M": 5.7,
    "Q5_K_S": 5.5,
    "Q5_0": 5.5,
    "Q5_1": 6,
    "Q4_K_M": 4.85,
    "Q4_K_S": 4.6,
    "Q4_0": 4.5,
    "Q4_1": 5,
    "Q3_K_L": 4.3,
    "Q3_K_M": 3.9,
    "Q3_K_S": 3.5,
    "Q2_K": 2.6,
    "IQ4_XS": 4.25,
    "IQ4_NL": 4.5,
}
#: Types a source can have without losing more by being quantized again.
UNQUANTIZED = frozenset({"F32", "F16", "BF16"})


def quant_types() -> list[str]:
    """Every quantization name this llama-cpp-python can write (`Q4_K_M`, `Q8_0`, `BF16`, ...)."""
    return sorted(
        name.removeprefix("LLAMA_FTYPE_MOSTLY_") for name in dir(llama_cpp) if name.startswith("LLAMA_FTYPE_MOSTLY_")
    )


def quantize_file(
    plan: "QuantizePlan",
    *,
    threads: int | None = None,
    on_progress: Callable[[float], None] = lambda fraction: None,
) -> None:
    """Carry out `plan`: the file is written under a temporary name and renamed when complete."""
    source, destination, quant = plan.source, plan.destination, plan.quant
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quant}")
    params.nthread = threads or os.cpu_count() or 1
    params.allow_requantize = plan.requantizes
    partial = destination.with_name(destination.name + ".partial")
    expected_bytes = max(1, int(plan.n_weights * _BITS_PER_WEIGHT.get(quant, 8) / 8))
    outcome: list[int] = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), params)
        ),
        daemon=True,
    )
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
            written = partial.stat().st_size if partial.exists() else 0
            on_progress(min(written / expected_bytes, 0.99))
        if outcome != [0]:
            raise EngineError(f"quantizing {source.name} to {quant} failed ({last_log_error()})")
        partial.replace(destination)
        on_progress(1.0)
    finally:
        if worker.is_alive():  # interrupted: let llama.cpp finish writing before the file is removed
            worker.join()
        partial.unlink(missing_ok=True)


@dataclass(frozen=True)
class QuantizePlan:
    """Which file to quantize into which, decided before anything is written."""

    source: Path
    source_quant: str
    destination: Path
    quant: str
    n_weights: int

    @property
    def requantizes(self) -> bool:
        """Quantizing an already-quantized file loses more quality than quantizing F16/BF16/F32."""
        return self.source_quant not in UNQUANTIZED


def plan_quantization(space: SearchSpace, models_dir: Path, quant: str, source: Path | None) -> QuantizePlan:
    """Source: `source`, else the most precise target found. Destination: the file pattern that lists
    `quant` (the target's first, then the drafts'), else the target pattern, with `{quant}` filled in."""
    quant = quant.upper()
    if quant not in quant_types():
        raise UsageError(f"unknown quantization {quant!r}; known: {', '.join(quant_types())}")
    patterns = [space.model.targets, *(p for found in space.drafts.values() for p in found)]
    pattern = next((p for p in patterns if quant in (q.upper() for q in p.quants)), space.model.targets)
    if QUANT_PLACEHOLDER not in pattern.pattern:
        raise UsageError(
            f"{space.path}: the file pattern {pattern.pattern!r} has no {QUANT_PLACEHOLDER} to name a new quant"
        )
    destination = models_dir / pattern.pattern.replace(QUANT_PLACEHOLDER, quant)
    if destination.exists():
        raise UsageError(f"{destination} exists already: remove it first to write it again")
    if source is None:
        targets = resolve_model_files(space, models_dir).targets
        source = max(targets, key=lambda path: _BITS_PER_WEIGHT.get(read_gguf_info(path).quant, 0))
    info = read_gguf_info(source)
    n_weights = sum(int(tensor.n_elements) for tensor in check_gguf(source).tensors)
    return QuantizePlan(source, info.quant, destination, quant, n_weights)
