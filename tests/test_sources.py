"""Sources: no file indexed twice, each listed with what it holds, one removed with its
documents; a command that fails before it writes leaves no new base; a memory needs no folder;
a file is a source too (read alone; gone, a folder now, or a link swapped in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, words_only_base

from metis_lite.base.core import Base
from metis_lite.errors import BaseBusy, InvalidRequest, SourceNotFound, SourceOverlap
from metis_lite.store import IndexerLock, Store


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def cli(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "metis_lite", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / "docs"
    write(folder, "intro.md", "# Intro\n\nThe wombat lives here.\n")
    write(folder, "work/plan.md", "# Plan\n\nThe numbat plan.\n")
    write(folder, "work/notes.txt", "Numbat notes.\n")
    return folder


def test_a_folder_inside_a_source_or_holding_one_is_refused_naming_both(docs, tmp_path):
    with words_only_base(tmp_path / "b.db", docs) as base:
        with pytest.raises(SourceOverlap) as inside:
            base.add_source(docs / "work")
        assert inside.value.code == "SOURCE_OVERLAP"
        assert str((docs / "work").resolve()) in inside.value.message
        assert "source docs" in inside.value.message
        assert [s.name for s in base.sources()] == ["docs"]
    with words_only_base(tmp_path / "c.db", docs / "work") as base:
        with pytest.raises(SourceOverlap, match="holds the base's source work"):
            base.add_source(docs)
        assert base.add_source(docs / "work") == "work"  # the same folder again: kept


def test_the_cli_refuses_an_overlapping_folder_and_indexes_each_file_once(docs, tmp_path):
    base_file = str(tmp_path / "b.db")
    words_only_base(tmp_path / "b.db").close()
    assert cli("index", base_file, str(docs)).returncode in (0, 3)
    refused = cli("index", base_file, str(docs / "work"))
    assert refused.returncode == 2
    assert "SOURCE_OVERLAP" in refused.stderr and "Traceback" not in refused.stderr
    with Base(base_file) as base:
        hits = base.search("numbat", mode="keyword").results
        assert sorted(r.citation.document for r in hits) == ["work/notes.txt", "work/plan.md"]


def test_a_base_that_already_holds_overlapping_sources_indexes_each_file_once(docs, tmp_path):
    """Made before overlaps were refused: the inner source's own documents go (the outer
    source holds the same files), and the run says why."""
    with words_only_base(tmp_path / "b.db", docs) as base:
        inner = base.store.db.execute(  # as an older metis-lite let it be added
            "INSERT INTO sources (name, path, added_at) VALUES ('work', ?, 'then') RETURNING id",
            (str((docs / "work").resolve()),),
        ).fetchone()[0]
        base.store.db.execute(
            "INSERT INTO documents (source_id, path, kind, title, content_hash, size, indexed_at)"
            " VALUES (?, 'plan.md', 'md', 'Plan', 'x', 1, 'then')",
            (inner,),
        )
        report = base.index()
        why = {s.path: s.reason for s in report.skipped}
        assert "lies inside the source docs" in why["work/"]
        hits = base.search("numbat", mode="keyword").results
        assert sorted(f"{r.citation.source}/{r.citation.document}" for r in hits) == [
            "docs/work/notes.txt",
            "docs/work/plan.md",
        ]
        assert {s.name: s.documents for s in base.sources()} == {"docs": 3, "work": 0}


def test_sources_are_listed_with_what_they_hold_and_one_is_removed_with_it(docs, tmp_path):
    other = tmp_path / "other"
    write(other, "a.md", "# A\n\nThe quoll.\n")
    with words_only_base(tmp_path / "b.db", docs, other) as base:
        base.index()
        base.remember("The team meets on Tuesdays")
        listed = {s.name: s for s in base.sources()}
        assert list(listed) == ["docs", "other", "metis-b"]
        assert (listed["docs"].path, listed["docs"].documents, listed["docs"].chunks) == (
            str(docs.resolve()),
            3,
            3,
        )
        assert listed["metis-b"].path is None and listed["metis-b"].documents == 1
        assert base.remove_source("docs") == 3
        assert [s.name for s in base.sources()] == ["other", "metis-b"]
        assert not base.search("numbat", mode="keyword").results
        assert base.search("quoll", mode="keyword").results
        assert base.store.counts()["chunks"] == 2  # other/a.md and the fact
        assert base.index().added == 0  # the folder is not a source any more
        assert (docs / "intro.md").exists()  # its files are never touched
        with pytest.raises(SourceNotFound) as unknown:
            base.remove_source("docs")
        assert unknown.value.code == "SOURCE_NOT_FOUND" and "other" in unknown.value.message
        with pytest.raises(InvalidRequest, match="facts"):
            base.remove_source("metis-b")
        with IndexerLock(tmp_path / "b.db"), pytest.raises(BaseBusy):
            base.remove_source("other")
        assert [s.name for s in base.sources()] == ["other", "metis-b"]


def test_the_sources_command_lists_and_removes(docs, tmp_path):
    base_file = str(tmp_path / "b.db")
    words_only_base(tmp_path / "b.db", docs).close()
    cli("index", base_file)
    listed = cli("sources", base_file)
    assert listed.returncode == 0
    assert f"docs: {docs.resolve()} · 3 documents · 3 chunks" in listed.stdout
    [source] = json.loads(cli("sources", base_file, "--json").stdout)["sources"]
    assert {k: source[k] for k in ("name", "path", "documents", "chunks")} == {
        "name": "docs",
        "path": str(docs.resolve()),
        "documents": 3,
        "chunks": 3,
    }
    unknown = cli("sources", base_file, "--remove", "nope")
    assert unknown.returncode == 2 and "SOURCE_NOT_FOUND" in unknown.stderr
    removed = cli("sources", base_file, "--remove", "docs", "--json")
    assert removed.returncode == 0
    assert json.loads(removed.stdout) == {"source": "docs", "documents": 3}
    assert json.loads(cli("sources", base_file, "--json").stdout) == {"sources": []}


def test_a_failed_command_leaves_no_new_base_behind(docs, tmp_path):
    for args in (
        ["missing-folder"],
        [str(docs), "--chunk-size", "5"],
        [str(docs), "--embedding", "tei"],  # an HTTP provider without its url
    ):
        new = tmp_path / "new.db"
        run = cli("index", str(new), *args)
        assert run.returncode == 2, run.stderr
        assert "Traceback" not in run.stderr
        assert not list(tmp_path.glob("new.db*")), args
    with pytest.raises(InvalidRequest), Base(tmp_path / "lib.db", create=True) as base:
        base.configure(chunk_size=5)
    assert not (tmp_path / "lib.db").exists()
    with words_only_base(tmp_path / "kept.db", docs) as base:  # written to: kept
        pass
    with pytest.raises(InvalidRequest), Base(tmp_path / "kept.db", create=True) as base:
        base.configure(chunk_size=5)
    assert (tmp_path / "kept.db").exists()


def test_a_new_empty_base_another_connection_has_open_is_kept_and_only_sqlite_removes_files(
    tmp_path,
):
    """discard() leaves WAL mode first, which SQLite does (removing the -wal and -shm itself)
    only while no other connection has the base open: one that has it keeps it whole."""
    base = Base(tmp_path / "new.db", create=True)
    other = Store(tmp_path / "new.db")
    try:
        assert base.discard() is False
        assert other.counts()["sources"] == 0  # still a base the other connection reads
    finally:
        other.close()
    assert (tmp_path / "new.db").exists()
    alone = Base(tmp_path / "alone.db", create=True)
    assert alone.discard() is True
    assert not list(tmp_path.glob("alone.db*"))


def test_a_memory_needs_no_folder_and_says_so(tmp_path):
    team = str(tmp_path / "team.db")
    made = cli("index", team, "--kind", "memory")
    assert made.returncode == 0, made.stderr
    assert "no source yet" not in made.stderr
    assert "memory base" in made.stderr and "needs no folder" in made.stderr
    assert cli("remember", team, "Ana works on billing", "--key", "ana/work").returncode in (0, 3)
    again = cli("index", team, "--kind", "memory")
    assert "no source yet" not in again.stderr
    missing = cli("remember", str(tmp_path / "none.db"), "A fact")
    assert missing.returncode == 2
    assert "--kind memory" in missing.stderr and not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("where", ["the folder", "a folder above it"])
def test_a_source_folder_that_became_a_symlink_is_refused_and_never_followed(tmp_path, where):
    outside = tmp_path / "outside"
    write(outside / "docs", "secret.md", "# Secret\n\nThe combination is 4711.\n")
    write(outside / "docs", "intro.md", "# Intro\n\nThe wombat lives elsewhere.\n")
    docs = tmp_path / "tree" / "docs"
    write(docs, "intro.md", "# Intro\n\nThe wombat lives here.\n")
    with words_only_base(tmp_path / "b.db", docs) as base:
        assert base.index().added == 1
        swapped = docs if where == "the folder" else docs.parent
        swapped.rename(tmp_path / "moved")
        swapped.symlink_to(outside if where == "a folder above it" else outside / "docs")
        report = base.index()
        assert [w.code for w in report.warnings if w.code == "SOURCE_IS_A_LINK"] == [
            "SOURCE_IS_A_LINK"
        ]
        assert [s.path for s in report.skipped] == ["docs/"]
        assert "never followed" in report.skipped[0].reason
        assert (report.added, report.removed) == (0, 0)  # its documents are kept
        assert not base.search("combination", mode="keyword").results
        found = base.search("wombat", mode="keyword").results
        assert [r.text for r in found] == ["The wombat lives here."]
    run = cli("index", str(tmp_path / "b.db"))
    assert "SOURCE_IS_A_LINK" in run.stderr and "Traceback" not in run.stderr


# -- a file as a source: read alone, again when it changes; gone, a folder now, or a link


def test_a_file_is_a_source_read_again_when_it_changes(tmp_path):
    notes = write(tmp_path / "papers", "survey.md", "# Survey\n\nThe wombat burrows.\n")
    write(tmp_path / "papers", "other.md", "# Other\n\nThe numbat.\n")  # beside it: not read
    base_file = str(tmp_path / "b.db")
    words_only_base(tmp_path / "b.db").close()
    assert cli("index", base_file, str(notes)).returncode in (0, 3)  # 3: the dead model
    with Base(base_file) as base:
        [source] = base.sources()
        assert (source.name, source.path, source.kind, source.documents) == (
            "survey",
            str(notes.resolve()),
            "file",
            1,
        )
        [hit] = base.search("wombat", mode="keyword").results
        assert (hit.citation.source, hit.citation.document) == ("survey", "survey.md")
        assert not base.search("numbat", mode="keyword").results
        write(notes.parent, "survey.md", "# Survey\n\nThe wombat digs, revised.\n")
        os.utime(notes, (1, 1))
        report = base.index()
        assert (report.added, report.updated, report.unchanged) == (0, 1, 0)
        assert base.search("revised", mode="keyword").results
        assert base.index().unchanged == 1
        assert base.add_source(notes) == "survey"  # named again: the same source
        with pytest.raises(SourceOverlap, match="holds the base's source survey"):
            base.add_source(notes.parent)
    shown = cli("sources", base_file)
    assert f"survey: {notes.resolve()} (a file) · 1 documents" in shown.stdout


def test_a_file_inside_a_folder_source_a_file_of_no_kind_and_nothing_are_refused(docs, tmp_path):
    (tmp_path / "photo.gif").write_bytes(b"GIF89a")
    with words_only_base(tmp_path / "b.db", docs) as base:
        with pytest.raises(SourceOverlap, match="lies inside the base's source docs"):
            base.add_source(docs / "intro.md")
        with pytest.raises(InvalidRequest, match="not a kind of file metis-lite reads"):
            base.add_source(tmp_path / "photo.gif")
        with pytest.raises(InvalidRequest, match="is not a folder or a file"):
            base.add_source(tmp_path / "nothing.md")
        assert [s.name for s in base.sources()] == ["docs"]
    refused = cli("index", str(tmp_path / "new.db"), str(tmp_path / "photo.gif"))
    assert refused.returncode == 2 and "INVALID_REQUEST" in refused.stderr
    assert not (tmp_path / "new.db").exists()


def test_a_file_source_that_is_deleted_leaves_with_a_warning_and_comes_back(tmp_path):
    notes = write(tmp_path / "papers", "survey.md", "# Survey\n\nThe wombat burrows.\n")
    with words_only_base(tmp_path / "b.db", notes) as base:
        assert base.index().added == 1
        notes.unlink()
        report = base.index()
        assert report.removed == 1
        [warning] = [w for w in report.warnings if w.code == "SOURCE_FILE_MISSING"]
        assert str(notes) in warning.message and "its document was removed" in warning.message
        assert not base.search("wombat", mode="keyword").results
        again = base.index()  # said once: later runs skip it with why
        assert again.removed == 0 and not any(
            w.code == "SOURCE_FILE_MISSING" for w in again.warnings
        )
        assert [s.path for s in again.skipped] == ["survey/"]
        write(notes.parent, "survey.md", "# Survey\n\nThe wombat is back.\n")
        assert base.index().added == 1
        # Its whole folder gone (a drive not mounted): kept, as a missing folder's documents.
        notes.parent.rename(tmp_path / "elsewhere")
        report = base.index()
        assert report.removed == 0 and "folder of" in report.skipped[0].reason
        assert base.search("back", mode="keyword").results


def test_a_file_source_replaced_by_a_folder_is_not_read_until_named_again(tmp_path):
    notes = write(tmp_path, "survey.md", "# Survey\n\nThe wombat burrows.\n")
    with words_only_base(tmp_path / "b.db", notes) as base:
        assert base.index().added == 1
        notes.unlink()
        write(notes, "inside.md", "# Inside\n\nThe numbat.\n")  # survey.md/ is a folder now
        report = base.index()
        [warning] = [w for w in report.warnings if w.code == "SOURCE_NOT_A_FILE"]
        assert "now a folder, which is not read" in warning.message
        assert "metis-lite index BASE" in warning.message
        assert (report.added, report.removed) == (0, 1)
        assert not base.search("numbat", mode="keyword").results
        assert base.add_source(notes) == "survey"  # named again: a folder source now
        assert base.sources()[0].kind == "folder"
        assert base.index().added == 1
        [hit] = base.search("numbat", mode="keyword").results
        assert hit.citation.document == "inside.md"


def test_a_file_source_is_followed_through_a_link_only_when_added(tmp_path):
    """As for folders: a link named on the command line is resolved once, to the file it
    leads to; a link that later takes the file's place is never followed."""
    real = write(tmp_path / "real", "survey.md", "# Survey\n\nThe wombat burrows.\n")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    secret = write(tmp_path / "outside", "secret.md", "# Secret\n\nThe combination is 4711.\n")
    with words_only_base(tmp_path / "b.db") as base:
        assert base.add_source(link) == "survey"
        assert base.sources()[0].path == str(real.resolve())
        assert base.index().added == 1
        real.unlink()
        real.symlink_to(secret)
        report = base.index()
        [warning] = [w for w in report.warnings if w.code.startswith("SOURCE_")]
        assert warning.code == "SOURCE_IS_A_LINK" and "source file" in warning.message
        assert (report.added, report.removed) == (0, 0)  # its document is kept
        assert not base.search("combination", mode="keyword").results
        assert base.search("wombat", mode="keyword").results
