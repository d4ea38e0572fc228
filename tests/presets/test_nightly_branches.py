"""`nightly` on the default strategy, driven to a chosen branch on real llama.cpp: a preset whose files
are gone is replaced (exit 0), and a standing preset that no entrant beats is kept (exit 3).

No entrant can win here by construction: the space's only type, ngram-mod, drafts nothing until it has
seen n_min >= 40 tokens, and a night generates 24; every entrant (llama.cpp's --spec-default too) leaves
the race with 'drafted nothing', so the race's pick is the plain command, every time."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from storage import resolve_storage_url
from storage.presets import Preset, PresetStore

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_server_left_behind")]

UNWINNABLE_SPACE = """
[model]
name = "tiny"
target = "tiny-target.gguf"
context_size = 512

[spec_types.ngram-mod]
ngram_mod_n_match = [24, 32]
ngram_mod_n_max = [48, 64]
ngram_mod_n_min = [40, 48]
"""


@pytest.fixture
def night(tmp_path, tiny_dir):
    """A models dir with the tiny target, the unwinnable space, and a nightly run over them."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_dir / "tiny-target.gguf", models)
    space = tmp_path / "tiny.toml"
    space.write_text(textwrap.dedent(UNWINNABLE_SPACE))

    def run():
        return CliRunner().invoke(
            cli,
            [
                "nightly",
                "--model",
                "tiny",
                "--space",
                str(space),
                "--models-dir",
                str(models),
                "--max-tokens",
                "24",
                "--top",
                "2",
                "--race-budget",
                "2",
            ],
        )

    run.models = models
    return run


def standing_preset(models, *, spec_type: str, draft: str | None, params: dict) -> Preset:
    """A preset stored before the night: the configuration `spec_type` on the tiny target."""
    config = {
        "target": str(models / "tiny-target.gguf"),
        "spec_type": spec_type,
        "draft": None if draft is None else str(models / draft),
        "params": params,
        "runtime": {},
    }
    return Preset(
        model="tiny",
        hardware=hardware_key(),
        argv=("llama-server", "-m", config["target"]),
        tok_s=100.0,
        baseline_tok_s=100.0,
        speedup=1.0,
        engine="server",
        llama_cpp_build="b1",
        file_hashes={},
        params=config,
        study_name="tiny@before:predicted",
        reason="stored by the test",
    )


def presets() -> list[dict]:
    return json.loads(CliRunner().invoke(cli, ["presets", "list", "--json"]).stdout)


def test_a_preset_whose_draft_is_gone_is_replaced_by_the_nights_pick(night):
    with PresetStore(resolve_storage_url(None)) as store:
        store.save(
            standing_preset(
                night.models, spec_type="draft-simple", draft="deleted-draft.gguf", params={"draft_n_max": 4}
            )
        )
    result = night()
    assert result.exit_code == 0, (result.exception, result.output)
    assert result.stdout.startswith("improved: tiny: the preset's files are gone; new preset the plain command ")
    (preset,) = presets()
    assert preset["params"]["spec_type"] == "none" and preset["study_name"].endswith(":predicted")
    assert preset["reason"].startswith("the preset's files are gone; new preset the plain command ")


def test_a_standing_preset_no_entrant_beats_is_kept(night):
    """The preset is the plain command on the same target; the night's pick is the plain command again."""
    with PresetStore(resolve_storage_url(None)) as store:
        store.save(standing_preset(night.models, spec_type="none", draft=None, params={}))
    result = night()
    assert result.exit_code == 3, (result.exception, result.output)
    assert result.stdout.startswith("unchanged: tiny: the preset is still the best (the plain command ")
    assert result.stdout.rstrip().endswith("; kept")
    (preset,) = presets()
    assert preset["reason"] == "stored by the test" and preset["study_name"] == "tiny@before:predicted"
