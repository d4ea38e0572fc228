"""The hardware key studies and presets are filed under.

With NVIDIA GPUs: the name and memory of the GPUs this process can use, from `nvidia-smi`
(`NVIDIA GeForce RTX 5090 32GiB`, with a count prefix such as `2x ` when several identical GPUs are
visible); otherwise the CPU model (`CPU Intel(R) Xeon(R) ...`). The GPUs this process can use are
the ones CUDA_VISIBLE_DEVICES names, as CUDA reads it (see `cuda_visible`), so a worker pinned to one
GPU of eight files its results under that one GPU. The driver version is not part of the key (a
driver update should not start a new study) but is recorded with every trial.

The launcher of `autotune presets export --format sh` computes the same key in sh: `HARDWARE_KEY_SH`
is that twin, kept here beside the Python rule; tests/presets/test_presets.py runs both on the same stand-in
`nvidia-smi` and checks that they agree.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

NVIDIA_SMI_ARGS = ("--query-gpu=index,uuid,name,memory.total,driver_version", "--format=csv,noheader,nounits")
_SPACE = " \t\n\r\f\v"  # what sh/awk's [[:space:]] is in the C locale: both sides strip exactly these
_DIGITS = re.compile(r"[0-9]+")


@functools.lru_cache(maxsize=1)
def hardware_key() -> str:
    """This machine's key: `gpu_key` of the visible GPUs, else the CPU model."""
    gpus = visible_gpus()
    if not gpus:
        return _cpu_name()
    return gpu_key([(g["name"], g["memory_mib"]) for g in gpus])


@functools.lru_cache(maxsize=1)
def hardware_detail() -> dict:
    """What is recorded with each trial: the visible GPUs with memory and driver, and the CPU."""
    return {"gpus": visible_gpus(), "cpu": _cpu_name()}


def gpu_key(gpus: Sequence[tuple[str, int]]) -> str:
    """The key of these (name, memory in MiB) GPUs; at least one.

    Each GPU is `NAME NGiB`, N being `gib(memory_mib)`. One distinct label: that label, with an `Nx `
    count in front when there are several GPUs (`2x NVIDIA H200 140GiB`). Several distinct labels:
    the labels sorted by code point and joined with ` + `, without counts. The sh twin in
    `HARDWARE_KEY_SH` implements this same rule: change both together.
    """
    if not gpus:
        raise ValueError("gpu_key needs at least one GPU")
    labels = sorted({f"{name} {gib(memory_mib)}GiB" for name, memory_mib in gpus})
    if len(labels) > 1:
        return " + ".join(labels)
    return f"{len(gpus)}x {labels[0]}" if len(gpus) > 1 else labels[0]


def gib(memory_mib: int) -> int:
    """MiB to whole GiB, the way Python's round() does it: to nearest, a half to the even neighbour."""
    return round(memory_mib / 1024)


