"""What work costs on this machine, measured once by examples/benchmarks/gpu_prices.py (issue 49) and read by
`autotune search --plan` where it has no target on disk to measure (autotune.search.plan_run).

gpu_prices.py writes random-weight GGUFs at a target's real width and vocabulary (Qwen3-8B's: 4096 wide,
151,936 tokens) but only a few layers, so that the files stay small, and measures in-process with
llama-cpp-python: a target's decode step and its prefill (each over its layers), a DFlash/DSpark draft's
block decode of each row count and what reading out every row's logits adds to it, an injection of the
target's layer inputs of each row count, a draft-simple model's token, and one llama-server start.

One JSON file per machine, `<autotune home>/prices/<hardware key>.json` (autotune.hardware.hardware_key,
its odd characters replaced), with the date and llama.cpp build it was measured with. Every price carries
its unit in its name. A file that cannot be read is refused with one line (`PricesFileError`) naming the
file and how to measure again; a machine with no file has no prices (None).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from autotune.errors import UsageError
from autotune.hardware import hardware_key
from autotune.settings import home_dir

PRICES_VERSION = 1
MEASURE_COMMAND = "python examples/benchmarks/gpu_prices.py"
_ODD = re.compile(r"[^A-Za-z0-9._+-]+")


class PricesFileError(UsageError):
    """A prices file exists but cannot be read: the message names it and how to measure again."""


@dataclass(frozen=True)
class Prices:
    """One machine's measured prices (module docstring). Rows go 1, 2, ...: `block_ms[r - 1]` is a block of r
    rows. A per-layer figure is the measured model's over its layers: the output head's share included."""

    hardware: str  # autotune.hardware.hardware_key() of the machine measured
    measured_on: str  # the day, ISO (2026-12-07)
    llama_build: str  # the in-process llama.cpp (llama-cpp-python's version and system info)
    server_build: str | None  # llama-server's --version (None: no server was started)
    n_embd: int  # the width every target and DFlash/DSpark figure was measured at
    n_vocab: int
    target_layers: int  # the measured target's layer count
    target_quant: str  # its weights (Q4_K_M, F32, ...)
    target_step_ms_per_layer: float  # a decode step of one token at a few hundred positions, over the layers
    prefill_ms_per_token_layer: float  # a prompt's processing (one batch of 512), a token, over the layers
    draft_layers: int  # the DFlash/DSpark draft's layers (its block size is len(block_ms))
    draft_quant: str
    block_ms: tuple[float, ...]  # the draft's decode of a block of r rows and the argmax of every row
    logits_copy_ms: tuple[float, ...]  # what reading out every row's logits adds over reading out the last one
    inject_ms: tuple[float, ...]  # feeding the draft r rows of the target's layer inputs
    draft_simple_shape: str  # the draft-simple model measured, in words
    draft_simple_token_ms: float  # its decode step of one token
    server_start_s: float  # one llama-server start, launch to ready, of a file of server_start_file_bytes
    server_start_file_bytes: int

    def __post_init__(self) -> None:
        rows = {len(self.block_ms), len(self.logits_copy_ms), len(self.inject_ms)}
        if len(rows) != 1 or not self.block_ms:
            raise ValueError("block_ms, logits_copy_ms and inject_ms need the same rows, at least one")
        positive = {f.name: getattr(self, f.name) for f in fields(self) if f.name.endswith(("_ms", "_s", "_layer"))}
        for name, value in positive.items():
            values = value if isinstance(value, tuple) else (value,)
            if any(v < 0 or (v == 0 and name != "logits_copy_ms") for v in values):
                raise ValueError(f"{name} must be positive")

    @property
    def block_s(self) -> float:
        """The most a DFlash/DSpark recording decode costs here: a block or an injection at its most rows."""
        return max(*self.block_ms, *self.inject_ms) / 1000

    @property
    def prefill_share(self) -> float:
        """What a prompt's token costs against a decode step of the same model (both per layer, so a target of
        any layer count at this width prefills at this share of its own step)."""
        return self.prefill_ms_per_token_layer / self.target_step_ms_per_layer

    def as_dict(self) -> dict:
        return {
            "version": PRICES_VERSION,
            **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Prices":
        """The prices of `data` (as `as_dict` writes them); ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("version") != PRICES_VERSION:
            raise ValueError(f"version {data.get('version')!r}, not {PRICES_VERSION}")
        values = {}
        for f in fields(cls):
            if f.name not in data:
                raise ValueError(f"no {f.name}")
            values[f.name] = _typed(f.name, data[f.name], f.type)
        return cls(**values)


def _typed(name: str, value, kind: str):
    """`value` as the field's type (`kind`, as the annotation spells it); ValueError naming the field."""
    if kind == "str" or (kind == "str | None" and value is not None):
        ok = isinstance(value, str)
    elif kind == "str | None":
        ok = True
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:  # tuple[float, ...]
        ok = isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        value = tuple(float(v) for v in value) if ok else value
    if not ok:
        raise ValueError(f"{name} is {json.dumps(value)}, not a {kind.replace('tuple[float, ...]', 'list of numbers')}")
    return value


def prices_path(key: str | None = None) -> Path:
    """Where the prices of the machine `key` (this one's: hardware_key()) are kept."""
    name = _ODD.sub("_", key if key is not None else hardware_key()).strip("_") or "machine"
    return home_dir() / "prices" / f"{name}.json"


def write_prices(prices: Prices, path: Path | None = None) -> Path:
    """Write `prices` to `path` (by default the file of the machine they were measured on); the path."""
    path = path or prices_path(prices.hardware)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(prices.as_dict(), indent=2) + "\n")
    partial.replace(path)  # a reader never sees half a file
    return path


def load_prices(path: Path | None = None) -> Prices | None:
    """The prices at `path` (by default this machine's); None where there is no such file, PricesFileError
    where it cannot be read."""
    path = path or prices_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PricesFileError(f"{path}: cannot read the prices file ({exc.strerror})") from exc
    try:
        return Prices.from_dict(json.loads(text))
    except ValueError as exc:  # json.JSONDecodeError is one
        reason = " ".join(str(exc).split())
        raise PricesFileError(
            f"{path}: not a prices file autotune can read ({reason}); measure again with "
            f"{MEASURE_COMMAND}, or delete it"
        ) from exc
