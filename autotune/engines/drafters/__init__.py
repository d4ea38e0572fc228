"""The in-process engine's drafters, one module per llama.cpp drafter it ports: a draft model
(`draft_model`), ngram-simple and ngram-map (`ngram_map`), ngram-mod (`ngram_mod`), ngram-cache
(`ngram_cache`), and the chain that combines spec types (`chain`). `base` is what they share."""
