"""Indexing: incremental runs, every kind of bad input skipped with its reason, nothing lost,
one indexer at a time, and a kill -9 at any moment leaves a base the next run completes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest
from conftest import EXAMPLES, FIXTURES, ROOT, words_only_base

from metis_lite.base.core import Base
from metis_lite.errors import BaseBusy
from metis_lite.store import IndexerLock, Store


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def documents(base: Base) -> dict[str, str]:
    return dict(base.store.db.execute("SELECT path, content_hash FROM documents"))


def indexed(base: Base) -> set[str]:
    """The paths of the documents and of their copies (test_copies.py)."""
    copies = base.store.db.execute("SELECT path FROM document_copies")
    return {*documents(base), *(path for (path,) in copies)}


def test_incremental_runs(tmp_path):
    src = tmp_path / "src"
    write(src, "a.md", "# A\n\nAlpha text about proxies.\n")
    write(src, "sub/b.txt", "Beta text.\n")
    with words_only_base(tmp_path / "b.db", src) as base:
        first = base.index()
        assert (first.added, first.updated, first.removed, first.unchanged) == (2, 0, 0, 0)
        again = base.index()
        assert (again.added, again.updated, again.removed, again.unchanged) == (0, 0, 0, 2)
        write(src, "a.md", "# A\n\nAlpha text, changed.\n")
        os.utime(src / "a.md", (1, 1))  # a different time, so the hash is looked at
        (src / "sub" / "b.txt").unlink()
        write(src, "c.html", "<title>C</title><p>Gamma</p>")
        third = base.index()
        assert (third.added, third.updated, third.removed, third.unchanged) == (1, 1, 1, 0)
        assert set(documents(base)) == {"a.md", "c.html"}
        # Touched but identical content: the hash says unchanged, nothing is re-parsed.
        os.utime(src / "c.html", (2, 2))
        fourth = base.index()
        assert (fourth.updated, fourth.unchanged) == (0, 2)
        hits = base.search("changed", mode="keyword").results
        assert [r.citation.document for r in hits] == ["a.md"]
        assert not base.search("proxies", mode="keyword").results  # the old version is gone


def test_every_bad_file_is_skipped_with_its_reason_and_the_run_goes_on(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "bad", src / "bad")
    write(src, "good.md", "# Good\n\nA readable document about Xid 79.\n")
    with words_only_base(tmp_path / "b.db", src) as base:
        report = base.index()
        reasons = {s.path.split("/", 1)[1]: s.reason for s in report.skipped}
        for name in (
            "bad/encrypted.pdf",
            "bad/corrupt.pdf",
            "bad/truncated.docx",
            "bad/binary.txt",
            "bad/empty.txt",
            "bad/zip-bomb.docx",
            "bad/corrupt.docx",
        ):
            assert name in reasons, name
            assert reasons[name]
        assert "encrypt" in reasons["bad/encrypted.pdf"].lower()
        assert "good.md" in documents(base)
        assert [r.citation.document for r in base.search("Xid 79", mode="keyword").results] == [
            "good.md"
        ]


def test_files_that_were_skipped_or_misread_before_are_indexed_as_written(tmp_path):
    """A page whose only text is a heading, a UTF-32 text file with its BOM, a UTF-8 page that
    declares no charset: each indexed, found by its words, its snippet as written."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "bericht.html").write_text(
        "<!DOCTYPE html><h3>Jahresabschluss zum Geschäftsjahr 2023</h3>", encoding="utf-8"
    )
    (src / "export.txt").write_bytes("Quartalsbericht für Lissabon\r\n".encode("utf-32"))  # BOM
    (src / "razon.html").write_bytes(
        "<title>Razón</title><p>Los niños están de razón.</p>".encode()
    )
    with words_only_base(tmp_path / "b.db", src) as base:
        report = base.index()
        assert not report.skipped and set(documents(base)) == {
            "bericht.html",
            "export.txt",
            "razon.html",
        }
        for word, document, snippet in [
            ("geschaftsjahr", "bericht.html", "Jahresabschluss zum Geschäftsjahr 2023"),
            ("lissabon", "export.txt", "Quartalsbericht für Lissabon"),
            ("estan", "razon.html", "Los niños están de razón."),
        ]:
            (hit,) = base.search(word, mode="keyword").results
            assert hit.citation.document == document
            assert hit.citation.snippet == snippet


def test_a_file_that_turns_bad_keeps_its_indexed_version(tmp_path):
    src = tmp_path / "src"
    write(src, "notes.txt", "Relatório anual de vendas.\n")
    with words_only_base(tmp_path / "b.db", src) as base:
        base.index()
        (src / "notes.txt").write_bytes(b"\x00\x01\x02binary garbage\x00" * 100)
        report = base.index()
        assert [s.path for s in report.skipped] == ["src/notes.txt"]
        assert base.search("relatorio", mode="keyword").results[0].citation.document == "notes.txt"


def test_a_file_that_now_holds_nothing_to_read_leaves_the_base(tmp_path):
    """Emptied, or a page left with nothing but links to other pages: what it held is gone,
    so a search no longer finds it (a file that fails to parse keeps it, above)."""
    src = tmp_path / "src"
    write(src, "notes.txt", "Relatório anual de vendas.\n")
    write(src, "gears.html", "<h1>Gears</h1><p>A gearbox waits thirty seconds.</p>")
    write(src, "kept.md", "# Kept\n\nSprockets turn slowly.\n")
    links = "".join(f'<li><a href="p{n}.html">Another page number {n}</a></li>' for n in range(5))
    with words_only_base(tmp_path / "b.db", src) as base:
        assert base.index().added == 3
        (src / "notes.txt").write_text("")
        (src / "gears.html").write_text(f"<h1>Gears</h1><ul>{links}</ul>")
        report = base.index()
        assert (report.removed, report.unchanged) == (2, 1)
        assert {s.path: s.reason for s in report.skipped} == {
            "src/notes.txt": "empty file; its indexed version removed",
            "src/gears.html": "only links to other pages (an index or a table of contents): "
            "nothing of its own; its indexed version removed",
        }
        assert not base.search("relatorio", mode="keyword").results
        assert not base.search("gearbox", mode="keyword").results
        assert base.status().documents == 1
        (src / "notes.txt").write_text("Relatório anual de vendas.\n")  # written again: back
        assert base.index().added == 1
        assert base.search("relatorio", mode="keyword").results


