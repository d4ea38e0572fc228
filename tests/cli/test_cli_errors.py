"""Bad input ends in one line on stderr and exit code 2, with nothing written to the database."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def autotune(*args: str, home) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOTUNE_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "autotune", *args], env=env, capture_output=True, text=True, timeout=120)


def assert_usage_error(done, *needles):
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error:"), done.stderr
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0]


def assert_nothing_written(home):
    db = home / "autotune.db"
    if db.exists():
        import sqlite3

        tables = {r[0] for r in sqlite3.connect(db).execute("select name from sqlite_master where type='table'")}
        if "trials" in tables:
            assert sqlite3.connect(db).execute("select count(*) from studies").fetchone()[0] == 0


def test_unknown_model_lists_known_ones(autotune_home):
    done = autotune("search", "--strategy", "measure", "--model", "llama-9000", home=autotune_home)
    assert_usage_error(done, "unknown model 'llama-9000'", "gemma3-270m")
    assert_nothing_written(autotune_home)


def test_missing_model_file(tiny_space, tmp_path, autotune_home):
    done = autotune("search", "--strategy", "measure", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(tmp_path / "empty"),
                    home=autotune_home)
    assert_usage_error(done, "no file matching 'tiny-target.gguf'")
    assert_nothing_written(autotune_home)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_gguf(tiny_space, models_dir, autotune_home, damage):
    target = models_dir / "tiny-target.gguf"
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not a gguf file at all")
    done = autotune("search", "--strategy", "measure", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir),
                    home=autotune_home)
    assert_usage_error(done, str(target))
    assert_nothing_written(autotune_home)


def test_bad_prompt_file_names_the_line(tiny_space, models_dir, tmp_path, autotune_home):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"category": "qa", "prompt": "ok"}\n{"category": "qa"}\n')
    done = autotune("search", "--strategy", "measure", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir),
                    "--prompts", str(prompts), home=autotune_home)
    assert_usage_error(done, f"{prompts}:2", "'prompt'")
    assert_nothing_written(autotune_home)


def test_bad_search_space_file(models_dir, tmp_path, autotune_home):
    space = tmp_path / "tiny.toml"
    space.write_text('[model]\nname = "tiny"\ntarget = "tiny-target.gguf"\n[spec_types.ngram-simple]\nngram_simple_size_n = [5, 2]\n')
    done = autotune("search", "--strategy", "measure", "--model", "tiny", "--space", str(space), "--models-dir", str(models_dir), home=autotune_home)
    assert_usage_error(done, str(space), "spec_types.ngram-simple.ngram_simple_size_n", "empty range")
    assert_nothing_written(autotune_home)


def test_best_without_a_study(autotune_home):
    done = autotune("best", "--model", "gemma3-270m", home=autotune_home)
    assert_usage_error(done, "no study named", "autotune search")


@pytest.mark.parametrize("trials", ["0", "-3"])
def test_trials_zero_or_negative_is_a_usage_error(autotune_home, trials):
    done = autotune("search", "--strategy", "measure", "--model", "gemma3-270m", "--trials", trials, home=autotune_home)
    assert_usage_error(done, "--trials")
    assert_nothing_written(autotune_home)


@pytest.mark.parametrize(
    "url, needle",
    [
        ("postgresql+psycopg://autotune@127.0.0.1:9/nowhere", "cannot open storage"),
        ("sqlite:////proc/autotune/studies.db", "cannot write the database"),
        ("sqlite:////dev/full", "cannot write the database"),
        ("not a url", "not a valid SQLAlchemy URL"),
    ],
)
def test_unusable_storage_fails_before_any_measuring(tiny_space, models_dir, autotune_home, url, needle):
    done = autotune("search", "--strategy", "measure", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir),
                    "--storage", url, home=autotune_home)
    assert_usage_error(done, needle)
    assert "[1/" not in done.stderr  # no trial started


def test_wrong_arch_draft_is_named(tmp_path, models_dir, autotune_home):
    space = tmp_path / "tiny.toml"
    space.write_text('[model]\nname = "tiny"\ntarget = "tiny-target.gguf"\n'
                     '[drafts.draft-dspark]\nfile = "tiny-draft.gguf"\n'
                     '[spec_types.draft-dspark]\ndraft_n_max = [1, 4]\n'
                     '[spec_types.ngram-simple]\nngram_simple_size_n = [1, 3]\n')
    done = autotune("search", "--strategy", "measure", "--model", "tiny", "--space", str(space), "--models-dir", str(models_dir), home=autotune_home)
    assert_usage_error(done, "tiny-draft.gguf", "dflash-architecture")
    assert_nothing_written(autotune_home)


def test_vocab_mismatched_draft_is_named(tmp_path, models_dir, autotune_home):
    space = tmp_path / "tiny.toml"
    space.write_text('[model]\nname = "tiny"\ntarget = "tiny-target.gguf"\ndraft = "tiny-otherwords.gguf"\n'
                     '[spec_types.draft-simple]\ndraft_n_max = [1, 4]\n')
    done = autotune("search", "--strategy", "measure", "--model", "tiny", "--space", str(space), "--models-dir", str(models_dir), home=autotune_home)
    assert_usage_error(done, "tiny-otherwords.gguf", "token 5")
    assert_nothing_written(autotune_home)


def test_empty_prompt_file(tiny_space, models_dir, tmp_path, autotune_home):
    prompts = tmp_path / "empty.jsonl"
    prompts.write_text("")
    done = autotune("search", "--strategy", "measure", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir),
                    "--prompts", str(prompts), home=autotune_home)
    assert_usage_error(done, str(prompts), "no prompts")
