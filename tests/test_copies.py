"""One result per text, on the index side: a file with the bytes of an indexed document is a
copy of it, never parsed or embedded again, and nothing indexed is lost when either changes or
goes; chunks with the same text are embedded once (docs/indexing.md, "Copies")."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, words_only_base
from word_models import WORDS, WordsEmbedder, serving

from metis_lite.base.core import Base
from metis_lite.models import registry
from metis_lite.store import Store

PAGE = "# Install\n\nRun the installer, then restart the proxy of the office network.\n"
NOTICE = "Copyright notice: share this page under the same licence, without any warranty."


class Counting(WordsEmbedder):
    """The words-hash model, keeping every text it was given."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts):
        self.texts += list(texts)
        return super().embed(texts)


@pytest.fixture
def model():
    counting = Counting()
    with registry.registered(serving(counting)):
        yield counting


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def new_base(path: Path, *folders: Path) -> Base:
    """A base of `folders` whose model is the words-hash one (the `model` fixture's)."""
    base = words_only_base(path, *folders)
    base.configure(embedding=WORDS)
    return base


def pages(tmp_path: Path, *names: str) -> Path:
    """A folder holding PAGE under each name."""
    for name in names:
        write(tmp_path / "docs", name, PAGE)
    return tmp_path / "docs"


def documents(base: Base) -> dict[str, list[int]]:
    """Each document's path, with its chunk ids."""
    rows = base.store.db.execute(
        "SELECT d.path, c.id FROM documents d JOIN chunks c ON c.document_id = d.id"
        " ORDER BY d.path, c.ordinal"
    )
    out: dict[str, list[int]] = {}
    for path, chunk in rows:
        out.setdefault(path, []).append(chunk)
    return out


def copies(base: Base) -> dict[str, str]:
    """Each copy's path, with its document's."""
    return dict(
        base.store.db.execute(
            "SELECT c.path, d.path FROM document_copies c JOIN documents d ON d.id = c.document_id"
        )
    )


def test_a_file_with_the_bytes_of_an_indexed_document_is_its_copy(tmp_path, model):
    src = tmp_path / "docs"
    write(src, "guide/install.md", PAGE)
    write(src, "old/install.md", PAGE)  # byte for byte: a copy
    write(src, "install.txt", PAGE)  # the same bytes, another kind: its own document
    write(src, "empty.md", "")
    write(src, "old/empty.md", "")  # empty files have no text: no document, no copy
    with new_base(tmp_path / "b.db", src) as base:
        first = base.index()
        assert (first.added, first.without_vector) == (3, 0)
        assert [s.reason for s in first.skipped] == ["empty file", "empty file"]
        assert set(documents(base)) == {"guide/install.md", "install.txt"}
        assert copies(base) == {"old/install.md": "guide/install.md"}
        (source,) = base.sources()
        assert (source.documents, source.copies) == (2, 1)
        assert len(model.texts) == 2  # the page once, the .txt once (another title)
        hits = base.search("installer proxy", mode="keyword").results
        assert sorted(h.citation.document for h in hits) == ["guide/install.md", "install.txt"]

        os.utime(src / "old" / "install.md", (5, 5))  # touched: read, same bytes, unchanged
        again = base.index()
        assert (again.added, again.updated, again.removed, again.unchanged) == (0, 0, 0, 3)
        assert copies(base) == {"old/install.md": "guide/install.md"}
        assert len(model.texts) == 2
    with sqlite3.connect(tmp_path / "b.db") as plain:  # a stock sqlite3 reads the new tables
        assert plain.execute("SELECT path FROM document_copies").fetchall() == [("old/install.md",)]


