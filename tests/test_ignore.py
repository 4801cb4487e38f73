"""What a folder leaves out: its .gitignore, .ignore and .metisignore files read as git reads a
.gitignore (each verdict compared with `git check-ignore`'s), its own --exclude patterns kept
with the source, and nothing indexed lost but what a rule now excludes."""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import subprocess
from contextlib import closing, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from conftest import words_only_base

from metis_lite.base.core import Base
from metis_lite.cli import main
from metis_lite.errors import InvalidRequest
from metis_lite.indexing import ignore
from metis_lite.indexing import walk as walk_module
from metis_lite.indexing.walk import walk
from metis_lite.store import SCHEMA_VERSION, Store, connection

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")

TREE = {
    # The source folder's own rules: a comment, a blank, a negation, an anchored pattern, a
    # folder-only one, a bare name (file or folder), **, an escape, trailing spaces, lines no
    # pattern (a reversed range, a trailing backslash), a negation inside a folder pattern.
    ".gitignore": (
        "# generated\n\n*.txt\n!keep.txt\n/top.md\nbuild/\nlogs.md\ndocs/**/draft.md\n"
        "\\#hash.md\nspace.md   \n[z-a]\nbad\\\nnotes/*\n!notes/kept.md\n"
    ),
    "a.md": "",
    "top.md": "",
    "sub/top.md": "",
    "x.txt": "",
    "keep.txt": "",
    "sub/keep.txt": "",
    "build/a.md": "",
    "sub/build/b.md": "",
    "build.md": "",
    "logs.md": "",
    "sub/logs.md/c.md": "",
    "docs/draft.md": "",
    "docs/a/b/draft.md": "",
    "docs/final.md": "",
    "#hash.md": "",
    "space.md": "",
    "notes/kept.md": "",
    "notes/other.md": "",
    "notes/deep/kept.md": "",
    # A deeper file overrides: a negation of the parent's *.txt, its own anchored patterns.
    "sub/.gitignore": "!x.txt\n*.md\n!/sub-keep.md\n/only-here/\n",
    "sub/x.txt": "",
    "sub/sub-keep.md": "",
    "sub/deeper/sub-keep.md": "",
    "sub/only-here/z.txt": "",
    "sub/deeper/only-here/z.md": "",
    "sub/deeper/.gitignore": "!*.md\nz.md\n",
    "sub/deeper/y.md": "",
    # Everything out but folders and Markdown: a folder kept by a negation keeps its files.
    "nested/.gitignore": "*\n!*/\n!*.md\n",
    "nested/a.md": "",
    "nested/b.txt": "",
    "nested/in/c.md": "",
    "nested/in/d.txt": "",
    # A folder left out above cannot be brought back by a negation below (never read).
    "gone/.gitignore": "!*\n",
    "gone/e.md": "",
    # Folder-only patterns match folders, not files of that name.
    "pat/.gitignore": "dir.md/\nfile.md/\n",
    "pat/dir.md": "",
    "pat/file.md": "",
    "pat/sub/dir.md/x.md": "",
    "dironly/file.md": "",
    # doc/** above and !**/ below: the folder is kept, its files still left out by doc/**.
    "up/.gitignore": "doc/**\n",
    "up/doc/.gitignore": "!**/\n",
    "up/doc/sub/f.md": "",
    "up/doc/g.md": "",
}
"""A tree of nested ignore files; `gone/` is left out by the root's `.metisignore`-free rule
below (ROOT_EXTRA), so that a negation inside it is never read."""

ROOT_EXTRA = "gone/\n"


