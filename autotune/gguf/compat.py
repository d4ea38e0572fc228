"""Can llama.cpp run this spec type with this target and draft? Decided from GGUF headers alone.

The rules are llama.cpp's own (the vendored snapshot of llama-cpp-python 0.3.36); the source
location is given with each. Checking them up front matters because llama.cpp does not always fail
loudly: a draft-simple vocabulary mismatch only logs and serves without speculation.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.gguf.info import GGUFInfo, first_differing_token
from autotune.spec.types import DRAFT_MODEL_TYPES, SPEC_TYPE_PARAMS

# common/speculative.cpp: SPEC_VOCAB_MAX_SIZE_DIFFERENCE and SPEC_VOCAB_CHECK_START_TOKEN_ID.
MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_COMPARED_TOKEN_ID = 5

#: Target architectures whose graph exposes each layer's input (`res->t_layer_inp[il]` in
#: src/models/<arch>.cpp), which DFlash, DSpark and EAGLE3 drafts read through
#: llama_set_embeddings_layer_inp; for any other architecture llama.cpp aborts on
#: "layer input tensor is null" (src/llama-graph.cpp). Names are from src/llama-arch.cpp, via the
#: arch -> model class map in src/llama-model.cpp (llama_model_mapping) and the graph aliases in
#: src/models/models.h (llama-embed, lfm2moe, nemotron_h_moe, hunyuan-dense reuse another graph).
LAYER_INPUT_ARCHITECTURES = frozenset(
    {
        "bailingmoe3",
        "deepseek4",
        "gemma4",
        "gpt-oss",
        "hunyuan-dense",
        "hunyuan_vl",
        "lfm2",
        "lfm2moe",
        "llama",
        "llama-embed",
        "mimo2",
        "minimax-01",
        "minimax-m2",
        "muse-glimmer",
        "nanbeige",
        "nemotron_h",
        "nemotron_h_moe",
        "qwen3",
        "qwen35",
        "qwen35moe",
        "qwen3moe",
        "qwen3next",
        "qwen4exp",
    }
)


@dataclass(frozen=True)
class Verdict:
    """Whether a configuration can run; `reason` is one sentence for the user when it cannot."""

    runnable: bool
    reason: str = ""


def check_pair(spec_type: str, target: GGUFInfo, draft: GGUFInfo | None) -> Verdict:
    """The verdict for running `spec_type` on `target` with `draft` (None for spec types without one).

    draft-mtp accepts None and then drafts with the target's own MTP layers, as llama-server does
    without `-md`. An unknown spec type is a programming error (ValueError).
    """
    if spec_type not in SPEC_TYPE_PARAMS:
        raise ValueError(f"unknown spec type {spec_type!r}")
    if spec_type not in DRAFT_MODEL_TYPES:
        reason = "" if draft is None else f"{spec_type} takes no draft model"
    elif spec_type == "draft-mtp":
        reason = _mtp_problem(target, draft)
    elif draft is None:
        reason = f"{spec_type} needs a draft model"
    elif spec_type == "draft-simple":
        reason = _vocabulary_problem(target, draft)
    elif spec_type == "draft-eagle3":
        reason = _eagle3_problem(target, draft)
    else:
        reason = _dflash_problem(spec_type, target, draft)
    return Verdict(not reason, reason)


def _vocabulary_problem(target: GGUFInfo, draft: GGUFInfo) -> str:
    """common_speculative_are_compatible (common/speculative.cpp)."""
    if draft.vocab_type != target.vocab_type:
        return (
            f"draft tokenizer {draft.tokenizer_model} ({draft.vocab_type}) differs from "
            f"the target's {target.tokenizer_model} ({target.vocab_type})"
        )
    special_tokens = (
        ("BOS", target.add_bos, draft.add_bos, target.bos_id, draft.bos_id),
        ("EOS", target.add_eos, draft.add_eos, target.eos_id, draft.eos_id),
    )
    for name, target_adds, draft_adds, target_id, draft_id in special_tokens:
        if draft_adds != target_adds:
            return f"the draft {'adds' if draft_adds else 'does not add'} {name} and the target {'does' if target_adds else 'does not'}"
        if target_adds and draft_id != target_id:
            return f"draft {name} id {draft_id} differs from the target's {target_id}"
    if abs(draft.n_vocab - target.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE:
        return (
            f"draft vocabulary size {draft.n_vocab} is more than {MAX_VOCAB_SIZE_DIFFERENCE} "
            f"away from the target's {target.n_vocab}"
        )
    differing = first_differing_token(target, draft, start=FIRST_COMPARED_TOKEN_ID)
    if differing is not None:
        return f"draft vocabulary differs from the target's at token {differing}"
    return ""


def _dflash_problem(spec_type: str, target: GGUFInfo, draft: GGUFInfo) -> str:
    """common_speculative_impl_draft_dflash (common/speculative.cpp) and llama_model_dflash (src/models/dflash.cpp).

    llama.cpp tells DSpark from DFlash by the Markov head (common_speculative_types_from_gguf), so
    draft-dspark needs one. draft-dflash on a DSpark file is not refused: the graph still applies the
    head (src/models/dflash.cpp), only the block layout differs.
    """
    kind = "DSpark" if spec_type == "draft-dspark" else "DFlash"
    if draft.architecture != "dflash":
        return f"{spec_type} needs a dflash-architecture draft (got {draft.architecture})"
    if spec_type == "draft-dspark" and not draft.has_markov_head:
        return f"draft-dspark needs a DSpark draft (a Markov head); {draft.path.name} is plain DFlash: use draft-dflash"
    if not draft.target_layers:
        return f"the {kind} draft lists no dflash.target_layers"
    layer_problem = _layer_input_problem(kind, target, draft)
    if layer_problem:
        return layer_problem
    # The draft borrows the target's token embeddings and fuses n_target_layers x target n_embd features.
    if draft.n_embd != target.n_embd:
        return f"draft n_embd {draft.n_embd} differs from the target's {target.n_embd}"
    return ""


def _eagle3_problem(target: GGUFInfo, draft: GGUFInfo) -> str:
    """common_speculative_impl_draft_eagle3 (common/speculative.cpp) and llama_model_eagle3 (src/models/eagle3.cpp)."""
    if draft.architecture != "eagle3":
        return f"draft-eagle3 needs an eagle3-architecture draft (got {draft.architecture})"
    if len(draft.target_layers) != 3:
        return f"an EAGLE3 draft reads exactly 3 target layers; this one lists {len(draft.target_layers)}"
    layer_problem = _layer_input_problem("EAGLE3", target, draft)
    if layer_problem:
        return layer_problem
    if draft.target_hidden_size != target.n_embd:
        return f"the EAGLE3 draft was trained for a target n_embd of {draft.target_hidden_size}, not {target.n_embd}"
    return ""


def _mtp_problem(target: GGUFInfo, draft: GGUFInfo | None) -> str:
    """common_speculative_impl_draft_mtp (common/speculative.cpp); without a draft file the target drafts."""
    heads = draft or target
    if not heads.has_mtp_head:
        return f"{heads.path.name} has no MTP (NextN) layers, so draft-mtp cannot run"
    if heads.n_embd != target.n_embd:
        return f"draft n_embd {heads.n_embd} differs from the target's {target.n_embd}"
    return ""


def _layer_input_problem(kind: str, target: GGUFInfo, draft: GGUFInfo) -> str:
    if target.architecture not in LAYER_INPUT_ARCHITECTURES:
        return f"{target.architecture} targets expose no layer inputs, so they cannot drive a {kind} draft"
    # DFlash asks for the input of each listed layer; EAGLE3 also takes id == n_layer (the final
    # hidden state, via the NextN embeddings) and aborts above it.
    highest = target.n_main_layers if kind == "EAGLE3" else target.n_main_layers - 1
    beyond = [layer for layer in draft.target_layers if not 0 <= layer <= highest]
    if beyond:
        return f"the {kind} draft reads target layer {beyond[0]}, but the target has {target.n_main_layers} layers"
    return ""
