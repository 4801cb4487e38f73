"""The package's layers (docs/architecture.md): imports point downward only, and nothing circles.

Every import of every module under metis_lite/ is read from its source (ast), those inside
functions and under TYPE_CHECKING too, and `importlib.import_module("…")` calls; each module is
placed in one layer by LAYERS, and each import must point at its own layer or one below. A new
module that no layer names fails here, until its author says where it belongs.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT

import metis_lite

PACKAGE = ROOT / "metis_lite"


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]
    """Modules by dotted name below metis_lite; a package's name places all its modules."""
    independent: bool = False
    """Its groups (its top-level modules and packages) never import one another."""


LAYERS = (
    Layer("leaves", ("", "errors", "records", "settings", "escapes", "text.unicode_tables")),
    Layer("text", ("text", "parsing")),
    Layer("models", ("models",)),
    Layer("store", ("store",)),
    Layer("copies", ("copies",)),
    Layer("indexing", ("indexing",)),
    Layer(
        "ranking",
        ("retrieval.keyword", "retrieval.bm25", "retrieval.dense", "retrieval.fusion"),
        independent=True,
    ),
    Layer("retrieval", ("retrieval",)),
    Layer("base", ("base",)),
    Layer("evaluation", ("evaluation",)),
    Layer("served", ("service", "agents")),
    Layer("edges", ("http", "agents.mcp_server"), independent=True),
    Layer("entry points", ("cli", "__main__", "http.run", "http.__main__")),
)
"""From the bottom up, a package's modules in its package's layer unless a longer name places
them (the ranking stages below the pipeline that runs them). `""` is the package's face,
metis_lite/__init__.py, which imports its names lazily (checked below); `http.run` starts the
servers and hands the MCP transport to the routes, so it stands above the edges it joins."""

FACE = ""
"""metis_lite/__init__.py, of the leaves at run time (it holds __version__; its names load when
first used), checked on its own below."""

NOT_PYTHON = {"console/"}
"""Folders of the package that hold no Python (the web page's files)."""

LEAVES = ("errors", "records", "settings", "escapes", "text.unicode_tables")
ENTRY_POINTS_OF_CLI = ("cli", "__main__")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _internal(name: str) -> str | None:
    """`metis_lite.store.core` → `store.core` (the module, or the package holding the name)."""
    if name != "metis_lite" and not name.startswith("metis_lite."):
        return None
    name = name.removeprefix("metis_lite").removeprefix(".")
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(name: str) -> set[str]:
    """What a module imports of metis_lite, wherever in it the import is written."""
    path = MODULES[name]
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = ("metis_lite." + name).rstrip(".").split(".")
                kept = here if is_package else here[:-1]
                kept = kept[: len(kept) - node.level + 1]
                base = ".".join([*kept, base] if base else kept)
            # `from metis_lite.evaluation import saved` imports the module saved; `from
            # metis_lite.records import Filters`, the module records.
            for alias in node.names:
                whole = f"{base}.{alias.name}".removeprefix("metis_lite").removeprefix(".")
                targets.append(f"{base}.{alias.name}" if whole in MODULES else base)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets = [node.args[0].value]
        for target in targets:
            module = _internal(target)
            if module is not None and module != name:
                found.add(module)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def layer_of(name: str) -> int:
    """The layer of the longest name in LAYERS that is the module or a package holding it."""
    best, where = -1, None
    for n, layer in enumerate(LAYERS):
        for placed in layer.modules:
            holds = placed == name or (placed and name.startswith(placed + "."))
            if (holds or (placed == "" and name == "")) and len(placed) > best:
                best, where = len(placed), n
    if where is None:
        raise AssertionError(
            f"metis_lite.{name} is in no layer: add it to LAYERS in tests/test_layers.py and to "
            "docs/architecture.md"
        )
    return where


STAGE_OF = {"retrieval.bm25": "retrieval.keyword"}
"""Modules that are part of another's group: bm25.py is the words stage's index in memory."""


def placed_as(name: str) -> str:
    """The longest name in LAYERS that is the module or a package holding it."""
    best = ""
    for layer in LAYERS:
        for placed in layer.modules:
            if (placed == name or name.startswith(placed + ".")) and len(placed) > len(best):
                best = placed
    return best


