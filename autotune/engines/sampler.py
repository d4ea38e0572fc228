"""llama.cpp's own sampler chain, built as llama-server builds it for a request, for the in-process engine.

llama-server samples every emitted position through `common_sampler_sample`: it copies the whole
vocabulary's logits into a candidate array and runs the chain (logit bias for the vocabulary's
suppressed tokens, penalties, DRY, top-n-sigma, top-k, typical, top-p, min-p, XTC, temperature,
dist). `llama_sampler_sample` does the same copy and chain in C, so calling it per position gives
the in-process engine llama-server's per-token sampling cost and choice. Samplers that are no-ops
at llama-server's defaults (penalties, DRY, typical, XTC, top-n-sigma return at once) are left out:
they cost nothing there either.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from autotune.llamacpp.bindings import Context
from autotune.spec.sampling import Sampling

_lib = llama_cpp.llama_cpp._lib
_lib.llama_vocab_get_suppress_tokens.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32)]
_lib.llama_vocab_get_suppress_tokens.restype = ctypes.POINTER(ctypes.c_int32)


#: llama.cpp's draft-simple sampler keeps the top 10 candidates (common/speculative.cpp).
DRAFT_TOP_K = 10


class SamplerChain:
    """A sampler chain over a context's logits; `sample(context, row)` picks the token of output row
    `row` of the last decode (negative: from the end), as llama-server would."""

    def __init__(self, vocab, n_vocab: int, samplers: list):
        params = llama_cpp.llama_sampler_chain_default_params()
        params.no_perf = True
        self.ptr = llama_cpp.llama_sampler_chain_init(params)
        suppressed = _suppressed_tokens(vocab)
        if suppressed:
            biases = (llama_cpp.llama_logit_bias * len(suppressed))(
                *[llama_cpp.llama_logit_bias(token=t, bias=float("-inf")) for t in suppressed]
            )
            samplers = [llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(suppressed), biases), *samplers]
        for sampler in samplers:
            llama_cpp.llama_sampler_chain_add(self.ptr, sampler)

    @classmethod
    def for_request(cls, vocab, n_vocab: int, sampling: Sampling) -> "SamplerChain":
        """The target's chain for a request with `sampling`."""
        return cls(
            vocab,
            n_vocab,
            [
                llama_cpp.llama_sampler_init_top_k(sampling.top_k),
                llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1),
                llama_cpp.llama_sampler_init_min_p(sampling.min_p, 1),
                llama_cpp.llama_sampler_init_temp_ext(sampling.temperature, 0.0, 1.0),
                llama_cpp.llama_sampler_init_dist(sampling.seed),
            ],
        )

    @classmethod
    def for_greedy_draft(cls, vocab, n_vocab: int) -> "SamplerChain":
        """A draft-simple draft's chain: top-10, then its first candidate (greedy drafting takes
        `cur_p->data[0]`, the top one, whatever dist would have drawn)."""
        return cls(
            vocab, n_vocab, [llama_cpp.llama_sampler_init_top_k(DRAFT_TOP_K), llama_cpp.llama_sampler_init_greedy()]
        )

    def sample(self, context: Context, row: int) -> int:
        """The token for output row `row` of `context`'s last decode (llama_sampler_sample also
        accepts it into the chain, as common_sampler_accept does)."""
        return int(llama_cpp.llama_sampler_sample(self.ptr, context.ptr, row))

    def sample_and_accept(self, context: Context, draft: list[int], is_eog) -> list[int]:
        """llama-server's verification (common_sampler_sample_and_accept_n): sample each position of
        the batch `[last] + draft` just decoded (output rows 0..len(draft)), keep the draft while the
        sampled token equals it, and end with the first token of the target's own. Returns the
        tokens emitted: the accepted draft prefix plus that one."""
        emitted = []
        for i, drafted in enumerate(draft):
            token = self.sample(context, i)
            emitted.append(token)
            # a draft token after an end-of-generation is never accepted (it would stay in the cache)
            if token != drafted or (is_eog(token) and i + 1 < len(draft)):
                return emitted
        emitted.append(self.sample(context, len(draft)))
        return emitted

    def reset(self) -> None:
        """A new request starts: llama-server creates its slot's sampler afresh (same seed)."""
        llama_cpp.llama_sampler_reset(self.ptr)

    def free(self) -> None:
        if self.ptr:
            llama_cpp.llama_sampler_free(self.ptr)
            self.ptr = None


def _suppressed_tokens(vocab) -> list[int]:
    count = ctypes.c_int32(0)
    tokens = _lib.llama_vocab_get_suppress_tokens(vocab, ctypes.byref(count))
    return [tokens[i] for i in range(count.value)] if tokens and count.value > 0 else []