def visible_gpus() -> list[dict]:
    """The GPUs this process can use: those `nvidia-smi` lists, as CUDA_VISIBLE_DEVICES selects them."""
    return cuda_visible(listed_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def listed_gpus() -> list[dict]:
    """Every GPU `nvidia-smi` lists (none without nvidia-smi or when it fails)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, *NVIDIA_SMI_ARGS], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_gpu_rows(out)


def parse_gpu_rows(out: str) -> list[dict]:
    """The GPUs of `nvidia-smi` output for NVIDIA_SMI_ARGS: one `index, uuid, name, memory, driver` row
    each (a name may hold commas); a row with fewer fields or a non-numeric index or memory is skipped."""
    gpus = []
    for line in out.split("\n"):
        fields = line.split(",")
        if len(fields) < 5:
            continue
        index, uuid, memory, driver = (fields[i].strip(_SPACE) for i in (0, 1, -2, -1))
        if _DIGITS.fullmatch(index) and _DIGITS.fullmatch(memory):
            gpus.append(
                {
                    "index": int(index),
                    "uuid": uuid,
                    "name": ",".join(fields[2:-2]).strip(_SPACE),
                    "memory_mib": int(memory),
                    "driver": driver,
                }
            )
    return gpus


def cuda_visible_entries(setting: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES cut into its comma-separated entries, stripped; None when it is unset."""
    return None if setting is None else [entry.strip(_SPACE) for entry in setting.split(",")]


def cuda_visible(gpus: list[dict], setting: str | None) -> list[dict]:
    """The GPUs CUDA shows a process whose CUDA_VISIBLE_DEVICES is `setting`, in the order it shows them.

    Unset (None): all of them. Otherwise each entry in turn: digits are an index (`nvidia-smi`'s),
    anything else the UUID, or the start of the UUID, of exactly one GPU (`GPU-8932f937-...`). Like
    CUDA, the first entry that names no GPU ends the list, so an empty setting and `-1` show no GPU; a
    GPU named twice is counted once. (Indices follow nvidia-smi's PCI order: set
    CUDA_DEVICE_ORDER=PCI_BUS_ID for CUDA to number GPUs the same way.) The sh twin in
    `HARDWARE_KEY_SH` selects the same GPUs.
    """
    entries = cuda_visible_entries(setting)
    if entries is None:
        return list(gpus)
    shown: list[dict] = []
    for entry in entries:
        if _DIGITS.fullmatch(entry):
            matches = [g for g in gpus if g["index"] == int(entry)]
        else:
            matches = [g for g in gpus if entry and g["uuid"].startswith(entry)]
        if len(matches) != 1:
            break
        if matches[0] not in shown:
            shown.append(matches[0])
    return shown


def _cpu_name() -> str:
    """`CPU ` and the first non-empty `model name` of /proc/cpuinfo, else the processor or machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().split("\n"):
            if line.startswith("model name") and ":" in line:
                model = line.split(":", 1)[1].strip(_SPACE)
                if model:
                    return "CPU " + model
    except OSError:
        pass
    return "CPU " + (platform.processor() or platform.machine())


# The launcher's `hardware_key` function: `hardware_key()` above, in POSIX sh and awk. It reads the same
# nvidia-smi query, selects the GPUs with the rule of `cuda_visible`, labels them with the rule of
# `gpu_key` (and of `gib`: round half to even) and falls back to the CPU the way `_cpu_name` does.
# awk and sed run in the C locale so that sorting is by byte (UTF-8: by code point, as Python sorts)
# and [[:space:]] is _SPACE.
HARDWARE_KEY_SH = (
    r"""hardware_key() {
    # autotune.hardware.hardware_key() in sh: the visible GPUs' names and memory, else the CPU model.
    gpus=$(nvidia-smi """
    + shlex.join(NVIDIA_SMI_ARGS)
    + r""" 2>/dev/null) || gpus=""
    key=$(printf '%s\n' "$gpus" | LC_ALL=C awk '
        function trim(s) { sub(/^[[:space:]]+/, "", s); sub(/[[:space:]]+$/, "", s); return s }
        {
            n = split($0, f, ",")
            if (n < 5) next
            index_ = trim(f[1]); memory = trim(f[n - 1])
            if (index_ !~ /^[0-9]+$/ || memory !~ /^[0-9]+$/) next
            name = f[3]
            for (i = 4; i <= n - 2; i++) name = name "," f[i]
            gib = int(memory / 1024); rest = memory - gib * 1024
            if (rest > 512 || (rest == 512 && gib % 2 == 1)) gib++
            count++; gpu_index[count] = index_ + 0; uuid[count] = trim(f[2]); label[count] = trim(name) " " gib "GiB"
        }
        END {
            shown = 0
            if (!("CUDA_VISIBLE_DEVICES" in ENVIRON)) {
                for (i = 1; i <= count; i++) pick[++shown] = i
            } else {
                entries = split(ENVIRON["CUDA_VISIBLE_DEVICES"], entry, ",")
                for (e = 1; e <= entries; e++) {
                    wanted = trim(entry[e]); hits = 0
                    for (i = 1; i <= count; i++) {
                        if (wanted ~ /^[0-9]+$/) { if (gpu_index[i] == wanted + 0) { hits++; hit = i } }
                        else if (wanted != "" && index(uuid[i], wanted) == 1) { hits++; hit = i }
                    }
                    if (hits != 1) break
                    if (!(hit in picked)) { picked[hit] = 1; pick[++shown] = hit }
                }
            }
            if (shown == 0) exit
            distinct = 0
            for (s = 1; s <= shown; s++) {
                l = label[pick[s]]
                if (!(l in seen)) { seen[l] = 1; labels[++distinct] = l }
            }
            for (a = 2; a <= distinct; a++) {
                l = labels[a]
                for (b = a - 1; b >= 1 && labels[b] > l; b--) labels[b + 1] = labels[b]
                labels[b + 1] = l
            }
            if (distinct > 1) {
                key = labels[1]
                for (a = 2; a <= distinct; a++) key = key " + " labels[a]
            } else {
                key = labels[1]
                if (shown > 1) key = shown "x " key
            }
            print key
        }')
    if [ -n "$key" ]; then
        printf '%s\n' "$key"
        return
    fi
    cpu=$(LC_ALL=C sed -n 's/^model name[^:]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null \
        | LC_ALL=C sed 's/[[:space:]]*$//; /^$/d' | head -n1) || cpu=""
    if [ -z "$cpu" ]; then
        cpu=$(uname -p 2>/dev/null) || cpu=""
        if [ -z "$cpu" ] || [ "$cpu" = unknown ]; then cpu=$(uname -m); fi
    fi
    printf 'CPU %s\n' "$cpu"
}
"""
)
