import json

import pytest

from autotune.errors import PromptFileError
from autotune.prompts import load_prompt_mix

CATEGORIES = [
    "coding", "humanities", "math", "multilingual", "qa", "rag",
    "reasoning", "roleplay", "stem", "summarization", "writing",
]


def test_bundled_mix_has_eleven_categories_of_at_least_four_prompts():
    mix = load_prompt_mix()
    assert mix.categories == CATEGORIES
    for category in CATEGORIES:
        assert sum(p.category == category for p in mix) >= 4
    assert len({p.id for p in mix}) == len(mix)


def test_take_keeps_file_order_per_category():
    mix = load_prompt_mix().take(per_category=1)
    assert [p.category for p in mix] == CATEGORIES
    assert load_prompt_mix().take(per_category=2, categories=["rag"]).prompts[1].id == "rag-2"


@pytest.mark.parametrize(
    "lines, match",
    [
        (['{"category": "qa", "prompt": "hi"}', '{"category": "qa", "prompt": '], r":2: invalid JSON"),
        (['{"category": "qa", "prompt": "hi"}', '{"prompt": "no category"}'], r":2: missing or empty string field 'category'"),
        (['["not", "an", "object"]'], r":1: expected a JSON object"),
        (["", "   "], "has no prompts"),
    ],
)
def test_bad_prompt_files_name_the_line(tmp_path, lines, match):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PromptFileError, match=match):
        load_prompt_mix(path)


def test_user_file_without_ids_gets_generated_ids(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps({"category": "qa", "prompt": f"q{i}"}) for i in range(3)))
    assert [p.id for p in load_prompt_mix(path)] == ["qa-1", "qa-2", "qa-3"]
