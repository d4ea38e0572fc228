"""Which engine can measure which spec type, and why the other cannot: what `autotune models` reports.

The in-process engine runs the spec types autotune has ported from llama.cpp's common/speculative.cpp;
llama-server runs what its `--help` lists. A type only the server runs is still searched, with
`--engine server`.
"""

from __future__ import annotations

from autotune.engines.python import PythonEngine
from autotune.llamacpp.capabilities import ServerCapabilities
from autotune.spec.types import BASELINE, SPEC_TYPES


def engine_coverage(server: ServerCapabilities | None) -> dict[str, dict[str, str]]:
    """Per speculative type llama.cpp has: for each engine, "runs" or why it does not."""
    python_types = PythonEngine().runnable_spec_types
    coverage = {}
    for spec_type, row in SPEC_TYPES.items():
        if spec_type == BASELINE:
            continue
        if spec_type in python_types:
            python = "runs"
        else:
            python = row.in_process_gap or "not ported to the in-process engine"
        if server is None:
            served = "no llama-server found"
        elif spec_type in server.spec_types:
            served = "runs"
        else:
            served = f"this llama-server ({server.build}) has no {spec_type}"
        coverage[spec_type] = {"python": python, "server": served}
    return coverage
