"""Where autotune keeps its state: option -> AUTOTUNE_* environment variable -> user data directory."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

HOME_ENV = "AUTOTUNE_HOME"
STORAGE_ENV = "AUTOTUNE_STORAGE"
MODELS_DIR_ENV = "AUTOTUNE_MODELS_DIR"


def home_dir() -> Path:
    """autotune's user data directory (`AUTOTUNE_HOME` overrides it; tests point it at a tmpdir)."""
    return Path(os.environ.get(HOME_ENV) or platformdirs.user_data_dir("autotune"))


def default_storage_url() -> str:
    return f"sqlite:///{home_dir() / 'autotune.db'}"


def default_models_dir() -> Path:
    return home_dir() / "models"