def group_of(name: str) -> str:
    placed = placed_as(name)
    return STAGE_OF.get(placed, placed)


def test_every_module_has_a_layer():
    unplaced = []
    for name in MODULES:
        try:
            layer_of(name)
        except AssertionError:
            unplaced.append(f"metis_lite.{name}")
    assert not unplaced, f"in no layer of tests/test_layers.py: {', '.join(unplaced)}"


@pytest.mark.parametrize("name", sorted(set(MODULES) - {FACE}))
def test_imports_point_to_the_same_layer_or_below(name):
    here = layer_of(name)
    upward = sorted(
        f"{target} ({LAYERS[layer_of(target)].name})"
        for target in GRAPH[name]
        if layer_of(target) > here
    )
    assert not upward, f"{name or 'metis_lite'} ({LAYERS[here].name}) imports upward: {upward}"


def test_the_leaves_import_nothing_of_metis_lite():
    for name in LEAVES:
        assert GRAPH[name] == set(), f"{name} is a leaf but imports {sorted(GRAPH[name])}"


def test_groups_of_an_independent_layer_do_not_import_one_another():
    for name, targets in GRAPH.items():
        layer = LAYERS[layer_of(name)]
        if not layer.independent:
            continue
        crossing = sorted(
            t for t in targets if LAYERS[layer_of(t)] is layer and group_of(t) != group_of(name)
        )
        assert not crossing, f"{name} imports {crossing}, of its own layer ({layer.name})"


def test_nothing_imports_the_command_line():
    for name, targets in GRAPH.items():
        if group_of(name) in ENTRY_POINTS_OF_CLI:
            continue
        assert not any(group_of(t) == "cli" for t in targets), f"{name} imports the CLI"


FACES = {
    "text": ("tokenizer", "languages", "chunking", "plain"),
    "parsing": ("common", "pdf", "pdf_worker", "ocr"),
    "models": ("base", "batching", "prefixes", "registry"),
    "store": ("connection", "document_file", "files", "pool", "publication", "spec"),
    "copies": ("backup", "publish"),
    "indexing": ("ingest", "watch"),
    "retrieval": ("search", "keyword", "bm25", "dense", "memory"),
    "base": ("core", "multi", "passages"),
    "evaluation": ("bases", "beir", "metrics", "report", "runner", "saved", "sets", "why"),
    "service": ("bases", "serialize", "access"),
    "agents": ("tools", "mcp_server"),
    "http": ("run",),
    "cli": (),
}
"""Each room's face: the modules another room may import (besides the room itself, its
`__init__.py`). The others are the room's own, private by package; each room's `__init__.py`
names its face (docs/architecture.md)."""


def room_of(name: str) -> str | None:
    """The package a module is in (None for the leaves at the package's root)."""
    top = name.split(".")[0]
    return top if top in FACES else None


def test_a_room_is_entered_by_its_face():
    entered = sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if (room := room_of(target)) is not None
        and room != room_of(name)
        and target != room
        and target.removeprefix(room + ".") not in FACES[room]
    )
    assert not entered, "a room's own module imported from outside it: " + "; ".join(entered)


def test_every_room_names_its_face():
    for room, face in FACES.items():
        doc = (PACKAGE / room / "__init__.py").read_text(encoding="utf-8")
        said = re.search(r"Its face: (.*?)\.(\s|$)", doc, re.S)
        assert said is not None, f"metis_lite/{room}/__init__.py does not name its face"
        named = re.sub(r"\([^)]*\)|the package itself|^none:.*", "", said.group(1), flags=re.S)
        named = named.rpartition(":")[2]
        assert set(re.findall(r"\w+", named)) - {"and"} == set(face), room


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """Depth-first over the graph: a module met again while it is still being walked closes a
    circle, returned in order (its first module again at the end); None when there is none."""
    state: dict[str, str] = {}
    path: list[str] = []

    def walk(name: str) -> list[str] | None:
        state[name] = "walking"
        path.append(name)
        for target in sorted(graph.get(name, ())):
            if state.get(target) == "walking":
                return path[path.index(target) :] + [target]
            if target not in state and (circle := walk(target)) is not None:
                return circle
        path.pop()
        state[name] = "done"
        return None

    for name in sorted(graph):
        if name not in state and (circle := walk(name)) is not None:
            return circle
    return None


