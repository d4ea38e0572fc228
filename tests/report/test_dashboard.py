"""optuna-dashboard opens the database autotune writes: a real dashboard process on 127.0.0.1 lists the
study of a real (tiny) search and serves its trials' user attributes through its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli.main import cli
from autotune.engines.server_process import free_port
from autotune.hardware import hardware_key


def dashboard_command() -> str:
    pytest.importorskip("optuna_dashboard")
    script = Path(sys.executable).with_name("optuna-dashboard")
    return str(script) if script.exists() else shutil.which("optuna-dashboard") or pytest.skip("no optuna-dashboard")


def get_json(url: str, timeout_s: float = 10) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        assert response.status == 200
        return json.load(response)


def test_optuna_dashboard_serves_the_study_and_its_user_attrs(tiny_space, models_dir, autotune_home, tmp_path):
    command = dashboard_command()
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
            "12",
            "--per-category",
            "1",
            "--trials",
            "2",
            "--no-confirm",
        ],
    )
    assert done.exit_code == 0, done.output
    storage = f"sqlite:///{autotune_home / 'autotune.db'}"  # where autotune keeps studies by default
    port = free_port()
    log = (tmp_path / "dashboard.log").open("w")
    dashboard = subprocess.Popen(
        [command, storage, "--host", "127.0.0.1", "--port", str(port), "--server", "wsgiref"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                studies = get_json(f"{base}/api/studies")["study_summaries"]
                break
            except (urllib.error.URLError, ConnectionError):
                assert dashboard.poll() is None, (tmp_path / "dashboard.log").read_text()
                assert time.monotonic() < deadline, "optuna-dashboard did not answer within 60 s"
                time.sleep(0.3)
        name = f"tiny@{hardware_key()}:python"
        assert [s["study_name"] for s in studies] == [name]
        (study,) = studies
        detail = get_json(f"{base}/api/studies/{study['study_id']}")
        assert [t["number"] for t in detail["trials"]] == [0, 1, 2]  # and the uncounted --spec-default, trial 1
        roles = [{a["key"]: a["value"] for a in t["user_attrs"]}.get("role") for t in detail["trials"]]
        assert roles == ["baseline", "spec-default", None]
        baseline_attrs = {a["key"]: a["value"] for a in detail["trials"][0]["user_attrs"]}
        assert baseline_attrs["role"] == "baseline"
        assert baseline_attrs["engine"] == "python"
        assert json.loads(baseline_attrs["config"])["spec_type"] == "none"
        assert json.loads(baseline_attrs["argv"])[1:3] == ["-m", str(models_dir / "tiny-target.gguf")]
    finally:
        dashboard.terminate()
        try:
            dashboard.wait(timeout=10)
        except subprocess.TimeoutExpired:
            dashboard.kill()
            dashboard.wait()
        log.close()
