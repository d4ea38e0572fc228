"""Presets as files to share or run: JSON, TOML, a POSIX launcher script, or where llama.cpp users keep
them: a llama-swap config.yaml, or a llama-server `--models-preset` INI file (router mode).

The launcher computes the hardware key with autotune.hardware's own sh twin of `hardware_key()`
(`HARDWARE_KEY_SH`: the visible GPUs' names and memory from `nvidia-smi`, honouring
CUDA_VISIBLE_DEVICES, else "CPU <model name>" from /proc/cpuinfo) and `exec`s the matching preset's
argv, so a fleet can ship one script and every machine starts llama-server with its own best settings.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import asdict
from datetime import datetime
from itertools import groupby
from typing import Any, Callable

from autotune.errors import UsageError
from autotune.hardware import HARDWARE_KEY_SH
from storage.presets import Preset


def export_presets(presets: list[Preset], fmt: str) -> str:
    """`presets` as the text of a json, toml or sh file; any other `fmt` raises ValueError."""
    try:
        writer = _WRITERS[fmt]
    except KeyError:
        raise ValueError(f"unknown preset export format {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}") from None
    return writer(presets)


def preset_record(preset: Preset) -> dict[str, Any]:
    """Every field of `preset` plus its command line, in a stable key order; `created_at` stays a datetime."""
    return {
        "model": preset.model,
        "hardware": preset.hardware,
        "command": preset.command,
        **asdict(preset),
        "argv": list(preset.argv),
    }


def _to_json(presets: list[Preset]) -> str:
    records = [preset_record(p) for p in presets]
    return json.dumps(records, indent=2, ensure_ascii=False, default=_iso_datetime) + "\n"


def _iso_datetime(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# TOML (written by hand: the standard library reads TOML but does not write it)

_TOML_ESCAPES = str.maketrans(
    {
        **{chr(code): f"\\u{code:04X}" for code in [*range(0x20), 0x7F]},
        "\b": "\\b",
        "\t": "\\t",
        "\n": "\\n",
        "\f": "\\f",
        "\r": "\\r",
        '"': '\\"',
        "\\": "\\\\",
    }
)


def _to_toml(presets: list[Preset]) -> str:
    """One `[[preset]]` table per preset. TOML has no null: a field without a value is left out."""
    tables = []
    for preset in presets:
        lines = ["[[preset]]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in preset_record(preset).items() if value is not None]
        tables.append("\n".join(lines) + "\n")
    return "\n".join(tables)


def _toml_value(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.translate(_TOML_ESCAPES) + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)  # TOML spells them inf, -inf, nan
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        items = [f"{_toml_value(str(k))} = {_toml_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise TypeError(f"cannot write a {type(value).__name__} to TOML")


# sh: a launcher script

_LAUNCHER_HEAD = """\
#!/bin/sh
# llama-server with the autotune preset for this machine (written by `autotune presets export --format sh`).
# Usage: sh <this file> [MODEL] [--concurrency N] [more llama-server flags...]
# --concurrency N (default 1): the preset tuned for the measured load nearest N concurrent streams.
set -eu

{hardware_key_function}
nearest_level() {{
    want=$1
    shift
    best=$1
    for level in "$@"; do
        if [ $((level > want ? level - want : want - level)) -lt $((best > want ? best - want : want - best)) ]; then
            best=$level
        fi
    done
    echo "$best"
}}

