"""Presets: the confirmed command per (model, hardware, concurrency) that users run. A confirmed
winner becomes this machine's preset (`confirmed`); nightly re-tuning decides whether a new study
version replaces it (`nightly`); presets are exported as JSON, TOML, a launcher script, a llama-swap
config or an INI file (`export`). The rows themselves live in the top-level `storage` package.
"""
