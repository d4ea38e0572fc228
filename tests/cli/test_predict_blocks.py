"""`search` predicts DFlash and DSpark configurations and every (target quant, draft quant) pair, end to end
on tiny models with a real llama-server as the arbiter."""

from __future__ import annotations

import shutil
import textwrap

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.hardware import hardware_key
from autotune.study.records import TrialRecord
from autotune.testing import tiny_gguf
from autotune.testing.dspark_fixtures import require_dspark_symbols

pytestmark = [pytest.mark.usefixtures("no_server_left_behind"), pytest.mark.slow]

SPACE = """
[model]
name = "tiny-quants"
target = "tiny-{{quant}}.gguf"
quants = ["A", "B"]
context_size = 512

[drafts.draft-dspark]
file = "tiny-dspark-{{quant}}.gguf"
quants = ["A", "B"]

[spec_types.draft-dspark]
draft_n_max = [1, 4]

[spec_types.ngram-simple]
ngram_simple_size_n = [1, 3]
ngram_simple_size_m = [2, 8]

[spec_types."ngram-mod,draft-dspark"]
"""


@pytest.fixture
def quant_models(tmp_path, tiny_dir):
    """Two target "quants" (two tiny qwen3 models whose greedy outputs part) and two DSpark draft quants."""
    require_dspark_symbols()
    root = tmp_path / "models"
    root.mkdir()
    shutil.copy(tiny_dir / "tiny-target.gguf", root / "tiny-A.gguf")
    tiny_gguf.write_qwen3_target(root / "tiny-B.gguf", seed=3)
    shutil.copy(tiny_dir / "tiny-dspark.gguf", root / "tiny-dspark-A.gguf")
    tiny_gguf.write_dspark_draft(root / "tiny-dspark-B.gguf", target_path=root / "tiny-A.gguf", seed=6)
    space = tmp_path / "tiny-quants.toml"
    space.write_text(textwrap.dedent(SPACE.format()))
    return root, space


def test_every_target_and_draft_quant_pair_is_predicted_from_its_own_trajectory(quant_models, autotune_home):
    models, space = quant_models
    result = CliRunner().invoke(
        cli,
        [
            "search",
            "--model",
            "tiny-quants",
            "--space",
            str(space),
            "--models-dir",
            str(models),
            "--max-tokens",
            "24",
            "--race-top",
            "2",
            "--race-budget",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert [line for line in result.output.splitlines() if "not predicted:" in line] == [
        "autotune: not predicted: ngram-mod,draft-dspark (the replay covers the n-gram types, draft-simple and their "
        "combinations, and draft-dflash and draft-dspark alone); --strategy measure measures them"
    ]
    study = optuna.load_study(
        study_name=f"tiny-quants@{hardware_key()}:predicted", storage=f"sqlite:///{autotune_home / 'autotune.db'}"
    )
    prediction = study.user_attrs["prediction"]
    targets = {str(models / "tiny-A.gguf"), str(models / "tiny-B.gguf")}
    assert set(prediction["trajectories"]) == targets
    outputs = [[p["tokens"] for p in prediction["trajectories"][t]["prompts"]] for t in sorted(targets)]
    assert outputs[0] != outputs[1]  # each target quant follows its own greedy output
    for target in targets:
        assert set(prediction["costs"][target]["blocks"]) == {"tiny-dspark-A.gguf", "tiny-dspark-B.gguf"}
    records = [TrialRecord.of(t) for t in study.trials if TrialRecord.of(t).role is None]
    dspark = {
        (r.config_target, r.spec_config().draft.name, r.spec_config().value("draft_n_max"))
        for r in records
        if r.spec_type == "draft-dspark"
    }
    assert {(t, d) for t, d, _ in dspark} == {(target, f"tiny-dspark-{q}.gguf") for target in targets for q in "AB"}
    assert {n for _, _, n in dspark} == {1, 2, 3, 4}
    assert all(r.predicted["tok_s"] > 0 for r in records if r.spec_type == "draft-dspark")
    assert study.user_attrs["confirmation"]["engine"] == "server"
