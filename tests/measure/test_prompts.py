import json

import optuna
import pytest
from click.testing import CliRunner
from llama_cpp import Llama

from autotune.cli.main import cli
from autotune.engines import create_engine
from autotune.engines.prompt_tokens import PromptTokens
from autotune.errors import PromptFileError
from autotune.gguf.info import read_gguf_info
from autotune.measure.prompts import bundled_mix_path, continuation_mix_path, default_mix_path, load_prompt_mix
from autotune.spec.config import SpecConfig
from autotune.testing import tiny_gguf
from autotune.testing.echo import count_echoes, loops, restates

#: Of the 11 demo prompts' outputs on Gemma 3 270M, at most this many restate their prompt, and at most
#: this many restate it or loop (measured: 3 and 6; 4 and 6 on an AVX2 Xeon without AVX-512, whose kernels
#: part from the first machine's at near-ties; see the test).
MAX_DEMO_RESTATES = 4
MAX_DEMO_ECHOES = 7

CATEGORIES = [
    "coding",
    "humanities",
    "math",
    "multilingual",
    "qa",
    "rag",
    "reasoning",
    "roleplay",
    "stem",
    "summarization",
    "writing",
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
        (
            ['{"category": "qa", "prompt": "hi"}', '{"prompt": "no category"}'],
            r":2: missing or empty string field 'category'",
        ),
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


# the continuation mix for base models

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_continuation_mix_has_the_same_eleven_categories():
    mix = load_prompt_mix(continuation_mix_path())
    assert mix.categories == CATEGORIES
    for category in CATEGORIES:
        assert sum(p.category == category for p in mix) >= 4
    assert len({p.id for p in mix}) == len(mix)
    assert not {p.text for p in mix} & {p.text for p in load_prompt_mix()}


def test_gemma_has_no_chat_template_so_it_gets_the_continuation_mix(gemma_path):
    assert read_gguf_info(gemma_path).has_chat_template is False
    path, note = default_mix_path([gemma_path])
    assert path == continuation_mix_path()
    assert note.startswith(
        f"{gemma_path.name} has no chat template (a base model): measuring the bundled continuation mix"
    )


def test_a_chat_model_keeps_the_instruction_mix(tmp_path):
    chat = tiny_gguf.write_qwen3_target(tmp_path / "chat.gguf", chat_template=CHATML)
    base = tiny_gguf.write_qwen3_target(tmp_path / "base.gguf")
    assert read_gguf_info(chat).has_chat_template and not read_gguf_info(base).has_chat_template
    assert default_mix_path([chat]) == (bundled_mix_path(), None)
    assert default_mix_path([base, chat]) == (bundled_mix_path(), None)  # one chat target: its template decides
    path, note = default_mix_path([base, base])
    assert path == continuation_mix_path() and "have no chat template (base models)" in note


def test_both_engines_tokenize_a_base_model_prompt_as_raw_text_and_a_chat_prompt_in_its_template(tmp_path, gemma_path):
    """PromptTokens gives both engines their tokens (the server engine sends them to /completion as ids),
    so a base model's prompt reaches llama.cpp as the raw text and a chat model's in its own template."""
    prompt = load_prompt_mix(continuation_mix_path()).prompts[0]
    chat = tiny_gguf.write_qwen3_target(tmp_path / "chat.gguf", chat_template=CHATML)
    tokens = PromptTokens(context_size=4096)
    try:
        gemma = tokens.model(gemma_path)
        assert gemma.chat_prompt(prompt.text) == prompt.text
        assert tokens.tokens(gemma_path, prompt, 64) == gemma.tokenize(prompt.text)
        templated = tokens.model(chat).chat_prompt(prompt.text)
        assert templated.startswith("<|im_start|>user\n" + prompt.text) and templated.endswith(
            "<|im_start|>assistant\n"
        )
        assert tokens.tokens(chat, prompt, 64) == tokens.model(chat).tokenize(templated)
    finally:
        tokens.close()


def test_search_of_a_base_model_says_it_measures_the_continuation_mix(tiny_space, models_dir, autotune_home):
    done = CliRunner().invoke(
        cli,
        [
            "search",
            "--strategy",
            "measure",
            "--model",
            "tiny",
            "--space",
            str(tiny_space),
            "--models-dir",
            str(models_dir),
            "--max-tokens",
            "8",
            "--per-category",
            "1",
            "--trials",
            "1",
            "--no-confirm",
        ],
    )
    assert done.exit_code == 0, done.output
    notes = [line for line in done.stderr.splitlines() if "continuation mix" in line]
    assert notes == [
        "autotune: tiny-target.gguf has no chat template (a base model): measuring the bundled "
        "continuation mix, passages to continue rather than instructions (--prompts FILE to choose another)"
    ]
    (summary,) = optuna.get_all_study_summaries(f"sqlite:///{autotune_home / 'autotune.db'}")
    measurement = summary.user_attrs["measurement"]
    assert measurement["prompt_source"] == str(continuation_mix_path())
    assert measurement["prompts"] == [f"{c}-1" for c in CATEGORIES]


def test_restates_and_loops():
    prompt = "Write a short story about an old clockmaker who finds a clock that runs backwards."
    assert restates(prompt, "Sure! Write a short story about an old clockmaker who finds a clock in his shop.")
    assert not restates(prompt, "Elias had mended clocks for sixty years, and none had ever surprised him.")
    assert loops("the bell rang and the door opened and the bell rang and the door opened and the bell rang")
    assert not loops("the bell rang once, then the door opened slowly, and a stranger stepped into the dusty shop")
    assert (
        str(count_echoes([(prompt, prompt), (prompt, "a b c d e f g h a b c d e f g h"), (prompt, "fine")]))
        == "1 of 3 restate the prompt, 1 more loop"
    )


def demo_outputs(gemma_path, mix_path) -> list[tuple[str, str]]:
    """(prompt, output) for the demo's prompts of a mix (the first of each category), generated
    greedily for 64 tokens on Gemma 3 270M by the baseline, as the demo's baseline generates them."""
    mix = load_prompt_mix(mix_path).take(per_category=1)
    with create_engine("python", context_size=4096) as engine:
        engine.prepare(SpecConfig(gemma_path), mix, max_tokens=64)
        results = engine.measure(SpecConfig(gemma_path), mix, max_tokens=64).results
    assert all(r.n_generated == 64 for r in results)
    vocab = Llama(str(gemma_path), vocab_only=True, verbose=False)
    return [(p.text, vocab.detokenize(r.tokens).decode("utf-8", errors="replace")) for p, r in zip(mix, results)]


@pytest.mark.slow
def test_gemma_continues_the_demo_prompts_instead_of_restating_them(gemma_path):
    """Measured here (examples/benchmarks/demo_mix.py): of the 11 demo prompts, the instruction mix's
    outputs restate 7 and loop in 2 more; the continuation mix's restate 3 (a RAG answer that goes on
    to repeat the question, a summary that copies its article's first sentence, a puzzle solution that
    starts over) and loop in 3 more. A tiny greedy model loops on its own text with either mix."""
    continued = count_echoes(demo_outputs(gemma_path, continuation_mix_path()))
    instructed = count_echoes(demo_outputs(gemma_path, bundled_mix_path()))
    assert continued.restated <= MAX_DEMO_RESTATES, continued
    assert continued.restated < instructed.restated, (continued, instructed)
    assert continued.echoing <= MAX_DEMO_ECHOES, continued
