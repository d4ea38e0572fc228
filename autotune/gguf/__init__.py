"""Reading GGUF files without loading them: the header (`header`: keys, tensors, a file that is not
a GGUF), what autotune needs of a model (`info`: architecture, vocabulary, layers, quantization), and
whether two files make a speculative pair llama.cpp accepts (`compat`).

Named `autotune.gguf` inside its package; the `gguf` library on PyPI (which tests use to write tiny
models) is a different package.
"""
