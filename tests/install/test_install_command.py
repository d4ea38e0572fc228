"""`python -m autotune.install`'s wheelhouse on a tiny local package (no llama.cpp compiled): a build is
keyed by the source, the CMake arguments, the compilers and the machine; the same key compiles nothing,
`--rebuild` compiles again; `--print-cmake-args` prints the flags and builds nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from autotune.install import wheelhouse
from autotune.install.wheelhouse import build_key, build_wheel

PACKAGE = "tiny-wheel-probe"
PYPROJECT = f"""
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{PACKAGE}"
version = "{{version}}"
"""


def write_sdist(folder: Path, version: str = "0.1") -> Path:
    """A pure-Python sdist `tiny_wheel_probe-VERSION.tar.gz`: it builds in seconds."""
    name = f"tiny_wheel_probe-{version}"
    source = folder / name
    (source / "tiny_wheel_probe").mkdir(parents=True)
    (source / "tiny_wheel_probe" / "__init__.py").write_text("")
    (source / "pyproject.toml").write_text(PYPROJECT.format(version=version))
    (source / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {version}\n")
    sdist = folder / f"{name}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(source, arcname=name)
    return sdist


@pytest.fixture
def tiny_package(tmp_path, monkeypatch) -> Path:
    """The wheelhouse builds the tiny sdist in place of a llama.cpp package."""
    sdist = write_sdist(tmp_path / "source")
    monkeypatch.setattr(wheelhouse, "LLAMA_CPP_PACKAGES", {PACKAGE: str(sdist)})
    return sdist


def test_the_key_is_the_source_the_flags_the_compilers_and_nothing_else(tmp_path):
    sdist = write_sdist(tmp_path / "a")
    other_source = write_sdist(tmp_path / "b", version="0.2")
    key = build_key(sdist, ["-DGGML_AVX2=ON"], {})
    assert build_key(sdist, ["-DGGML_AVX2=ON"], {"LLAMA_CPP_BUILD_JOBS": "2", "HOME": "/elsewhere"}) == key
    assert build_key(sdist, ["-DGGML_AVX2=ON"], {"CC": ""}) == key  # unset and empty are one compiler
    others = {
        build_key(other_source, ["-DGGML_AVX2=ON"], {}),
        build_key(sdist, ["-DGGML_AVX2=OFF"], {}),
        build_key(sdist, ["-DGGML_AVX2=ON", "-DGGML_CUDA=ON"], {}),
        build_key(sdist, ["-DGGML_AVX2=ON"], {"CC": "clang"}),
        build_key(sdist, ["-DGGML_AVX2=ON"], {"CXXFLAGS": "-O1"}),
    }
    assert len(others) == 5 and key not in others


@pytest.mark.slow
def test_the_same_flags_build_once_other_flags_and_rebuild_build_again(tiny_package, tmp_path):
    root = tmp_path / "wheelhouse"
    first = build_wheel(PACKAGE, ["-DA=1"], root)
    assert first.built_now and first.wheel.name == "tiny_wheel_probe-0.1-py3-none-any.whl"
    assert first.wheel.parent.parent == root / PACKAGE
    built_at = first.wheel.stat().st_mtime_ns

    again = build_wheel(PACKAGE, ["-DA=1"], root)
    assert not again.built_now and again.wheel == first.wheel and again.wheel.stat().st_mtime_ns == built_at

    other = build_wheel(PACKAGE, ["-DA=2"], root)
    assert other.built_now and other.wheel.parent != first.wheel.parent
    assert sorted(p.name for p in (root / PACKAGE).iterdir()) == sorted(
        [first.wheel.parent.name, other.wheel.parent.name]
    )

    rebuilt = build_wheel(PACKAGE, ["-DA=1"], root, rebuild=True)
    assert rebuilt.built_now and rebuilt.wheel == first.wheel and rebuilt.wheel.stat().st_mtime_ns != built_at
    assert len(list(first.wheel.parent.glob("*.whl"))) == 1  # the stale wheel went


def test_print_cmake_args_prints_the_users_flags_first_and_builds_nothing(tmp_path):
    env = {**os.environ, "CMAKE_ARGS": "-DMY_FLAG=1 -DGGML_NATIVE=ON", "PIP_CACHE_DIR": str(tmp_path / "pip-cache")}
    done = subprocess.run(
        [sys.executable, "-m", "autotune.install", "--rebuild", "--print-cmake-args", "--backend", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "-DMY_FLAG=1 -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF"
    ]
    assert not (tmp_path / "pip-cache").exists()  # no wheelhouse looked at, nothing compiled
