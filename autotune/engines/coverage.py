"""Which engine can measure which spec type, and why the other cannot: what `autotune models` reports.

The in-process engine runs the spec types autotune has ported from llama.cpp's common/speculative.cpp;
llama-server runs what its `--help` lists. A type only the server runs is still searched, with
`--engine server`.
"""

from __future__ import annotations

from autotune.llamacpp.capabilities import ServerCapabilities
from autotune.engines.python import PythonEngine
from autotune.spec.types import BASELINE, SPEC_TYPE_PARAMS

#: Why the in-process engine leaves a type to llama-server. llama-cpp-python 0.3.36's llama.cpp does
#: expose what each needs, so these are ports not yet made, not limits of the library.
PYTHON_ENGINE_GAPS = {
    "draft-mtp": (
        "no in-process MTP loop: the bindings have what it needs (LLAMA_CONTEXT_TYPE_MTP, load_mtp, the NextN "
        "embeddings and llama_batch_ext_set_embd_state), but the draft context sharing the target's memory is "
        "not ported"
    ),
    "draft-eagle3": (
        "no in-process EAGLE-3 loop: the bindings have the target's layer inputs (llama_set_embeddings_layer_inp) "
        "and the eagle3 graph, but feeding the draft its three fused layers is not ported"
    ),
}


def engine_coverage(server: ServerCapabilities | None) -> dict[str, dict[str, str]]:
    """Per speculative type llama.cpp has: for each engine, "runs" or why it does not."""
    python_types = PythonEngine().runnable_spec_types
    coverage = {}
    for spec_type in SPEC_TYPE_PARAMS:
        if spec_type == BASELINE:
            continue
        if spec_type in python_types:
            python = "runs"
        else:
            python = PYTHON_ENGINE_GAPS.get(spec_type, "not ported to the in-process engine")
        if server is None:
            served = "no llama-server found"
        elif spec_type in server.spec_types:
            served = "runs"
        else:
            served = f"this llama-server ({server.build}) has no {spec_type}"
        coverage[spec_type] = {"python": python, "server": served}
    return coverage