def test_too_large_symlink_outside_and_vanished_source(tmp_path):
    src, outside = tmp_path / "src", tmp_path / "outside"
    write(src, "big.txt", "word " * 2000)
    write(src, "ok.md", "# Ok\n\nFine.\n")
    write(outside, "secret.md", "# Secret\n\nDo not index me.\n")
    (src / "link.md").symlink_to(outside / "secret.md")
    (src / "inside.md").symlink_to(src / "ok.md")
    with words_only_base(tmp_path / "b.db", src) as base:
        base.store.set_spec({"max_file_bytes": 1000})
        report = base.index()
        reasons = {s.path: s.reason for s in report.skipped}
        assert "larger than" in reasons["src/big.txt"]
        assert "outside" in reasons["src/link.md"]
        assert len(documents(base)) == 1 and indexed(base) == {"ok.md", "inside.md"}  # a copy
        assert not base.search("secret", mode="keyword").results
        shutil.rmtree(src)
        gone = base.index()
        assert "missing" in gone.skipped[0].reason
        assert gone.removed == 0 and indexed(base) == {"ok.md", "inside.md"}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(tmp_path):
    src = tmp_path / "src"
    path = write(src, "locked.md", "# Locked\n")
    path.chmod(0)
    with words_only_base(tmp_path / "b.db", src) as base:
        report = base.index()
        assert "cannot be read" in report.skipped[0].reason


def test_a_second_indexer_is_refused_while_searches_go_on(tmp_path):
    src = tmp_path / "src"
    write(src, "a.md", "# A\n\nSearchable words.\n")
    with words_only_base(tmp_path / "b.db", src) as base:
        base.index()
        with IndexerLock(tmp_path / "b.db"):
            with pytest.raises(BaseBusy, match="being indexed"):
                base.index()
            assert base.status().state == "Indexing"
            assert base.search("searchable", mode="keyword").results
        assert base.status().state == "Waiting"


def test_the_cli_refuses_a_second_indexer_clearly(tmp_path):
    src = tmp_path / "src"
    write(src, "a.md", "# A\n")
    words_only_base(tmp_path / "b.db", src).close()
    with IndexerLock(tmp_path / "b.db"):
        run = subprocess.run(
            [sys.executable, "-m", "metis_lite", "index", str(tmp_path / "b.db")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    assert run.returncode == 4
    assert "BASE_BUSY" in run.stderr and "Traceback" not in run.stderr


def _check_consistent(path: Path) -> None:
    with Store(path) as store:
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        store.db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        chunk_ids = [r[0] for r in store.db.execute("SELECT id FROM chunks ORDER BY id")]
        for cid in chunk_ids[:: max(1, len(chunk_ids) // 50)]:
            words = (
                store.db.execute("SELECT text FROM chunks WHERE id = ?", (cid,))
                .fetchone()[0]
                .split()[0]
            )
            found = store.db.execute(
                "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid = ?",
                ('"' + words.lower().strip(".,") + '"', cid),
            ).fetchone()[0]
            assert found == 1
        # No document is half-indexed: each has all its chunks, numbered 0..n-1.
        for _doc, n, top in store.db.execute(
            "SELECT document_id, count(*), max(ordinal) FROM chunks GROUP BY document_id"
        ):
            assert top == n - 1


def test_kill_9_at_any_moment_leaves_a_consistent_base_the_next_run_completes(tmp_path):
    src = tmp_path / "src"
    for i in range(400):
        write(src, f"d{i // 50}/doc{i}.md", f"# Doc {i}\n\n" + f"word{i} alpha beta gamma. " * 120)
    reference = tmp_path / "reference.db"
    with words_only_base(reference, src) as base:
        base.index()
        expected = documents(base)
    base_file = tmp_path / "crash.db"
    words_only_base(base_file, src).close()
    command = [sys.executable, "-m", "metis_lite", "index", str(base_file)]
    for delay in (0.3, 0.6, 0.9, 1.3, 1.8):
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        _check_consistent(base_file)
    finished = subprocess.run(
        command + ["--json"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    # Words only: the run keeps every document; chunks left without vectors may exit 3.
    assert finished.returncode in (0, 3), finished.stderr
    assert json.loads(finished.stdout)["chunks"] > 0
    _check_consistent(base_file)
    with Base(base_file) as base:
        assert documents(base) == expected


def test_examples_hold_every_kind():
    kinds = {p.suffix for p in EXAMPLES.rglob("*") if p.is_file()}
    assert {".md", ".txt", ".html", ".pdf", ".docx"} <= kinds


def test_busy_write_does_not_surface_as_database_is_locked(tmp_path):
    src = tmp_path / "src"
    write(src, "a.md", "# A\n\nText.\n")
    with words_only_base(tmp_path / "b.db", src) as base:
        base.index()
        other = apsw.Connection(str(tmp_path / "b.db"))
        other.execute("BEGIN IMMEDIATE")
        try:
            assert base.search("text", mode="keyword").results  # readers are not blocked (WAL)
        finally:
            other.execute("ROLLBACK")
            other.close()
