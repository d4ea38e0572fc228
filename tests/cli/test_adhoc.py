"""`--target FILE [--draft FILE ...]`: any GGUF is tuned without a search-space file."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.errors import ModelFileError
from autotune.gguf.info import read_gguf_info
from autotune.models.adhoc import adhoc_space, draft_type_of


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_the_space_follows_from_the_headers_and_the_name_from_general_name(models_dir):
    target = models_dir / "tiny-target.gguf"
    space = adhoc_space(target, [models_dir / "tiny-draft.gguf", models_dir / "tiny-dspark.gguf"])
    assert space.model.name == "tiny-qwen3-a-s0"  # general.name, as a slug
    assert set(space.spec_types) == {
        "ngram-simple",
        "ngram-map-k",
        "ngram-map-k4v",
        "ngram-mod",
        "ngram-cache",
        "draft-simple",
        "draft-dspark",
    }
    (dspark,) = space.drafts["draft-dspark"]
    assert dspark.pattern == str((models_dir / "tiny-dspark.gguf").resolve())
    assert draft_type_of(read_gguf_info(models_dir / "tiny-dspark.gguf")) == "draft-dspark"
    pctree = {r.param.name for r in space.spec_types["draft-dspark"]}
    assert {"dspark_pctree", "dspark_pctree_k", "dspark_pctree_n"} <= pctree


def test_a_draft_the_target_cannot_use_is_refused_with_llama_cpps_reason(models_dir):
    with pytest.raises(
        ModelFileError,
        match="tiny-otherwords.gguf cannot draft for tiny-target.gguf "
        r"\(draft-simple\): draft vocabulary differs from the target's at token 5",
    ):
        adhoc_space(models_dir / "tiny-target.gguf", [models_dir / "tiny-otherwords.gguf"])
    with pytest.raises(ModelFileError, match="both draft-simple drafts"):
        adhoc_space(models_dir / "tiny-target.gguf", [models_dir / "tiny-draft.gguf", models_dir / "tiny-target.gguf"])


def test_search_on_a_target_file_makes_a_study_that_best_and_trials_read(models_dir, autotune_home):
    result = run(
        "search",
        "--strategy",
        "measure",
        "--target",
        str(models_dir / "tiny-target.gguf"),
        "--draft",
        str(models_dir / "tiny-draft.gguf"),
        "--trials",
        "3",
        "--max-tokens",
        "8",
        "--no-confirm",
        "--seed",
        "0",
    )
    assert result.stdout.startswith(("llama-server", "/"))
    best = json.loads(run("best", "--model", "tiny-qwen3-a-s0", "--json").stdout)
    assert best["argv"][best["argv"].index("-m") + 1] == str((models_dir / "tiny-target.gguf").resolve())
    rows = json.loads(run("trials", "--model", "tiny-qwen3-a-s0", "--json").stdout)
    assert rows[0]["spec_type"] == "none"
    # the same study resumes from the same command, named by --model where given
    run(
        "search",
        "--strategy",
        "measure",
        "--target",
        str(models_dir / "tiny-target.gguf"),
        "--draft",
        str(models_dir / "tiny-draft.gguf"),
        "--trials",
        "3",
        "--max-tokens",
        "8",
        "--no-confirm",
    )
    assert len(json.loads(run("trials", "--model", "tiny-qwen3-a-s0", "--json").stdout)) == len(rows)


#: The searches: the default one (predict), which measures the baseline's pace first, and the measured one.
SEARCHES = ["search", "search --strategy measure"]


@pytest.mark.parametrize("command", SEARCHES)
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--target", "{dir}/missing.gguf"], "model file not found"),
        (["--target", "{dir}/tiny-target.gguf", "--draft", "{dir}/tiny-otherwords.gguf"], "cannot draft for"),
        (["--draft", "{dir}/tiny-draft.gguf", "--model", "gemma3-270m"], "--draft needs --target"),
        ([], "name a model: --model NAME"),
    ],
)
def test_bad_ad_hoc_input_is_one_line_exit_2_and_nothing_written(models_dir, autotune_home, command, argv, message):
    result = run(*command.split(), *[a.format(dir=models_dir) for a in argv], "--trials", "2", ok=False)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (autotune_home / "autotune.db").exists()
