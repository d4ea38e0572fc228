"""autotune: find the fastest llama.cpp speculative-decoding settings for a GPU and model."""

__version__ = "0.1.0"
