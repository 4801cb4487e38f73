"""Copying a base as one file (metis_lite.copies.backup, `metis-lite copy`) while it is indexed and
searched: the copy is consistent, self-contained, and opens and searches in another folder;
a plain `cp` of the .db of a live base lacks the commits still in its -wal."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, words_only_base
from consistency import check_consistent, content, expected_chunks

from metis_lite.base.core import Base
from metis_lite.copies import backup
from metis_lite.copies.backup import copy_base
from metis_lite.errors import InvalidRequest, NotABase, SchemaTooNew
from metis_lite.settings import CHUNK_CHARS
from metis_lite.store import SCHEMA_VERSION, Store

RUNNER = Path(__file__).resolve().parent / "crash_runner.py"
DOCUMENTS = 240
PAUSE_AT = 150
"""The indexer is held inside the transaction of about its 50th document (3 chunks each)."""


def corpus(folder: Path, n: int = DOCUMENTS) -> Path:
    folder.mkdir(parents=True)
    for i in range(n):
        sections = "\n\n".join(
            f"## Part {p}\n\n" + f"Document{i} part{p} says marker{i} about topic{i % 7}. " * 20
            for p in range(3)
        )
        (folder / f"doc{i:03}.md").write_text(f"# Doc {i}\n\n{sections}\n")
    return folder


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"the indexer ended first: {process.communicate()}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def side_files(path: Path) -> list[str]:
    return [s for s in ("-wal", "-shm", "-journal") if Path(str(path) + s).exists()]


def searchable_elsewhere(copy: Path, elsewhere: Path) -> Path:
    """Move the copy to another folder under another name, as taking it to another machine."""
    elsewhere.mkdir(parents=True, exist_ok=True)
    moved = elsewhere / "moved.db"
    shutil.move(copy, moved)
    return moved


def test_a_copy_taken_inside_an_indexing_transaction_holds_every_commit_and_nothing_else(
    tmp_path,
):
    src = corpus(tmp_path / "src")
    expected = expected_chunks(src, CHUNK_CHARS)
    base_file = tmp_path / "live" / "b.db"
    base_file.parent.mkdir()
    words_only_base(base_file, src).close()
    pause = tmp_path / "pause"
    pause.mkdir()
    indexer = subprocess.Popen(
        [
            *(sys.executable, str(RUNNER), "--kill", "sql", "--at", str(PAUSE_AT)),
            *("--pattern", "^INSERT INTO chunks_fts", "--pause", str(pause)),
            *("--autocheckpoint", "0", "--", "index", str(base_file)),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(pause / "paused", indexer)
        # Held here: documents committed so far live in b.db-wal only (no checkpoint ran), and
        # one document's transaction is open with some of its chunks written.
        with Store(base_file) as reader:
            committed = reader.counts()["documents"]
        assert 0 < committed < DOCUMENTS
        copy_base(base_file, tmp_path / "copy.db")
        shutil.copy(base_file, tmp_path / "plain-cp.db")
    finally:
        (pause / "resume").touch()
        _, errors = indexer.communicate(timeout=120)
    assert indexer.returncode in (0, 3), errors  # 3: words only, chunks without vectors

    assert side_files(tmp_path / "copy.db") == []
    moved = searchable_elsewhere(tmp_path / "copy.db", tmp_path / "elsewhere")
    check_consistent(moved, expected)
    with Base(moved) as copy:
        assert copy.status().documents == committed
        first = copy.search("marker0", mode="keyword").results
        assert [r.citation.document for r in first] == ["doc000.md"] * 3
        assert not copy.search(f"marker{DOCUMENTS - 1}", mode="keyword").results  # not yet

    # The plain cp: a WAL base's recent commits are in its -wal, which cp left behind.
    with Store(tmp_path / "plain-cp.db") as plain:
        assert plain.counts()["documents"] == 0 < committed


def test_copies_taken_while_a_process_indexes_and_searches_run_are_each_consistent(tmp_path):
    src = corpus(tmp_path / "src")
    expected = expected_chunks(src, CHUNK_CHARS)
    base_file = tmp_path / "b.db"
    words_only_base(base_file, src).close()
    indexer = subprocess.Popen(
        [sys.executable, "-m", "metis_lite", "index", str(base_file)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    failures: list[BaseException] = []
    searched = threading.Event()
    stop = threading.Event()

    def search_meanwhile() -> None:
        try:
            with Base(base_file) as served:
                while not stop.is_set():
                    answer = served.search("marker7 topic3", mode="keyword")
                    assert len(answer.results) <= 10
                    searched.set()
        except BaseException as exc:  # reported by the test, not lost in the thread
            failures.append(exc)

    searcher = threading.Thread(target=search_meanwhile)
    searcher.start()
    copies = []
    try:
        while indexer.poll() is None or not copies:
            copies.append(tmp_path / f"copy{len(copies)}.db")
            copy_base(base_file, copies[-1])
            time.sleep(0.2)
    finally:
        indexer.wait(timeout=120)
        stop.set()
        searcher.join(timeout=60)
    assert indexer.returncode in (0, 3), indexer.stderr.read()  # 3: words only
    indexer.stderr.close()
    assert not failures, failures
    assert searched.is_set()
    copies.append(tmp_path / "final.db")
    copy_base(base_file, copies[-1])

    counts = []
    for n, copy in enumerate(copies):
        assert side_files(copy) == []
        moved = searchable_elsewhere(copy, tmp_path / f"elsewhere{n}")
        check_consistent(moved, expected)
        with Store(moved) as store:
            counts.append(store.counts()["documents"])
    assert counts == sorted(counts) and counts[-1] == DOCUMENTS
    final = content(tmp_path / f"elsewhere{len(copies) - 1}" / "moved.db")
    assert final == content(base_file)


def test_a_copy_searches_exactly_as_its_base_with_vectors_and_all(example_base_file, tmp_path):
    copy = tmp_path / "far" / "away.db"
    copy.parent.mkdir()
    copy_base(example_base_file, copy)
    with Base(example_base_file) as original, Base(copy) as copied:
        for question in ("how many holidays do I get", "Xid 79", "configuracao do proxy"):
            want = original.search(question, rerank=False)
            got = copied.search(question, rerank=False)
            assert not got.warnings
            assert [(r.citation.document, r.text, r.scores.dense_rank) for r in got.results] == [
                (r.citation.document, r.text, r.scores.dense_rank) for r in want.results
            ]
        assert copied.status().chunks_without_vector == 0


def test_an_existing_destination_is_never_overwritten(example_base_file, tmp_path):
    taken = tmp_path / "taken.db"
    taken.write_bytes(b"someone's file")
    with pytest.raises(InvalidRequest, match="already exists"):
        copy_base(example_base_file, taken)
    assert taken.read_bytes() == b"someone's file"
    with pytest.raises(InvalidRequest, match="already exists"):
        copy_base(example_base_file, example_base_file)
    # A -wal left by another database of that name would be read as the copy's own: refused.
    Path(str(tmp_path / "new.db") + "-wal").write_bytes(b"stale")
    with pytest.raises(InvalidRequest, match="new.db-wal"):
        copy_base(example_base_file, tmp_path / "new.db")
    with pytest.raises(InvalidRequest, match="not a folder"):
        copy_base(example_base_file, tmp_path / "missing" / "copy.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.db-wal", "taken.db"]


def test_what_is_not_a_base_is_not_copied(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(NotABase):
        copy_base(junk, tmp_path / "copy.db")
    newer = tmp_path / "newer.db"
    Store(newer, create=True).close()
    with Store(newer) as store, store.db:
        store.db.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    with pytest.raises(SchemaTooNew):
        copy_base(newer, tmp_path / "copy.db")
    assert not (tmp_path / "copy.db").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_copy_command(example_base_file, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    backup.add_arguments(parser)
    assert (
        backup.run_from_args(parser.parse_args([str(example_base_file), str(tmp_path / "c.db")]))
        == 0
    )
    assert "one file" in capsys.readouterr().out
    args = parser.parse_args([str(example_base_file), str(tmp_path / "d.db"), "--json"])
    assert backup.run_from_args(args) == 0
    said = json.loads(capsys.readouterr().out)
    assert said == {
        "base": str(example_base_file),
        "copy": str(tmp_path / "d.db"),
        "bytes": (tmp_path / "d.db").stat().st_size,
    }
