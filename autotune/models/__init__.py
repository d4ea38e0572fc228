"""The model files a study runs: finding a space's files on disk (`files`: also their hashes), the
Hugging Face Hub sources a space names (`hub`), the (target, draft) pairs llama.cpp accepts among them
(`candidates`), an ad-hoc space inferred from a GGUF's header (`adhoc`), writing a missing quant
(`quantize`), and what `autotune models` reports (`inventory`).
"""
