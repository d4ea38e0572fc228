"""DFlash and DSpark drafting in-process: the drafter's loop (`drafter`), the target and draft
contexts that pass layer inputs between them (`contexts`), PCTree drafting trees (`pctree`), and the
libllama symbols llama-cpp-python does not bind (`bindings`)."""