def test_no_import_circles():
    circle = find_circle(GRAPH)
    assert circle is None, "import circle: " + " → ".join(n or "metis_lite" for n in circle or [])


def test_the_face_exports_nothing_from_an_edge():
    """metis_lite/__init__.py imports its names lazily, by module name in a table, and for type
    checkers only under TYPE_CHECKING: whatever imports it (for __version__) imports nothing
    more at run time, and what it names comes from below the edges."""
    for name, module in metis_lite._EXPORTS.items():
        placed = _internal(module)
        assert placed is not None and placed in MODULES, (name, module)
        assert layer_of(placed) < layer_of("http"), f"{name} comes from an edge: {module}"
    assert all(layer_of(target) < layer_of("http") for target in GRAPH[FACE]), GRAPH[FACE]


def test_docs_architecture_draws_the_same_layers():
    """docs/architecture.md's table names each layer and its modules as LAYERS does."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([a-z ]+) \| (.+?) \| .+\|$", text, re.M)
    drawn = {}
    for name, modules in rows[1:]:  # the first row is the table's head
        names = set()
        for written in re.findall(r"`([^`]+)`", modules):
            if written in NOT_PYTHON:
                continue
            dotted = written.removeprefix("metis_lite/").removesuffix("/").removesuffix(".py")
            names.add("" if dotted == "__init__" else dotted.replace("/", "."))
        drawn[name] = names
    assert drawn == {layer.name: set(layer.modules) for layer in LAYERS}


# -- the reader is checked against code written for it ---------------------------------------


def test_the_reader_sees_imports_in_functions_relative_imports_and_import_module(tmp_path):
    source = (
        "import json\n"
        "from metis_lite.errors import InvalidRequest\n"
        "from . import keyword\n"
        "from ..store import Store\n"
        "def later():\n"
        "    from metis_lite.cli import main\n"
        "    import metis_lite.http.run\n"
        "    importlib.import_module('metis_lite.retrieval.search')\n"
    )
    MODULES["retrieval._probe"] = tmp_path / "_probe.py"
    MODULES["retrieval._probe"].write_text(source, encoding="utf-8")
    try:
        assert imports_of("retrieval._probe") == {
            "errors",
            "retrieval.keyword",
            "store",
            "cli",
            "http.run",
            "retrieval.search",
        }
    finally:
        del MODULES["retrieval._probe"]


def test_an_upward_import_and_a_circle_would_fail(monkeypatch):
    """The rules above fail on a graph that breaks them: the store importing the CLI, a
    ranking stage importing another, and the pipeline importing Base, which imports it."""
    monkeypatch.setitem(GRAPH, "store", GRAPH["store"] | {"cli"})
    with pytest.raises(AssertionError, match="imports upward"):
        test_imports_point_to_the_same_layer_or_below("store")
    with pytest.raises(AssertionError, match="imports the CLI"):
        test_nothing_imports_the_command_line()
    monkeypatch.undo()
    monkeypatch.setitem(GRAPH, "retrieval.dense", GRAPH["retrieval.dense"] | {"retrieval.fusion"})
    with pytest.raises(AssertionError, match="of its own layer"):
        test_groups_of_an_independent_layer_do_not_import_one_another()
    monkeypatch.undo()
    monkeypatch.setitem(GRAPH, "base.core", GRAPH["base.core"] | {"retrieval.steps"})
    with pytest.raises(AssertionError, match="base.core imports retrieval.steps"):
        test_a_room_is_entered_by_its_face()
    monkeypatch.undo()
    search, base = "retrieval.search", "base.core"
    monkeypatch.setitem(GRAPH, search, GRAPH[search] | {base})
    with pytest.raises(AssertionError, match="imports upward"):
        test_imports_point_to_the_same_layer_or_below(search)
    flows = {name: GRAPH[name] & {search, base, "indexing.ingest"} for name in (search, base)}
    assert find_circle(flows) == [base, search, base]
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}) is None