def test_a_search_cites_the_copies_of_a_result_as_its_other_places(tmp_path, model):
    src = pages(tmp_path, "guide/install.md", "old/install.md", "v1/install.md")
    other = tmp_path / "mirror"
    write(other, "install.md", PAGE)
    with new_base(tmp_path / "b.db", src, other) as base:
        base.index()
        for collapse in (True, False):
            for mode in ("keyword", "hybrid"):
                answer = base.search("installer proxy", mode=mode, collapse=collapse)
                (hit,) = answer.results  # one document: its copies are no results of their own
                assert hit.citation.document == "guide/install.md"
                assert [(p.citation.source, p.citation.document) for p in hit.also_in] == [
                    ("docs", "old/install.md"),
                    ("docs", "v1/install.md"),
                    ("mirror", "install.md"),
                ]
                assert {p.chunk_id for p in hit.also_in} == {hit.chunk_id}
                assert all(p.citation.snippet == hit.citation.snippet for p in hit.also_in)
        (src / "guide" / "install.md").unlink()  # the first copy takes its place
        base.index()
        (hit,) = base.search("installer proxy", mode="keyword").results
        assert hit.citation.document == "old/install.md"
        assert [p.citation.document for p in hit.also_in] == ["v1/install.md", "install.md"]


def test_a_copy_that_changes_is_a_document_and_one_deleted_is_forgotten(tmp_path, model):
    src = pages(tmp_path, "a.md", "b.md", "c.md")
    with new_base(tmp_path / "b.db", src) as base:
        base.index()
        assert set(copies(base)) == {"b.md", "c.md"}
        write(src, "b.md", PAGE + "\nAlso reboot the printer.\n")
        (src / "c.md").unlink()
        report = base.index()
        assert (report.updated, report.removed, report.unchanged) == (1, 1, 1)
        assert set(documents(base)) == {"a.md", "b.md"} and copies(base) == {}
        assert base.search("printer", mode="keyword").results[0].citation.document == "b.md"


def test_the_original_gone_or_changed_hands_its_place_to_its_first_copy(tmp_path, model):
    src = pages(tmp_path, "a.md", "x/a.md", "y/a.md")
    with new_base(tmp_path / "b.db", src) as base:
        base.index()
        chunks = documents(base)["a.md"]
        vectors = dict(base.store.db.execute("SELECT chunk_id, embedding FROM vectors"))
        embedded = len(model.texts)

        (src / "a.md").unlink()
        report = base.index()
        assert report.removed == 1 and report.without_vector == 0
        assert documents(base) == {"x/a.md": chunks}  # the same chunks: nothing cut or embedded
        assert copies(base) == {"y/a.md": "x/a.md"}
        assert dict(base.store.db.execute("SELECT chunk_id, embedding FROM vectors")) == vectors
        assert len(model.texts) == embedded
        assert base.search("installer", mode="keyword").results[0].citation.document == "x/a.md"

        write(src, "x/a.md", "# Install\n\nSomething else entirely.\n")
        report = base.index()
        assert (report.updated, report.without_vector) == (1, 0)
        assert documents(base)["y/a.md"] == chunks and copies(base) == {}
        assert set(documents(base)) == {"x/a.md", "y/a.md"}
        assert len(model.texts) == embedded + 1  # only the changed page's chunk


def test_copies_in_another_source_take_over_when_the_original_source_is_removed(tmp_path, model):
    one, two = tmp_path / "one", tmp_path / "two"
    write(one, "a.md", PAGE)
    write(two, "mirror/a.md", PAGE)
    write(two, "b.md", "# Other\n\nA page of its own.\n")
    with new_base(tmp_path / "b.db", one, two) as base:
        base.index()
        assert copies(base) == {"mirror/a.md": "a.md"}
        infos = {s.name: (s.documents, s.copies) for s in base.sources()}
        assert infos == {"one": (1, 0), "two": (1, 1)}
        chunks = documents(base)["a.md"]
        assert base.remove_source("one") == 1
        assert documents(base)["mirror/a.md"] == chunks and copies(base) == {}
        assert {s.name: (s.documents, s.copies) for s in base.sources()} == {"two": (2, 0)}
        hits = base.search("installer", mode="keyword").results
        assert [(h.citation.source, h.citation.document) for h in hits] == [("two", "mirror/a.md")]
        again = base.index()
        assert (again.added, again.removed, again.unchanged) == (0, 0, 2)


