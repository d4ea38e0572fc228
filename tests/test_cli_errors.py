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
    done = autotune("search", "--model", "llama-9000", home=autotune_home)
    assert_usage_error(done, "unknown model 'llama-9000'", "gemma3-270m")
    assert_nothing_written(autotune_home)


def test_missing_model_file(tiny_space, tmp_path, autotune_home):
    done = autotune("search", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(tmp_path / "empty"),
                    home=autotune_home)
    assert_usage_error(done, "no file matching 'tiny-target.gguf'")
    assert_nothing_written(autotune_home)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_gguf(tiny_space, models_dir, autotune_home, damage):
    target = models_dir / "tiny-target.gguf"
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not a gguf file at all")
    done = autotune("search", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir),
                    home=autotune_home)
    assert_usage_error(done, str(target))
    assert_nothing_written(autotune_home)


def test_bad_prompt_file_names_the_line(tiny_space, models_dir, tmp_path, autotune_home):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"category": "qa", "prompt": "ok"}\n{"category": "qa"}\n')
    done = autotune("search", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir),
                    "--prompts", str(prompts), home=autotune_home)
    assert_usage_error(done, f"{prompts}:2", "'prompt'")
    assert_nothing_written(autotune_home)


def test_bad_search_space_file(models_dir, tmp_path, autotune_home):
    space = tmp_path / "tiny.toml"
    space.write_text('[model]\nname = "tiny"\ntarget = "tiny-target.gguf"\n[spec_types.ngram-simple]\nngram_simple_size_n = [5, 2]\n')
    done = autotune("search", "--model", "tiny", "--space", str(space), "--models-dir", str(models_dir), home=autotune_home)
    assert_usage_error(done, str(space), "spec_types.ngram-simple.ngram_simple_size_n", "empty range")
    assert_nothing_written(autotune_home)


def test_best_without_a_study(autotune_home):
    done = autotune("best", "--model", "gemma3-270m", home=autotune_home)
    assert_usage_error(done, "no study named", "autotune search")


def test_trials_zero_is_a_usage_error(autotune_home):
    done = autotune("search", "--model", "gemma3-270m", "--trials", "0", home=autotune_home)
    assert done.returncode == 2 and "Traceback" not in done.stderr
