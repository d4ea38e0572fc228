"""Test helpers for autotune (tiny GGUF fixtures for real llama.cpp runs)."""
