"""A tiny DSpark draft that actually predicts its target: for tests and benchmarks of drafting trees.

`tiny_gguf.write_dspark_draft` gives random weights, so its drafts are rarely accepted and a tree
has little to win. `write_bigram_dspark_draft` writes the same draft with a full-rank Markov head
(markov_rank = vocab size) set from the target's own greedy bigrams: after token t, the head favours
the tokens that followed t in the target's greedy continuations of some texts, the most frequent
one most (by `scale`, then `step` less for each next rank). The noise of the random draft body
(logits of standard deviation about sqrt(n_embd)) stays on top, so the linear draft is often right
and sometimes wrong in the ways a tree can cover: a token with several usual successors.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Sequence

import gguf
import numpy as np

from autotune.measure.prompts import Prompt, PromptMix
from autotune.testing import tiny_gguf

__all__ = [
    "MIX",
    "QWEN3_VOCAB",
    "TRAINING_TEXTS",
    "greedy_continuations",
    "bigram_table",
    "require_dspark_symbols",
    "write_bigram_dspark_draft",
    "write_qwen3_pair",
]

MIX = PromptMix(
    "test",
    (
        Prompt("a", "qa", "The quick brown fox jumps over the lazy dog and the quick brown fox runs."),
        Prompt("b", "rag", "Hello, world! This is a test prompt. Hello, world! This is a test prompt."),
        Prompt("c", "writing", "A completely different text about gardens, tomatoes and summer evenings."),
    ),
)
#: texts whose greedy continuations teach the bigram draft (prompt c is not among them)
TRAINING_TEXTS = [
    "Once upon a time there was a little robot who loved to read books.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "The weather today is sunny with a chance of rain in the afternoon.",
    MIX.prompts[0].text,
    MIX.prompts[1].text,
]


def require_dspark_symbols() -> None:
    """Skip where this libllama lacks what in-process DSpark needs (under CI, whose llama-cpp-python must
    have them, the skip fails: autotune.testing.ci)."""
    import pytest

    from autotune.engines.dflash import bindings as dfc

    if not dfc.available():
        pytest.skip(f"libllama lacks {dfc.missing()}")


def greedy_continuations(target_path: str | Path, texts: Iterable[str], n_tokens: int = 64) -> list[list[int]]:
    """The target's greedy continuation (prompt tokens first) of each text, one token at a time."""
    from autotune.llamacpp.bindings import Context, LoadedModel
    from autotune.llamacpp.runtime import Runtime

    model = LoadedModel(Path(target_path))
    try:
        context = Context(model, n_ctx=512, runtime=Runtime(threads=1))
        try:
            sequences = []
            for text in texts:
                tokens = model.tokenize(model.chat_prompt(text))[: 512 - n_tokens]
                context.clear()
                row = context.decode(tokens, 0)[-1]
                sequence = list(tokens)
                for _ in range(n_tokens):
                    token = int(row.argmax())
                    sequence.append(token)
                    row = context.decode([token], len(sequence) - 1)[-1]
                sequences.append(sequence)
            return sequences
        finally:
            context.free()
    finally:
        model.free()


def bigram_table(sequences: Sequence[Sequence[int]], top: int = 4) -> dict[int, list[int]]:
    """For each token, the tokens that followed it most often (most frequent first, at most `top`)."""
    counts: dict[int, Counter] = defaultdict(Counter)
    for sequence in sequences:
        for prev, nxt in zip(sequence, sequence[1:]):
            counts[prev][nxt] += 1
    return {prev: [t for t, _ in c.most_common(top)] for prev, c in counts.items()}


def write_bigram_dspark_draft(
    path: str | Path,
    target_path: str | Path,
    successors: dict[int, list[int]],
    *,
    scale: float = 40.0,
    step: float = 4.0,
    block_size: int = 4,
    seed: int = 0,
    **draft_kwargs,
) -> Path:
    """A `tiny_gguf.write_dspark_draft` whose Markov head says `successors`.

    markov_w1 is the identity, so bias(prev) = markov_w2[:, prev]: `scale - r * step` on the r-th
    successor of prev (r = 0, 1, ...), 0 elsewhere.
    """
    vocab = tiny_gguf.read_target_dims(target_path).vocab_size
    path = tiny_gguf.write_dspark_draft(
        path, target_path=target_path, markov_rank=vocab, block_size=block_size, seed=seed, **draft_kwargs
    )
    reader = gguf.GGUFReader(str(path), "r+")
    tensors = {t.name: t.data for t in reader.tensors}
    w1, w2 = tensors["markov_w1.weight"], tensors["markov_w2.weight"]
    w1[:] = np.eye(vocab, dtype=np.float32)
    w2[:] = 0.0
    for prev, nexts in successors.items():
        for rank, token in enumerate(nexts):
            w2[token, prev] = scale - rank * step
    w1.flush()
    w2.flush()
    del reader, tensors, w1, w2
    return path


#: Qwen3's vocabulary size: host work per step scales with it
QWEN3_VOCAB = 151_936


def write_qwen3_pair(
    root: str | Path,
    *,
    vocab_size: int = QWEN3_VOCAB,
    n_embd: int = 64,
    markov_rank: int = 8,
    block_size: int = 8,
    ctx: int = 2048,
) -> dict[str, Path]:
    """A qwen3 target with a real model's vocabulary and every kind of draft for it, as files under
    `root`: "target", "draft" (draft-simple: another qwen3 of the same vocabulary), "dspark" (with a
    Markov head of rank `markov_rank`) and "dflash" (the same draft without one). Random weights: the
    figures they give are per-step costs, not acceptance."""
    root = Path(root)
    target = tiny_gguf.write_qwen3_target(root / "target.gguf", vocab_size=vocab_size, n_embd=n_embd, ctx=ctx)
    return {
        "target": target,
        "draft": tiny_gguf.write_qwen3_target(
            root / "draft.gguf", vocab_size=vocab_size, n_embd=n_embd, ctx=ctx, seed=1
        ),
        "dspark": tiny_gguf.write_dspark_draft(
            root / "dspark.gguf", target_path=target, markov_rank=markov_rank, block_size=block_size
        ),
        "dflash": tiny_gguf.write_dspark_draft(
            root / "dflash.gguf", target_path=target, markov_rank=0, block_size=block_size
        ),
    }