def test_a_symlink_to_a_document_is_not_indexed_twice(tmp_path, model):
    src = tmp_path / "docs"
    write(src, "a.md", PAGE)
    os.symlink(src / "a.md", src / "link.md")
    with new_base(tmp_path / "b.db", src) as base:
        base.index()
        assert list(documents(base)) == ["a.md"]
        assert set(copies(base)) <= {"link.md"}
        assert len(model.texts) == 1


def test_chunks_with_the_same_text_are_embedded_once(tmp_path, model):
    src = tmp_path / "docs"

    def page(n: int) -> None:
        words = " ".join(f"topic{n}x{i}" for i in range(150))  # a chunk of its own
        write(src, f"p{n}.md", f"# Handbook\n\n## Part {n}\n\n{words}\n\n## Licence\n\n{NOTICE}\n")

    for n in range(5):
        page(n)
    with new_base(tmp_path / "b.db", src) as base:
        report = base.index()
        assert report.without_vector == 0 and report.embedded == report.chunks
        notices = [t for t in model.texts if NOTICE in t]
        assert len(notices) == 1 and len(model.texts) == report.chunks - 4
        rows = base.store.db.execute(
            "SELECT v.embedding FROM chunks c JOIN vectors v ON v.chunk_id = c.id"
            " WHERE c.text LIKE 'Copyright notice%'"
        ).fetchall()
        assert len(rows) == 5 and len({bytes(r[0]) for r in rows}) == 1
        page(5)  # a later run: the notice has its vector in the base already
        before = len(model.texts)
        later = base.index()
        assert not [t for t in model.texts[before:] if NOTICE in t]
        assert len(model.texts) == before + later.chunks - report.chunks - 1
        got = base.search("copyright licence warranty", mode="dense").results
        assert got and np.isfinite(got[0].scores.fused)


def test_a_reader_never_sees_a_text_missing_while_its_original_moves(tmp_path, model):
    """Another connection (as another process would) counts documents and copies in its
    snapshots while a run records 30 copies, then while the next moves the original to its
    first copy: each snapshot sees the text indexed once, its copies whole."""
    src = tmp_path / "docs"
    write(src, "a.md", PAGE)
    for n in range(30):
        write(src, f"copies/c{n:02}.md", PAGE)
    seen: list[list[tuple[int, int]]] = [[], []]
    done = threading.Event()

    def read(into: list[tuple[int, int]]) -> None:
        with Store(tmp_path / "b.db", readonly=True) as reader:
            while True:  # one read at least, however soon the run ends
                with reader.snapshot():
                    row = reader.db.execute(
                        "SELECT (SELECT count(*) FROM documents),"
                        " (SELECT count(*) FROM document_copies)"
                    ).fetchone()
                into.append((int(row[0]), int(row[1])))
                if done.is_set():
                    return

    with new_base(tmp_path / "b.db", src) as base:
        for n, change in enumerate((lambda: None, lambda: (src / "a.md").unlink())):
            change()
            reader = threading.Thread(target=read, args=(seen[n],))
            reader.start()
            try:
                base.index()
            finally:
                done.set()
                reader.join(30)
            done.clear()
        assert documents(base).keys() == {"copies/c00.md"} and len(copies(base)) == 29
    first, second = seen
    assert first and all(docs == 1 or (docs, held) == (0, 0) for docs, held in first)
    assert second and set(second) <= {(1, 30), (1, 29)}


SQLITE3 = shutil.which("sqlite3")


