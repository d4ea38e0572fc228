"""Bad input to the default search (`--strategy predict`), to the measured one, to `nightly` and to
`doctor`: one line on stderr, exit 2, nothing measured first (no calibration, no race, no llama-server
started) and nothing half-written (no study in the database)."""

from __future__ import annotations

import os
import socket
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


# -- the inputs, broken one at a time: each returns the arguments that break it and what the line names ------


def missing_gguf(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    (models_dir / "tiny-target.gguf").unlink()
    return [], ["no file matching 'tiny-target.gguf'"]


def truncated_gguf(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    target = models_dir / "tiny-target.gguf"
    target.write_bytes(target.read_bytes()[:1000])
    return [], [str(target)]


def garbage_gguf(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    target = models_dir / "tiny-target.gguf"
    target.write_bytes(b"not a gguf file at all")
    return [], [str(target)]


def draft_of_the_wrong_architecture(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    space = tmp_path / "dspark-draft-is-qwen3.toml"
    space.write_text(
        '[model]\nname = "tiny"\ntarget = "tiny-target.gguf"\n'
        '[drafts.draft-dspark]\nfile = "tiny-draft.gguf"\n'
        "[spec_types.draft-dspark]\ndraft_n_max = [1, 4]\n"
        "[spec_types.ngram-simple]\nngram_simple_size_n = [1, 3]\n"
    )
    return ["--space", str(space)], ["tiny-draft.gguf", "dflash-architecture"]


def draft_of_another_vocabulary(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    space = tmp_path / "draft-of-other-words.toml"
    space.write_text(
        '[model]\nname = "tiny"\ntarget = "tiny-target.gguf"\ndraft = "tiny-otherwords.gguf"\n'
        "[spec_types.draft-simple]\ndraft_n_max = [1, 4]\n"
    )
    return ["--space", str(space)], ["tiny-otherwords.gguf", "token 5"]


def prompts_not_jsonl(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("category,prompt\nqa,What is the capital of France?\n")
    return ["--prompts", str(prompts)], [f"{prompts}:1"]


def prompts_not_utf8(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes('{"category": "qa", "prompt": "caf\u00e9"}\n'.encode("latin-1"))
    return ["--prompts", str(prompts)], [str(prompts)]


def prompt_line_without_its_prompt(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"category": "qa", "prompt": "ok"}\n{"category": "qa"}\n')
    return ["--prompts", str(prompts)], [f"{prompts}:2", "'prompt'"]


def prompts_empty(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("")
    return ["--prompts", str(prompts)], [str(prompts), "no prompts"]


def prompts_missing(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    prompts = tmp_path / "nowhere.jsonl"
    return ["--prompts", str(prompts)], [str(prompts)]


def race_budget_of_hours(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    return ["--race-budget", "5h"], ["--race-budget 5h"]


def race_budget_of_no_rounds(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    return ["--race-budget", "0"], ["--race-budget 0"]


def storage_not_a_url(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    return ["--storage", "not a url"], ["is not a valid SQLAlchemy URL"]


def storage_unwritable(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    return ["--storage", "sqlite:////proc/autotune/studies.db"], ["cannot write the database /proc/autotune/studies.db"]


def storage_on_a_full_device(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    return ["--storage", "sqlite:////dev/full"], ["cannot write the database /dev/full"]


def storage_server_unreachable(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    pytest.importorskip("psycopg")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens once the probe closes
    return ["--storage", f"postgresql+psycopg://autotune@127.0.0.1:{port}/autotune"], [f"127.0.0.1:{port}"]


def storage_driver_missing(models_dir: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    return ["--storage", "mysql+mysqldb://autotune@127.0.0.1/autotune"], ["MySQLdb"]


BAD_INPUTS = [
    missing_gguf,
    truncated_gguf,
    garbage_gguf,
    draft_of_the_wrong_architecture,
    draft_of_another_vocabulary,
    prompts_not_jsonl,
    prompts_not_utf8,
    prompt_line_without_its_prompt,
    prompts_empty,
    prompts_missing,
    race_budget_of_hours,
    race_budget_of_no_rounds,
    storage_not_a_url,
    storage_unwritable,
    storage_on_a_full_device,
    storage_server_unreachable,
    storage_driver_missing,
]


def space_not_toml(path: Path) -> str:
    path.write_text("[model\nname = tiny\n")
    return str(path)


def space_not_utf8(path: Path) -> str:
    path.write_bytes('[model]\nname = "t\u00efny"\n'.encode("latin-1"))
    return str(path)


def space_with_an_empty_range(path: Path) -> str:
    path.write_text(
        '[model]\nname = "tiny"\ntarget = "tiny-target.gguf"\n[spec_types.ngram-simple]\nngram_simple_size_n = [5, 2]\n'
    )
    return str(path)


def space_a_folder(path: Path) -> str:
    path.mkdir()
    return str(path)


def space_missing(path: Path) -> str:
    return str(path)


BAD_SPACES = [space_not_toml, space_not_utf8, space_with_an_empty_range, space_a_folder, space_missing]


#: The commands that search: the default search (predict), the measured one, and nightly's re-tuning.
SEARCHING = ["search", "search --strategy measure", "nightly"]


@pytest.mark.parametrize("command", SEARCHING)
@pytest.mark.parametrize("breaks", BAD_INPUTS, ids=lambda f: f.__name__)
def test_bad_input_is_one_line_exit_2_before_anything_runs(
    command, breaks, tiny_space, models_dir, tmp_path, autotune_home
):
    extra, needles = breaks(models_dir, tmp_path)
    space = [] if "--space" in extra else ["--space", str(tiny_space)]
    done = autotune(
        *command.split(),
        "--model",
        "tiny",
        *space,
        "--models-dir",
        str(models_dir),
        "--max-tokens",
        "8",
        *extra,
        home=autotune_home,
    )
    assert_refused(done, autotune_home, *needles)


@pytest.mark.parametrize("command", [*SEARCHING, "doctor"])
@pytest.mark.parametrize("breaks", BAD_SPACES, ids=lambda f: f.__name__)
def test_an_unreadable_or_invalid_search_space_is_one_line_exit_2(command, breaks, models_dir, tmp_path, autotune_home):
    space = breaks(tmp_path / "tiny.toml")
    done = autotune(
        *command.split(), "--model", "tiny", "--space", space, "--models-dir", str(models_dir), home=autotune_home
    )
    assert_refused(done, autotune_home, space)


@pytest.mark.parametrize("command", [*SEARCHING, "doctor"])
def test_an_unknown_model_is_one_line_exit_2_naming_the_known_ones(command, autotune_home):
    done = autotune(*command.split(), "--model", "llama-9000", home=autotune_home)
    assert_refused(done, autotune_home, "unknown model 'llama-9000'", "gemma3-270m")


@pytest.mark.parametrize("breaks", [missing_gguf, truncated_gguf, garbage_gguf], ids=lambda f: f.__name__)
def test_doctor_reports_a_missing_or_corrupt_model_file_as_its_problem(
    breaks, tiny_space, models_dir, tmp_path, autotune_home
):
    """`doctor` diagnoses: the machine's builds are still reported, the file is its one `problem:` line
    (exit 1, as for any problem it finds), and nothing is decoded."""
    _, [needle] = breaks(models_dir, tmp_path)
    done = autotune(
        "doctor", "--model", "tiny", "--space", str(tiny_space), "--models-dir", str(models_dir), home=autotune_home
    )
    assert done.exit_code == 1, (done.exception, done.output)
    problems = [line for line in done.stdout.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 1 and problems[0].startswith("problem: nothing to decode: ") and needle in problems[0]
    assert done.stdout.splitlines()[0] == "model: tiny, decoding nothing (see below)"
    assert not [line for line in done.stdout.splitlines() if line.startswith("decode ")]
    assert "Traceback" not in done.output and studies_in(autotune_home / "autotune.db") == 0
