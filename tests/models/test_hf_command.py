"""`best --hf-command`: the printed command names its files on the hub (`-hf`, `-hfd`) instead of local
paths, checked against the llama-server it names, as the printed command is."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.spec.config import SpecConfig
from autotune.study.records import config_attrs
from autotune.testing.hub_fixtures import write_hub_cache
from storage import resolve_storage_url
from storage.presets import Preset, PresetStore

COMMIT = "5" * 40
REPO = "ggml-org/Qwen3.6-27B-GGUF"


def preset_with(argv: list[str], config: SpecConfig, revisions: dict) -> Preset:
    return Preset(
        model="qwen3.6-27b-gguf",
        hardware=hardware_key(),
        argv=tuple(argv),
        tok_s=40.0,
        baseline_tok_s=25.0,
        speedup=1.6,
        engine="server",
        llama_cpp_build="b1",
        file_hashes={},
        params=config_attrs(config),
        study_name="qwen3.6-27b-gguf@x:predicted",
        file_revisions=revisions,
    )


@pytest.fixture
def hub_files() -> dict[str, str]:
    paths = write_hub_cache(
        Path(os.environ["HF_HUB_CACHE"]),
        REPO,
        COMMIT,
        {"Qwen3.6-27B-Q8_0.gguf": b"target", "dflash-Qwen3.6-27B-BF16.gguf": b"draft"},
    )
    return {name: str(path) for name, path in paths.items()}


def best(*args: str):
    return CliRunner().invoke(cli, ["best", "--model", "qwen3.6-27b-gguf", *args])


def test_the_hub_command_is_the_measured_one_with_hub_names(hub_files):
    target, draft = hub_files["Qwen3.6-27B-Q8_0.gguf"], hub_files["dflash-Qwen3.6-27B-BF16.gguf"]
    config = SpecConfig(Path(target), "draft-dflash", Path(draft), {"draft_n_max": 6})
    measured = [
        "/opt/llama/llama-server",
        "-m",
        target,
        "-c",
        "8192",
        "-np",
        "1",
        "-ngl",
        "all",
        "-fa",
        "on",
        "--temp",
        "0",
        "--spec-type",
        "draft-dflash",
        "-md",
        draft,
        "--spec-draft-n-max",
        "6",
    ]
    revisions = {name: {"repo": REPO, "revision": COMMIT} for name in hub_files}
    with PresetStore(resolve_storage_url(None)) as store:
        store.save(preset_with(measured, config, revisions))
    result = best("--hf-command")
    assert result.exit_code == 0, result.output
    first, note, *rest = result.stdout.splitlines()
    assert shlex.split(first) == [
        "/opt/llama/llama-server",
        "-hf",
        REPO,
        "-hff",
        "Qwen3.6-27B-Q8_0.gguf",
        "--no-mmproj",
        "-c",
        "8192",
        "-np",
        "1",
        "-ngl",
        "all",
        "-fa",
        "on",
        "--temp",
        "0",
        "--spec-type",
        "draft-dflash",
        "-hfd",
        f"{REPO}:BF16",
        "--spec-draft-n-max",
        "6",
    ]
    assert note == f"# measured with the files of {REPO}@5555555; -hf downloads each repo's current revision"
    assert rest == best().stdout.splitlines()[1:]  # the figures are the measured command's


def test_a_local_file_has_no_hub_name_one_line_exit_2(tmp_path, hub_files):
    local = tmp_path / "Qwen3.6-27B-Q8_0.gguf"
    local.write_bytes(b"target")
    config = SpecConfig(local, "ngram-mod", None, {})
    with PresetStore(resolve_storage_url(None)) as store:
        store.save(preset_with(["llama-server", "-m", str(local), "--spec-type", "ngram-mod"], config, {}))
    result = best("--hf-command")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"autotune: error: the target {local} is a local file, not one from the hub cache: --hf-command names hub "
        'files only (tune with --hf ORG/REPO or a search space with hf = "org/repo")'
    ]


def test_a_llama_server_without_the_hub_flags_is_told_in_one_line(hub_files):
    from autotune.errors import UsageError
    from autotune.llamacpp.capabilities import parse_capabilities
    from autotune.llamacpp.runnable import CommandCheck
    from autotune.models.hub_command import hub_command

    target = Path(hub_files["Qwen3.6-27B-Q8_0.gguf"])
    help_text = "-m,    --model FNAME   model path\n-hf,   --hf-repo REPO   hub repo\n-c,    --ctx-size N   context\n"
    old = CommandCheck("llama-server", parse_capabilities(help_text, "version: 1 (abc)"))
    with pytest.raises(
        UsageError,
        match=r"the command with hub names needs -hff, --no-mmproj, which this llama-server "
        r"\(1 \(abc\)\) lacks: print it without --hf-command",
    ):
        hub_command(["llama-server", "-m", str(target), "-c", "8192"], SpecConfig(target), old)