@pytest.mark.skipif(SQLITE3 is None, reason="Debian's sqlite3 package (scripts/test installs it)")
def test_another_process_records_copies_while_threads_search_and_the_sqlite3_shell_reads(
    tmp_path,
):
    """An index run in a second process records 40 copies while two threads of this one
    search the base and the stock sqlite3 shell reads it: no snapshot holds the text twice as
    a document, every search finds it once (its copies as its places), and the end is whole."""
    src = tmp_path / "docs"
    write(src, "a.md", PAGE)
    for n in range(40):
        write(src, f"copies/c{n:02}.md", PAGE)
        write(src, f"other/o{n:02}.md", f"# Note {n}\n\nunrelated words number {n}.\n")
    base_file = tmp_path / "b.db"
    words_only_base(base_file, src).close()
    done = threading.Event()
    found: list[list[int]] = []  # each search: the places of each result holding the text
    counted: list[str] = []  # each shell read: documents holding the text, copies

    def search() -> None:
        with Base(base_file) as base:
            while True:  # one search at least, however soon the run ends
                results = base.search("installer proxy", mode="keyword").results
                found.append([1 + len(r.also_in) for r in results if "installer" in r.text])
                if done.is_set():
                    return

    def shell() -> None:
        while True:
            counted.append(shell_counts(base_file))
            if done.is_set():
                return

    clients = [threading.Thread(target=search) for _ in range(2)]
    clients.append(threading.Thread(target=shell))
    for client in clients:
        client.start()
    try:
        run = subprocess.run(
            [sys.executable, "-m", "metis_lite", "index", str(base_file), "--quiet"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    finally:
        done.set()
        for client in clients:
            client.join(60)
    assert run.returncode in (0, 3), run.stderr  # 3: vectors wait (no model answers here)
    assert found and counted
    assert all(len(places) <= 1 for places in found)  # never the text as two results
    assert all(int(row.split("|")[0]) <= 1 for row in counted)  # nor as two documents
    with Base(base_file) as base:
        (result,) = [
            r
            for r in base.search("installer proxy", mode="keyword").results
            if "installer" in r.text
        ]
        assert len(result.also_in) == 40
    assert shell_counts(base_file) == "1|40"


def shell_counts(base_file: Path) -> str:
    """'documents holding PAGE|copies', as the stock sqlite3 shell reads them (read-only,
    waiting for a writer as any client must)."""
    assert SQLITE3 is not None
    sql = (
        "SELECT (SELECT count(*) FROM documents WHERE path = 'a.md' OR path LIKE 'copies/%'),"
        " (SELECT count(*) FROM document_copies);"
    )
    run = subprocess.run(
        [SQLITE3, "-readonly", "-cmd", ".timeout 10000", str(base_file), sql],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_sources_and_status_count_the_copies(tmp_path):
    src = pages(tmp_path, "a.md", "b/a.md", "c/a.md")
    with words_only_base(tmp_path / "b.db", src) as base:
        base.index()
        status = base.status()
        assert (status.documents, [s.copies for s in status.sources]) == (1, [2])

    def cli(*args: str) -> str:
        command = [sys.executable, "-m", "metis_lite", *args, str(tmp_path / "b.db")]
        return subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout

    assert "docs · 1 documents (+ 2 copies) · 1 chunks" in cli("sources")
    assert json.loads(cli("sources", "--json"))["sources"][0]["copies"] == 2
    assert "documents 1 (+ 2 copies) · chunks 1" in cli("status")


def test_an_older_base_gets_the_new_tables_when_opened(tmp_path):
    src = tmp_path / "docs"
    write(src, "a.md", PAGE)
    write(src, "b.md", PAGE)
    with words_only_base(tmp_path / "b.db", src) as base:
        base.index()
    with sqlite3.connect(tmp_path / "b.db") as plain:  # as a base of schema version 4 was made
        for table in ("document_copies", "chunk_digests"):
            plain.execute(f"DROP TABLE {table}")
        plain.execute("DROP INDEX documents_by_hash")
    with Base(tmp_path / "b.db") as base:
        assert copies(base) == {}
        report = base.index()  # b.md, a copy no table held, is found again
        assert (report.added, report.unchanged) == (1, 1) and copies(base) == {"b.md": "a.md"}
