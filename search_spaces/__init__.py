"""Bundled search-space files, one `<model>.toml` per model family (format: README.md)."""
