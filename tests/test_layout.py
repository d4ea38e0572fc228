"""The house rules of the package layout, read from the code's own imports (every `import` statement,
function-level ones included): no import cycle, no package importing one above it, nothing outside
`autotune.cli` importing it, no other package's `_private` module, no module past 300 logical lines (about 400 as written).

Run alone with `python -m pytest tests/test_layout.py`; it reads files and imports nothing.
"""

from __future__ import annotations

import ast
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("autotune", "storage", "search_spaces")

#: Lowest first: a package may import its own modules and those of packages before it, never after.
LAYERS = (
    ("autotune", "autotune.errors", "autotune.interrupts", "autotune.settings", "autotune.hardware"),  # the ground
    ("autotune.install",),  # plain standard library: it runs before autotune's dependencies are installed
    ("autotune.llamacpp",),
    ("autotune.spec",),
    ("autotune.gguf",),
    ("autotune.measure",),
    ("autotune.engines",),
    ("autotune.predict",),
    ("autotune.models",),
    ("autotune.doctor",),  # `autotune doctor`: reads builds, runs both engines, judges
    ("storage", "search_spaces"),
    ("autotune.study",),  # the Optuna study, its records, answers read back
    ("autotune.race",),  # the race and its verdict: imports study/, never search/
    ("autotune.search",),  # its docstring only: the five rooms below
    ("autotune.search.inputs",),  # what the user asked for, checked before any row is written
    ("autotune.search.plan",),  # the workload, each phase's minutes, the budget
    ("autotune.search.finalists",),  # which predicted configurations race
    ("autotune.search.fleet",),  # a key's lease, the work queue
    ("autotune.search.measured",),  # the Optuna loop of measured trials
    ("autotune.search.predicted",),  # the default pipeline: predict, calibrate, race; --plan
    ("autotune.presets",),
    ("autotune.report",),
    ("autotune.testing",),
    ("autotune.cli", "autotune.__main__"),
)
#: The most logical lines (statements, however a formatter wraps them: tokenize's NEWLINE tokens) a module
#: and a room of search/ may hold; 300 is what 400 lines were before the formatter wrapped long calls
MAX_LOGICAL_LINES = 300
MAX_ROOM_LOGICAL_LINES = 650


def logical_lines(path: Path) -> int:
    """The statements of a file as Python reads them: a call wrapped over ten lines is one."""
    with path.open("rb") as source:
        return sum(token.type == tokenize.NEWLINE for token in tokenize.tokenize(source.readline))


def _modules() -> dict[str, Path]:
    found = {}
    for top in OURS:
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """The modules of ours that `name` imports (`from a.b import c` is a.b.c when c is a module)."""
    tree = ast.parse(MODULES[name].read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] in OURS)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] in OURS:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in MODULES else node.module)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name) for name in MODULES}


def _package(module: str) -> str:
    """The layer entry a module belongs to: its longest prefix listed in LAYERS."""
    entries = [e for layer in LAYERS for e in layer if module == e or module.startswith(e + ".")]
    assert entries, f"{module} belongs to no layer: add it to LAYERS in {__file__}"
    return max(entries, key=len)


def _rank(module: str) -> int:
    package = _package(module)
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), i.e. the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_layout_is_read_from_a_real_tree():
    assert len(MODULES) > 60 and sum(len(v) for v in GRAPH.values()) > 150
    assert "autotune.search.predicted" in GRAPH["autotune.cli.study"]


def test_the_three_rooms_import_one_way():
    """study/ holds the records, race/ judges entrants, search/ chooses them: the arrows run search -> race ->
    study and never back, so a change to how the race decides never reaches the records' readers."""
    rooms = ("autotune.study", "autotune.race", "autotune.search")

    def room(module: str) -> str | None:
        return next((r for r in rooms if module == r or module.startswith(r + ".")), None)

    backward = sorted(
        f"{m} imports {i}"
        for m, targets in GRAPH.items()
        for i in targets
        if room(m) and room(i) and rooms.index(room(i)) > rooms.index(room(m))
    )
    assert backward == []
    assert any(room(i) == "autotune.study" for m in GRAPH if room(m) == "autotune.race" for i in GRAPH[m])
    assert any(room(i) == "autotune.race" for m in GRAPH if room(m) == "autotune.search" for i in GRAPH[m])


SEARCH_ROOMS = (
    "autotune.search.inputs",
    "autotune.search.plan",
    "autotune.search.finalists",
    "autotune.search.fleet",
    "autotune.search.measured",
    "autotune.search.predicted",
)


def test_search_is_six_rooms_each_behind_its_face():
    """Every module of search/ lives in one of its rooms, every room but its face is private (`_name.py`), and
    a room stays small enough to read in one sitting."""
    loose = sorted(m for m in MODULES if m.startswith("autotune.search.") and _package(m) not in SEARCH_ROOMS)
    assert loose == []
    for room in SEARCH_ROOMS:
        members = [m for m in MODULES if m.startswith(room + ".")]
        assert members and all(m.rsplit(".", 1)[-1].startswith("_") for m in members), room
        lines = sum(logical_lines(MODULES[m]) for m in [room, *members])
        assert lines <= MAX_ROOM_LOGICAL_LINES, f"{room} has {lines} logical lines: split it"


def test_the_cli_imports_search_by_its_faces():
    deep = sorted(
        f"{m} imports {i}"
        for m, targets in GRAPH.items()
        for i in targets
        if _package(m) == "autotune.cli" and i.startswith("autotune.search.") and i not in SEARCH_ROOMS
    )
    assert deep == []


def test_no_module_import_cycle():
    assert _cycles(GRAPH) == []


def test_no_package_import_cycle():
    packages: dict[str, set[str]] = {}
    for module, imported in GRAPH.items():
        packages.setdefault(_package(module), set()).update(
            _package(m) for m in imported if _package(m) != _package(module)
        )
    assert _cycles(packages) == []


def test_nothing_imports_a_package_above_it():
    upward = sorted(
        f"{module} imports {imported}"
        for module, targets in GRAPH.items()
        for imported in targets
        if _rank(imported) > _rank(module)
    )
    assert upward == []


def test_only_the_cli_imports_the_cli():
    outside = sorted(
        f"{m} imports {i}"
        for m, targets in GRAPH.items()
        for i in targets
        if _package(i) == "autotune.cli" and _package(m) != "autotune.cli" and m != "autotune.__main__"
    )  # `python -m autotune`: the command line's other door
    assert outside == []


def _home(module: str) -> str:
    """The package a module lives in (a package's `__init__` lives in the package itself)."""
    return module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]


def test_no_module_imports_another_packages_private_module():
    private = sorted(
        f"{m} imports {i}"
        for m, targets in GRAPH.items()
        for i in targets
        if i.rsplit(".", 1)[-1].startswith("_") and not i.endswith("__main__") and i.rsplit(".", 1)[0] != _home(m)
    )
    assert private == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith("autotune.testing")))
def test_module_size(module):
    lines = logical_lines(MODULES[module])
    assert lines <= MAX_LOGICAL_LINES, f"{module} has {lines} logical lines: split it along its seams"


@pytest.mark.parametrize("package", sorted(m for m, p in MODULES.items() if p.name == "__init__.py"))
def test_every_package_says_what_lives_there(package):
    assert ast.get_docstring(ast.parse(MODULES[package].read_text())), f"{package}/__init__.py has no docstring"
