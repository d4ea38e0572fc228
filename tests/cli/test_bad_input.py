"""Bad input to the default search (`--strategy predict`), to `nightly` and to `doctor`: one line on
stderr, exit 2, nothing measured first (no calibration, no race, no llama-server started) and nothing
half-written (no study in the database)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from autotune.cli.main import cli
from autotune.testing.database import studies_in
from autotune.testing.processes import our_llama_servers

pytestmark = pytest.mark.usefixtures("no_server_left_behind")

#: What measuring prints: a bad input must end before any of it.
MEASURING = ("measuring", "calibrat", "race round", "[1/", "tok/s")


def autotune(*args: str, home: Path) -> Result:
    """The command line, in this process (an unexpected exception stays in `exception`: exit 1)."""
    assert os.environ["AUTOTUNE_HOME"] == str(home)
    return CliRunner().invoke(cli, list(args))


def assert_refused(done: Result, home: Path, *needles: str) -> None:
    """Exit 2 with one line naming `needles`, nothing measured, no study stored."""
    lines = done.stderr.strip().splitlines()
    assert done.exit_code == 2, (done.exception, done.output)
    assert len(lines) == 1 and lines[0].startswith("autotune: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    said = done.output.lower()
    assert not [word for word in MEASURING if word.lower() in said], said
    assert studies_in(home / "autotune.db") == 0
    assert not our_llama_servers()


# -- the inputs, broken one at a time ---------------------------------------------------------------

def missing_gguf(models_dir: Path, tmp_path: Path) -> tuple[list[str], str]:
    (models_dir / "tiny-target.gguf").unlink()
    return [], "no file matching 'tiny-target.gguf'"


def truncated_gguf(models_dir: Path, tmp_path: Path) -> tuple[list[str], str]:
    target = models_dir / "tiny-target.gguf"
    target.write_bytes(target.read_bytes()[:1000])
    return [], str(target)


def garbage_gguf(models_dir: Path, tmp_path: Path) -> tuple[list[str], str]:
    target = models_dir / "tiny-target.gguf"
    target.write_bytes(b"not a gguf file at all")
    return [], str(target)


def prompts_not_jsonl(models_dir: Path, tmp_path: Path) -> tuple[list[str], str]:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("category,prompt\nqa,What is the capital of France?\n")
    return ["--prompts", str(prompts)], f"{prompts}:1"


def prompts_not_utf8(models_dir: Path, tmp_path: Path) -> tuple[list[str], str]:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes('{"category": "qa", "prompt": "caf\u00e9"}\n'.encode("latin-1"))
    return ["--prompts", str(prompts)], str(prompts)


def prompts_missing(models_dir: Path, tmp_path: Path) -> tuple[list[str], str]:
    prompts = tmp_path / "nowhere.jsonl"
    return ["--prompts", str(prompts)], str(prompts)


def storage_not_a_url(models_dir: Path, tmp_path: Path) -> tuple[list[str], str]:
    return ["--storage", "not a url"], "not a valid SQLAlchemy URL"


def storage_unwritable(models_dir: Path, tmp_path: Path) -> tuple[list[str], str]:
    return ["--storage", "sqlite:////proc/autotune/studies.db"], "cannot write the database"


BAD_INPUTS = [missing_gguf, truncated_gguf, garbage_gguf, prompts_not_jsonl, prompts_not_utf8, prompts_missing,
              storage_not_a_url, storage_unwritable]


def space_not_toml(path: Path) -> str:
    path.write_text("[model\nname = tiny\n")
    return str(path)


def space_not_utf8(path: Path) -> str:
    path.write_bytes('[model]\nname = "t\u00efny"\n'.encode("latin-1"))
    return str(path)


def space_a_folder(path: Path) -> str:
    path.mkdir()
    return str(path)


def space_missing(path: Path) -> str:
    return str(path)


BAD_SPACES = [space_not_toml, space_not_utf8, space_a_folder, space_missing]


@pytest.mark.parametrize("command", ["search", "nightly"])
@pytest.mark.parametrize("breaks", BAD_INPUTS, ids=lambda f: f.__name__)
def test_bad_input_is_one_line_exit_2_before_anything_runs(command, breaks, tiny_space, models_dir, tmp_path,
                                                           autotune_home):
    extra, needle = breaks(models_dir, tmp_path)
    done = autotune(command, "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir),
                    "--max-tokens", "8", *extra, home=autotune_home)
    assert_refused(done, autotune_home, needle)


@pytest.mark.parametrize("command", ["search", "nightly", "doctor"])
@pytest.mark.parametrize("breaks", BAD_SPACES, ids=lambda f: f.__name__)
def test_an_unreadable_search_space_is_one_line_exit_2(command, breaks, models_dir, tmp_path, autotune_home):
    space = breaks(tmp_path / "tiny.toml")
    done = autotune(command, "--model", "tiny", "--space", space, "--models-dir", str(models_dir), home=autotune_home)
    assert_refused(done, autotune_home, space)


@pytest.mark.parametrize("command", ["search", "nightly", "doctor"])
def test_an_unknown_model_is_one_line_exit_2_naming_the_known_ones(command, autotune_home):
    done = autotune(command, "--model", "llama-9000", home=autotune_home)
    assert_refused(done, autotune_home, "unknown model 'llama-9000'", "gemma3-270m")


@pytest.mark.parametrize("breaks", [missing_gguf, truncated_gguf, garbage_gguf], ids=lambda f: f.__name__)
def test_doctor_reports_a_missing_or_corrupt_model_file_as_its_problem(breaks, tiny_space, models_dir, tmp_path,
                                                                       autotune_home):
    """`doctor` diagnoses: the machine's builds are still reported, the file is its one `problem:` line
    (exit 1, as for any problem it finds), and nothing is decoded."""
    _, needle = breaks(models_dir, tmp_path)
    done = autotune("doctor", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir),
                    home=autotune_home)
    assert done.exit_code == 1, (done.exception, done.output)
    problems = [line for line in done.stdout.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 1 and problems[0].startswith("problem: nothing to decode: ") and needle in problems[0]
    assert done.stdout.splitlines()[0] == "model: tiny, decoding nothing (see the problem below)"
    assert not [line for line in done.stdout.splitlines() if line.startswith("decode ")]
    assert "Traceback" not in done.output and studies_in(autotune_home / "autotune.db") == 0