def make_tree(root: Path, tree: dict[str, str]) -> None:
    for name, text in tree.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def git_kept(root: Path) -> set[str]:
    """The files (not hidden, outside .git) that git does not ignore, by `git check-ignore`
    (with no configuration of the machine's or the user's: no global excludes file)."""
    env = {
        **os.environ,
        "HOME": str(root),
        "XDG_CONFIG_HOME": str(root),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    subprocess.run([GIT, "init", "-q", str(root)], check=True, env=env)
    files = sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    checked = subprocess.run(
        [GIT, "-C", str(root), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(files) + "\n",
        capture_output=True,
        text=True,
        env=env,
    )
    assert checked.returncode in (0, 1), checked.stderr  # 1: nothing is ignored
    ignored = set(checked.stdout.splitlines())
    return {f for f in files if f not in ignored}


def listed(root: Path, **rules) -> set[str]:
    return {f.name for f in walk(root, [], "s", **rules).files}


@needs_git
def test_every_files_verdict_is_gits(tmp_path):
    tree = {**TREE, ".gitignore": TREE[".gitignore"] + ROOT_EXTRA}
    make_tree(tmp_path / "src", tree)
    kept = git_kept(tmp_path / "src")
    assert {"nested/in/c.md", "keep.txt", "sub/x.txt", "notes/kept.md"} <= kept  # negations
    assert not {"top.md", "build/a.md", "gone/e.md", "up/doc/sub/f.md"} & kept
    assert listed(tmp_path / "src") == kept


@needs_git
def test_ignore_and_metisignore_weigh_more_than_gitignore_in_their_folder(tmp_path):
    """Each folder's three files read as one .gitignore of their lines in that order: git,
    given that one file, keeps exactly what the walk keeps."""
    rules = {
        "": ("*.md\nlogs/\n", "!a.md\n!logs/\n", "b.md\nlogs/x.md\n"),
        "sub/": ("!*.md\n", "c.md\n", "!c.md\nd.md\n"),
    }
    files = ["a.md", "b.md", "c.md", "logs/x.md", "logs/y.md", "sub/c.md", "sub/d.md", "sub/e.md"]
    ours, gits = tmp_path / "ours", tmp_path / "gits"
    for root in (ours, gits):
        make_tree(root, dict.fromkeys(files, ""))
    for folder, (gitignore, ignore_file, metisignore) in rules.items():
        (ours / folder / ".gitignore").write_text(gitignore)
        (ours / folder / ".ignore").write_text(ignore_file)
        (ours / folder / ".metisignore").write_text(metisignore)
        (gits / folder / ".gitignore").write_text(gitignore + ignore_file + metisignore)
    assert listed(ours) == git_kept(gits) == {"a.md", "sub/c.md", "sub/e.md"}


@needs_git
def test_exclude_patterns_come_after_every_ignore_file(tmp_path):
    """A source's own patterns read as lines after its root's .gitignore (git's verdict on a
    tree whose only ignore file is the root's), and after deeper ignore files too."""
    flat = {k: v for k, v in TREE.items() if not k.endswith("ignore") or k == ".gitignore"}
    excludes = ("*.md", "!top.md", "!build/", "!sub/**")
    make_tree(tmp_path / "src", flat)
    make_tree(tmp_path / "gits", {**flat, ".gitignore": TREE[".gitignore"] + "\n".join(excludes)})
    kept = listed(tmp_path / "src", excludes=excludes)
    assert kept == git_kept(tmp_path / "gits")
    assert {"top.md", "sub/top.md"} <= kept and not {"a.md", "build/a.md"} & kept
    make_tree(tmp_path / "nested", TREE)  # sub/.gitignore keeps sub/x.txt: --exclude wins
    assert "sub/x.txt" in listed(tmp_path / "nested")
    assert "sub/x.txt" not in listed(tmp_path / "nested", excludes=("*.txt",))


def test_no_ignore_reads_no_ignore_file_and_still_leaves_hidden_files_out(tmp_path):
    make_tree(tmp_path / "src", {**TREE, ".hidden.md": "", ".hid/den.md": ""})
    everything = listed(tmp_path / "src", no_ignore=True)
    assert everything == {k for k in TREE if not k.split("/")[-1].startswith(".")}
    assert listed(tmp_path / "src", no_ignore=True, excludes=("*.txt",)) == {
        n for n in everything if not n.endswith(".txt")
    }


def test_a_file_that_becomes_ignored_leaves_and_nothing_else_is_lost(tmp_path):
    src = tmp_path / "src"
    make_tree(
        src,
        {
            "a.md": "# A\n\nThe wombat.\n",
            "drafts/b.md": "# B\n\nThe numbat.\n",
            "c.txt": "The quoll.\n",
        },
    )
    with words_only_base(tmp_path / "b.db", src) as base:
        assert base.index().added == 3
        ids = dict(base.store.db.execute("SELECT path, id FROM documents"))
        (src / ".gitignore").write_text("drafts/\n")
        run = base.index()
        assert (run.added, run.updated, run.removed, run.unchanged) == (0, 0, 1, 2)
        assert dict(base.store.db.execute("SELECT path, id FROM documents")) == {
            "a.md": ids["a.md"],  # the same documents, not read again
            "c.txt": ids["c.txt"],
        }
        assert not base.search("numbat", mode="keyword").results
        (src / ".gitignore").unlink()
        assert base.index().added == 1  # back when the rule goes
        assert base.search("numbat", mode="keyword").results


def test_excluding_everything_says_no_documents_with_the_rule(tmp_path):
    src = tmp_path / "src"
    make_tree(src, {"a.md": "# A\n\nThe wombat.\n", "sub/b.md": "# B\n\nThe numbat.\n"})
    with words_only_base(tmp_path / "b.db") as base:
        base.add_source(src, excludes=["*"])
        report = base.index()
        [said] = [w for w in report.warnings if w.code == "NO_DOCUMENTS"]
        assert said.message.startswith("src: nothing of it is indexed")
        assert "--exclude '*'" in said.message
        base.add_source(src, excludes=[])
        assert base.index().added == 2
        (src / ".metisignore").write_text("# nothing here\n/*\n")
        report = base.index()
        [said] = [w for w in report.warnings if w.code == "NO_DOCUMENTS"]
        assert ".metisignore:2 '/*'" in said.message
        assert report.removed == 2


def test_a_bad_ignore_file_is_said_once_and_loses_nothing(tmp_path, monkeypatch):
    src = tmp_path / "src"
    make_tree(
        src,
        {
            "a.md": "# A\n\nThe wombat.\n",
            "x.txt": "Excluded.\n",
            "held/b.md": "# B\n\nThe numbat.\n",
            "held/c.md": "# C\n\nThe quoll.\n",
        },
    )
    monkeypatch.setattr(ignore, "IGNORE_FILE_LINES_MAX", 100)  # the real caps cost seconds
    monkeypatch.setattr(ignore, "IGNORE_FILE_BYTES_MAX", 4_096)
    with words_only_base(tmp_path / "b.db", src) as base:
        assert base.index().added == 4
        # Too large: read up to its cap, said once; a line no pattern: skipped, said once.
        lines = ["x.txt", "[z-a]", "bad\\"] + [f"never-{n}.md" for n in range(150)]
        (src / ".gitignore").write_text("\n".join(lines) + "\n")
        # Cannot be read (a folder of that name): the folder is held as it was indexed.
        (src / "held" / ".ignore").mkdir()
        (src / "held" / "c.md").unlink()
        (src / "held" / "d.md").write_text("# D\n\nThe bilby.\n")
        report = base.index()
        codes = [w.code for w in report.warnings]
        assert codes.count("IGNORE_FILE_TOO_LARGE") == 1
        assert codes.count("IGNORE_LINE_INVALID") == 1
        assert codes.count("IGNORE_FILE_UNREADABLE") == 1
        said = {w.code: w.message for w in report.warnings}
        assert "src/.gitignore" in said["IGNORE_FILE_TOO_LARGE"]
        assert "read up to line 100," in said["IGNORE_FILE_TOO_LARGE"]
        assert "src/.gitignore" in said["IGNORE_LINE_INVALID"]
        assert (
            "2 '[z-a]'" in said["IGNORE_LINE_INVALID"]
            and "3 'bad\\\\'" in said["IGNORE_LINE_INVALID"]
        )
        assert "src/held/.ignore" in said["IGNORE_FILE_UNREADABLE"]
        assert (report.added, report.removed) == (0, 1)  # x.txt out by the first line read
        paths = {p for (p,) in base.store.db.execute("SELECT path FROM documents")}
        assert paths == {"a.md", "held/b.md", "held/c.md"}  # held: kept, nothing new read
        (src / "held" / ".ignore").rmdir()
        report = base.index()
        assert (report.added, report.removed) == (1, 1)  # read again: d.md in, c.md out
        # Past its bytes: read up to the last whole line before the cap.
        (src / ".gitignore").write_text("x.txt\n# " + "-" * 5_000 + "\na.md\n")
        report = base.index()
        [large] = [w.message for w in report.warnings if w.code == "IGNORE_FILE_TOO_LARGE"]
        assert "read up to line 1," in large
        assert report.removed == 0  # a.md, after the cap, is not read


def test_bad_exclude_patterns_are_refused_before_anything_is_written(tmp_path):
    src = tmp_path / "src"
    make_tree(src, {"a.md": "# A\n\nThe wombat.\n"})
    for bad in ("", "# a comment", "[z-a]", "a\\", "two\nlines", "x" * 5_000):
        with pytest.raises(InvalidRequest):
            ignore.check_excludes([bad])
    with pytest.raises(InvalidRequest, match="at most 1000"):
        ignore.check_excludes(["*.md"] * 1_001)
    run = cli("index", str(tmp_path / "new.db"), str(src), "--exclude", "[z-a]")
    assert run.returncode == 2 and "INVALID_REQUEST" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "new.db").exists()
    alone = cli("index", str(tmp_path / "new.db"), "--exclude", "*.md")
    assert alone.returncode == 2 and "name the folder" in alone.stderr
    assert not (tmp_path / "new.db").exists()


def cli(*args: str) -> subprocess.CompletedProcess:
    """The command line, in this process: its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_a_folders_rules_are_kept_shown_and_changed_from_the_command_line(tmp_path):
    src = tmp_path / "src"
    make_tree(
        src,
        {
            ".gitignore": "build/\n",
            "a.md": "# A\n\nThe wombat.\n",
            "b.log.md": "# Log\n\nThe numbat.\n",
            "build/c.md": "# C\n\nThe quoll.\n",
            ".hidden.md": "# H\n\nThe bilby.\n",
        },
    )
    base = str(tmp_path / "b.db")
    words_only_base(tmp_path / "b.db").close()

    def index(*args: str) -> None:
        run = cli("index", base, *args)
        assert run.returncode in (0, 3), run.stderr  # 3: the dead model left chunks waiting

    def documents() -> set[str]:
        with closing(sqlite3.connect(base)) as plain:
            return {p for (p,) in plain.execute("SELECT path FROM documents")}

    index(str(src), "--exclude", "*.log.md")
    assert documents() == {"a.md"}
    shown = cli("sources", base)
    assert f"src: {src.resolve()} · 1 documents · 1 chunks · excludes '*.log.md'" in shown.stdout
    [source] = json.loads(cli("sources", base, "--json").stdout)["sources"]
    assert (source["kind"], source["excludes"], source["no_ignore"]) == (
        "folder",
        ["*.log.md"],
        False,
    )
    index(str(src))  # named again without rules: kept
    assert documents() == {"a.md"}
    index(str(src), "--no-ignore")
    assert documents() == {"a.md", "build/c.md"}  # hidden files stay out
    assert "ignore files not read (--no-ignore)" in cli("sources", base).stdout
    index(str(src), "--no-exclude", "--ignore-files")
    assert documents() == {"a.md", "b.log.md"}
    [source] = json.loads(cli("sources", base, "--json").stdout)["sources"]
    assert (source["excludes"], source["no_ignore"]) == ([], False)


def test_an_older_base_gets_its_source_options_and_reads_its_folders_as_before(tmp_path):
    """A base of schema version 2 (no source_options): read as it is, its folder sources
    read their ignore files from the first run; its first write makes the table and records
    version 3, which an older metis-lite refuses rather than index what a source excludes."""
    src = tmp_path / "src"
    make_tree(src, {"a.md": "# A\n\nThe wombat.\n", "b.md": "# B\n\nThe numbat.\n"})
    path = tmp_path / "old.db"
    with words_only_base(path, src) as base:
        base.index()
    with closing(sqlite3.connect(path)) as plain, plain:
        plain.execute("DROP TABLE source_options")
        plain.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    real = connection.connect
    with pytest.MonkeyPatch.context() as patch:  # read-only first: nothing written
        patch.setattr(
            connection,
            "connect",
            lambda p, **kw: real(p, **{**kw, "readonly": True, "create": False}),
        )
        before = path.read_bytes()
        with Base(path) as base:
            [source] = base.sources()
            assert (source.kind, source.excludes, source.documents) == ("folder", (), 2)
        assert path.read_bytes() == before
    (src / ".gitignore").write_text("b.md\n")
    with Base(path) as base:
        assert base.index().removed == 1
        [source] = base.sources()
        assert (source.kind, source.documents) == ("folder", 1)
        base.add_source(src, excludes=["a.md"])
        assert base.sources()[0].excludes == ("a.md",)
    with closing(sqlite3.connect(path)) as plain:
        version = plain.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert int(version[0]) == SCHEMA_VERSION >= 3
        assert plain.execute("SELECT kind, excludes FROM source_options").fetchall() == [
            ("folder", '["a.md"]')
        ]
    with Store(path) as store:  # removing the source removes its options with it
        store.remove_source("src")
        assert store.source_options() == {}


def test_an_exclude_pattern_cannot_be_set_on_a_file_source(tmp_path):
    make_tree(tmp_path, {"notes.md": "# N\n\nThe wombat.\n"})
    with words_only_base(tmp_path / "b.db") as base:
        with pytest.raises(InvalidRequest, match="is a file"):
            base.add_source(tmp_path / "notes.md", excludes=["*.md"])
        with pytest.raises(InvalidRequest, match="is a file"):
            base.add_source(tmp_path / "notes.md", no_ignore=True)
        assert base.sources() == ()


SPHINX_BUILD = {
    "html/objects.inv": "",
    "html/index.html": "<html><body><main><h1>Docs</h1><p>The wombat.</p></main></body></html>",
    "html/library/os.html": "<html><body><main><h1>os</h1><p>The numbat.</p></main></body></html>",
    "html/_sources/index.rst.txt": "Docs\n====\n\nThe wombat.\n",
    "html/_sources/library/os.rst.txt": ":mod:`os`\n=========\n\nThe numbat.\n",
    "notes/_sources/kept.md": "# Kept\n\nA folder of that name elsewhere is read.\n",
}


def test_a_sphinx_builds_copies_of_its_sources_are_left_out_and_said(tmp_path):
    src = tmp_path / "src"
    make_tree(src, SPHINX_BUILD)
    pages = {"html/index.html", "html/library/os.html", "notes/_sources/kept.md"}
    skipped: list = []
    assert {f.name for f in walk(src, skipped, "s").files} == pages
    assert [(s.path, s.reason) for s in skipped] == [
        ("s/html/_sources/", walk_module.SPHINX_SKIPPED)
    ]
    # Read as an ignore file of the build's folder would be: --no-ignore reads them, so do a
    # negation in --exclude and one in the build's own ignore file; its marks are either file.
    every = pages | {"html/_sources/index.rst.txt", "html/_sources/library/os.rst.txt"}
    assert listed(src, no_ignore=True) == every
    assert listed(src, excludes=("!_sources/",)) == every
    (src / "html" / ".metisignore").write_text("!_sources/\n")
    assert listed(src) == every
    (src / "html" / ".metisignore").unlink()
    (src / "html" / "objects.inv").rename(src / "html" / "searchindex.js")
    assert listed(src) == pages
    (src / "html" / "searchindex.js").unlink()  # no longer a Sphinx build: its sources read
    assert listed(src) == every


def test_a_base_of_a_sphinx_build_holds_its_pages_once_and_says_why(tmp_path):
    src = tmp_path / "src"
    make_tree(src, SPHINX_BUILD)
    (src / "html" / "objects.inv").unlink()  # built as a folder of text before Sphinx's marks
    with words_only_base(tmp_path / "b.db", src) as base:
        assert base.index().added == 5
        (src / "html" / "objects.inv").write_text("")
        run = base.index()
        assert (run.added, run.removed) == (0, 2)  # the copies leave, the pages stay
        assert ("src/html/_sources/", walk_module.SPHINX_SKIPPED) in [
            (s.path, s.reason) for s in run.skipped
        ]
        [numbat] = base.search("numbat", mode="keyword").results
        assert numbat.citation.document == "html/library/os.html"
