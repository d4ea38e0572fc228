"""Predict every configuration from one baseline run, so that only the best few are measured.

At temperature 0 a speculative configuration generates the baseline's tokens (the lossless check), so
what a drafter drafts and what the target accepts is a function of the baseline's output alone: the
`trajectory` of each prompt. `replay` runs the engine's own drafters over it (n-gram types, their
combinations, draft-simple through the draft model's recorded greedy chains, DFlash and DSpark through
their recorded blocks, PCTree's trees built from them) and counts each verify step's batch. `cost` is the one thing measured: the target's decode time for a batch of b
tokens at a context depth, the sampler chain per emitted position and a draft model's time per token,
calibrated to llama-server with the baseline and `--spec-default` it measured. `predictor` puts them
together: counts x cost = predicted decode tok/s and speedup per configuration.
"""
