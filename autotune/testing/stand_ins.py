"""Stand-in programs for tests: a llama-server that plays another build of the real one, and an
nvidia-smi that lists GPUs this machine does not have.

`stand_in_llama_server(folder, real, dies_of="ILL")` is the broken build of a machine that refuses its
instructions: `--help`, `--version` and `--list-devices` are answered by the real binary (so capability
checks and the printed command's flags pass), and on start it kills itself with SIGILL, as a build for
another CPU (or AMX on a VM that refuses it) dies. `devices=[...]` plays a build of another backend:
`--list-devices` lists those devices instead, and otherwise it is the real server.
"""

from __future__ import annotations

import shlex
import signal
from pathlib import Path
from typing import Sequence

from autotune.engines.live import FREE_MEMORY_ARGS
from autotune.hardware import NVIDIA_SMI_ARGS

#: what the real binary answers by itself, without loading a model
PASSED_THROUGH = ("--help", "-h", "--usage", "--version", "--list-devices")


def stand_in_llama_server(
    folder: Path, real: str, *, dies_of: str | None = None, devices: Sequence[str] | None = None
) -> Path:
    """Write `folder/llama-server`: `real` with the changes above. `dies_of`: a signal name without SIG
    (`ILL`, `SEGV`, `BUS`, `FPE`) it kills itself with on start; `devices`: the lines `--list-devices`
    prints, as llama-server prints them (`CUDA0: NVIDIA H200 (143771 MiB, 142000 MiB free)`)."""
    if dies_of is not None:
        signal.Signals[f"SIG{dies_of}"]  # a KeyError here, not a shell error in the test
    lines = ["#!/bin/sh"]
    if devices is not None:
        listed = " ".join(shlex.quote(f"  {device}") for device in devices)
        lines.append(f"if [ \"$1\" = --list-devices ]; then printf '%s\\n' 'Available devices:' {listed}; exit 0; fi")
    lines.append(f'case "$1" in {"|".join(PASSED_THROUGH)}) exec {shlex.quote(real)} "$@" ;; esac')
    if dies_of is not None:
        lines.append(f"kill -{dies_of} $$")
    lines.append(f'exec {shlex.quote(real)} "$@"')
    path = folder / "llama-server"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def stand_in_nvidia_smi(
    folder: Path, gpus: Sequence[tuple[str, int]], *, free_mib: Sequence[int | str] | None = None
) -> Path:
    """Write `folder/nvidia-smi` answering autotune's GPU query with these (name, memory in MiB) GPUs,
    numbered from 0 (put `folder` first on PATH), and, given `free_mib` (a GPU's free MiB, or what nvidia-smi
    prints instead: `[N/A]` under MIG), the free-memory query of autotune.engines.live; any other query fails."""
    uuids = [f"GPU-{i}f00d-{name.replace(' ', '-')}" for i, (name, _) in enumerate(gpus)]
    rows = "".join(f"{i}, {uuids[i]}, {name}, {mib}, 570.124.06\n" for i, (name, mib) in enumerate(gpus))
    answers = [(NVIDIA_SMI_ARGS, rows)]
    if free_mib is not None:
        answers.append((FREE_MEMORY_ARGS, "".join(f"{i}, {uuids[i]}, {free}\n" for i, free in enumerate(free_mib))))
    cases = "".join(f"{shlex.quote(' '.join(args))}) cat <<'EOF'\n{out}EOF\n;;\n" for args, out in answers)
    path = folder / "nvidia-smi"
    path.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}*) echo "unexpected query: $*" >&2; exit 6 ;;\nesac\n')
    path.chmod(0o755)
    return path