if [ $# -gt 0 ] && [ "${{1#-}}" = "$1" ]; then
    model=$1
    shift
else
    model={default_model}
fi
concurrency=1
if [ $# -gt 0 ] && [ "$1" = "--concurrency" ]; then
    concurrency=${{2-}}
    shift $(($# > 1 ? 2 : 1))
fi
case "$concurrency" in
    ''|*[!0-9]*) concurrency=0 ;;
esac
if [ "$concurrency" -lt 1 ]; then
    echo "--concurrency: expected a whole number of streams, at least 1" >&2
    exit 2
fi
hardware=$(hardware_key)
"""

_LAUNCHER_TAIL = """\
echo "no autotune preset for model '$model' on hardware '$hardware'" >&2
echo "usage: $0 [MODEL] [more llama-server flags...]; presets in this script (model @ hardware):" >&2
printf '  %s\\n' {known} >&2
exit 2
"""


def _to_sh(presets: list[Preset]) -> str:
    """A launcher: a `case` on the detected hardware key, then on MODEL (the first argument unless it
    starts with '-'; by default the only model, when there is one), each branch `exec`ing the preset's
    argv followed by the script's remaining arguments. Every string is quoted with shlex.quote, which
    also makes it a literal `case` pattern."""
    models = sorted({p.model for p in presets})
    default_model = shlex.quote(models[0]) if len(models) == 1 else '""'
    script = [_LAUNCHER_HEAD.format(hardware_key_function=HARDWARE_KEY_SH, default_model=default_model)]
    ordered = sorted(presets, key=lambda p: (p.hardware, p.model, p.concurrency))
    if ordered:
        script.append('case "$hardware" in\n')
        for hardware, group in groupby(ordered, key=lambda p: p.hardware):
            script.append(f'{shlex.quote(hardware)})\n    case "$model" in\n')
            for model, levels in groupby(group, key=lambda p: p.model):
                levels = list(levels)
                script.append(
                    f"    {shlex.quote(model)})\n"
                    f'        case "$(nearest_level "$concurrency" {" ".join(str(p.concurrency) for p in levels)})" in\n'
                )
                for preset in levels:
                    script.append(
                        f"        {preset.concurrency})\n"
                        f"            # {preset.tok_s:.1f} tok/s, {preset.speedup:.2f}x the baseline"
                        f"{'' if preset.concurrency == 1 else f', {preset.concurrency} concurrent streams'}\n"
                        + "".join(f"            # {line}\n" for line in revision_lines(preset))
                        + f'            exec {shlex.join(preset.argv)} "$@" ;;\n'
                    )
                script.append("        esac ;;\n")
            script.append("    esac ;;\n")
        script.append("esac\n")
    known = [f"{p.model} @ {p.hardware}" for p in sorted(presets, key=lambda p: (p.model, p.hardware))]
    script.append(_LAUNCHER_TAIL.format(known=" ".join(shlex.quote(k) for k in known) or "'(none)'"))
    return "".join(script)


def revision_lines(preset: Preset) -> list[str]:
    """`<file> from <repo> at <commit>` for each file of the preset that came from the hub."""
    return [f"{name} from {rev['repo']} at {rev['revision']}" for name, rev in sorted(preset.file_revisions.items())]


# llama-swap: a config.yaml with one model per preset

_LLAMA_SWAP_HEAD = """\
# llama-swap models from autotune presets (`autotune presets export --format llama-swap`).
# Each cmd is a preset's measured llama-server command; llama-swap fills in ${PORT}.
# Run: llama-swap --config config.yaml, then ask for a model by its name here.
"""


def entry_names(presets: list[Preset]) -> list[str]:
    """A unique name per preset, in the order of `presets`: the model, `model@hardware` where presets
    of one model from several machines are exported together, and `/npN` after a preset tuned for N
    concurrent streams (N > 1)."""
    hardware_per_model: dict[str, set[str]] = {}
    for preset in presets:
        hardware_per_model.setdefault(preset.model, set()).add(preset.hardware)
    names = []
    for preset in presets:
        name = preset.model if len(hardware_per_model[preset.model]) == 1 else f"{preset.model}@{preset.hardware}"
        concurrency = getattr(preset, "concurrency", 1)
        names.append(name if concurrency == 1 else f"{name}/np{concurrency}")
    return names


def _export_order(presets: list[Preset]) -> list[Preset]:
    return sorted(presets, key=lambda p: (p.model, p.hardware, getattr(p, "concurrency", 1)))


def _summary(preset: Preset) -> str:
    return (
        f"{preset.tok_s:.1f} tok/s, {preset.speedup:.2f}x the baseline on {preset.hardware} "
        f"({preset.engine}, {preset.llama_cpp_build})"
    )


def _to_llama_swap(presets: list[Preset]) -> str:
    """`models:` with one entry per preset: `cmd` is its argv (shell-quoted as llama-swap splits it,
    POSIX rules) and `--port ${PORT}`, `description` its figures. Strings are written double-quoted,
    so the file needs no YAML library and any path survives."""
    ordered = _export_order(presets)
    lines = [_LLAMA_SWAP_HEAD, "models:" + ("" if ordered else " {}")]
    for name, preset in zip(entry_names(ordered), ordered):
        if any("${" in arg for arg in preset.argv):
            raise UsageError(f"preset {name}: an argument contains '${{', which llama-swap reads as a macro")
        cmd = f"{shlex.join(preset.argv)} --port ${{PORT}}"
        lines += [
            f"  {_yaml_string(name)}:",
            f"    description: {_yaml_string(_summary(preset))}",
            *(f"    # {line}" for line in revision_lines(preset)),
            f"    cmd: {_yaml_string(cmd)}",
        ]
    return "\n".join(lines) + "\n"


# YAML double-quoted scalars escape like JSON, but must not hold C1 controls, surrogates or U+FFFE/F.
_YAML_UNPRINTABLE = str.maketrans(
    {code: f"\\u{code:04X}" for code in [*range(0x7F, 0xA0), *range(0xD800, 0xE000), 0xFFFE, 0xFFFF]}
)


def _yaml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False).translate(_YAML_UNPRINTABLE)


# ini: a llama-server --models-preset file (llama.cpp's common/preset.cpp reads it)

_INI_HEAD = """\
; llama-server presets from autotune (`autotune presets export --format ini`).
; Run: llama-server --models-preset presets.ini (router mode), then ask for a model by its section name.
; Each section is a preset's measured command: a key is a flag without its dashes, a bare flag is `true`.
version = 1
"""


def _to_ini(presets: list[Preset]) -> str:
    """One section per preset. llama.cpp's INI reader takes a value verbatim up to the end of the line
    or a `;`/`#`, with no quoting, so a value holding either, a line break or edge blanks is refused."""
    ordered = _export_order(presets)
    sections = [_INI_HEAD]
    for name, preset in zip(entry_names(ordered), ordered):
        if any(c in name for c in "[]\r\n"):
            raise UsageError(f"preset {name!r}: its name cannot be an INI section name")
        lines = [
            f"[{name}]",
            f"; {_summary(preset)}",
            f"; measured with {preset.argv[0]}",
            *(f"; {line}" for line in revision_lines(preset)),
        ]
        for key, value in argv_options(preset.argv[1:]):
            if value == "" or value != value.strip() or any(c in value for c in ";#\r\n"):
                raise UsageError(
                    f"preset {name}: the value {value!r} of {key} cannot be written to an INI file "
                    f"(llama.cpp's reader has no quoting)"
                )
            lines.append(f"{key} = {value}")
        sections.append("\n".join(lines) + "\n")
    return "\n".join(sections)


def argv_options(args: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """llama-server arguments as (flag without dashes, value) pairs; a flag not followed by a value
    (the next argument is another flag, or there is none) gets "true". A value may be a negative number."""
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        flag = args[i]
        if not _is_flag(flag):
            raise UsageError(f"argument {flag!r} follows no flag: not a llama-server command")
        if i + 1 < len(args) and not _is_flag(args[i + 1]):
            pairs.append((flag.lstrip("-"), args[i + 1]))
            i += 2
        else:
            pairs.append((flag.lstrip("-"), "true"))
            i += 1
    return pairs


def _is_flag(arg: str) -> bool:
    if not arg.startswith("-") or arg == "-":
        return False
    try:
        float(arg)
    except ValueError:
        return True
    return False  # a negative number is a value


_WRITERS: dict[str, Callable[[list[Preset]], str]] = {
    "json": _to_json,
    "toml": _to_toml,
    "sh": _to_sh,
    "llama-swap": _to_llama_swap,
    "ini": _to_ini,
}
EXPORT_FORMATS = tuple(_WRITERS)
