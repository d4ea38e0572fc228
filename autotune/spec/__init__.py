"""What a configuration is, in llama-server's own terms.

- `params`: `SpecParam`, one tunable parameter; `types`: every spec type llama-server knows, its
  parameters and how types combine; `config`: `SpecConfig`, one configuration to measure;
  `default`: llama.cpp's own `--spec-default`.
- `runtime_flags`: the runtime flags (threads, batch sizes, KV cache types...) a search may tune;
  `sampling`: how each request samples.
- `command`: the one place a llama-server argv is spelled (`SpecConfig` -> `list[str]`).
- `space`: the search-space files (`search_spaces/<model>.toml`) that bound a study.

Pure data and arithmetic: nothing here measures, loads a model or opens storage.
"""
