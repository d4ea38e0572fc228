"""How autotune reaches llama.cpp: libllama through llama-cpp-python (`bindings`), the runtime
settings llama-server applies and their defaults (`runtime`), and the `llama-server` binary — where it
resolves (`server_binary`) and which flags and spec types it has (`capabilities`).

Nothing here imports the rest of autotune beyond `autotune.errors`: this is the floor the engines,
the search space and the printed command stand on. Importing the package loads no library; only
`bindings` loads libllama.
"""
