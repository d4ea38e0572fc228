"""Prompt mixes: JSON Lines files, one object per line with at least `category` and `prompt`."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterator, Sequence

from autotune.errors import PromptFileError


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    text: str


@dataclass(frozen=True)
class PromptMix:
    """An ordered list of prompts; figures are reported per prompt, per category and for the whole mix."""

    source: str
    prompts: tuple[Prompt, ...]

    def __iter__(self) -> Iterator[Prompt]:
        return iter(self.prompts)

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def categories(self) -> list[str]:
        return list(dict.fromkeys(p.category for p in self.prompts))

    def take(self, per_category: int | None = None, categories: Sequence[str] | None = None) -> "PromptMix":
        """The first `per_category` prompts of each (selected) category, in file order."""
        counts: dict[str, int] = {}
        kept = []
        for prompt in self.prompts:
            if categories and prompt.category not in categories:
                continue
            seen = counts.get(prompt.category, 0)
            if per_category is None or seen < per_category:
                kept.append(prompt)
                counts[prompt.category] = seen + 1
        if not kept:
            raise PromptFileError(f"{self.source}: no prompt left after selecting categories {list(categories or [])}")
        return PromptMix(self.source, tuple(kept))

    def spread(self, rng: random.Random) -> list[int]:
        """The mix's indices in an order shuffled by `rng`, each category's first prompt before any category's
        second (and so on): any leading part of it spreads over the categories as evenly as it can."""
        order = list(range(len(self.prompts)))
        rng.shuffle(order)
        seen: dict[str, int] = {}
        ranks = []
        for index in order:  # the how-manieth of its category
            category = self.prompts[index].category
            ranks.append(seen.get(category, 0))
            seen[category] = ranks[-1] + 1
        return [index for _, index in sorted(zip(ranks, order), key=lambda pair: pair[0])]


def bundled_mix_path() -> Path:
    """The instruction mix: 11 categories of requests, for chat models (their own template applied)."""
    return Path(str(resources.files("autotune").joinpath("data/prompt_mix.jsonl")))


def continuation_mix_path() -> Path:
    """The continuation mix: the same 11 categories as beginnings of passages, for base models."""
    return Path(str(resources.files("autotune").joinpath("data/prompt_mix_base.jsonl")))


def default_mix_path(targets: Sequence[Path]) -> tuple[Path, str | None]:
    """The bundled mix for a study of `targets`, and the line that says so when it is the continuation mix.

    A base model (its GGUF has no `tokenizer.chat_template`) gets each prompt as raw text and continues
    it: given an instruction it tends to repeat the instruction, which n-gram lookup drafts for free.
    So a study whose targets have no chat template measures the continuation mix; any target with a
    template keeps the instruction mix, wrapped in that template as llama-server's chat endpoint would."""
    from autotune.gguf.info import read_gguf_info

    if not targets or any(read_gguf_info(t).has_chat_template for t in targets):
        return bundled_mix_path(), None
    names = ", ".join(t.name for t in targets)
    has = "has no chat template (a base model)" if len(targets) == 1 else "have no chat template (base models)"
    return continuation_mix_path(), (
        f"{names} {has}: measuring the bundled continuation mix, "
        f"passages to continue rather than instructions (--prompts FILE to choose another)"
    )


def load_prompt_mix(path: Path | None = None) -> PromptMix:
    """Read a prompt file (the bundled 11-category mix when `path` is None)."""
    path = path or bundled_mix_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptFileError(f"{path}: cannot read prompt file: {exc}") from exc
    prompts = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            prompts.append(_parse_line(path, number, line, len(prompts)))
    if not prompts:
        raise PromptFileError(f"{path}: prompt file has no prompts (expected JSON Lines with 'category' and 'prompt')")
    return PromptMix(str(path), tuple(prompts))


def _parse_line(path: Path, number: int, line: str, index: int) -> Prompt:
    where = f"{path}:{number}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise PromptFileError(f"{where}: invalid JSON: {exc.msg} at column {exc.colno}") from exc
    if not isinstance(obj, dict):
        raise PromptFileError(f"{where}: expected a JSON object with 'category' and 'prompt'")
    for key in ("category", "prompt"):
        value = obj.get(key)
        if not isinstance(value, str) or not value.strip():
            raise PromptFileError(f"{where}: missing or empty string field {key!r}")
    prompt_id = obj.get("id", f"{obj['category']}-{index + 1}")
    return Prompt(id=str(prompt_id), category=obj["category"], text=obj["prompt"])
