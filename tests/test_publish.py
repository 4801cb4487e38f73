"""Publishing a base for read-only readers (metis_lite.copies.publish, `metis-lite publish`): a copy put
in place by one rename, consistent while its base is indexed, marked and read-only, never
written by any metis-lite command, and refused where a rename would lose something."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest
from conftest import ROOT, words_only_base
from consistency import check_consistent, expected_chunks
from test_copy import corpus

from metis_lite.base.core import Base
from metis_lite.copies.backup import copy_base
from metis_lite.copies.publish import file_state, open_copy, publish
from metis_lite.errors import BaseDamaged, BaseReadOnly, InvalidRequest
from metis_lite.settings import CHUNK_CHARS
from metis_lite.store import Store


def small_base(path: Path, *texts: str) -> Path:
    src = path.parent / f"{path.stem}-src"
    src.mkdir()
    for n, text in enumerate(texts or ("alpha words here", "beta words there")):
        (src / f"d{n}.md").write_text(f"# Doc {n}\n\n{text}\n")
    with words_only_base(path, src) as base:
        base.index()
    return path


def check_published(dest: Path, expected) -> None:
    """check_consistent of a published copy, on a copy of it (FTS5's integrity-check is a
    write, refused by a published copy; the copy holds the same pages)."""
    restored = dest.with_name(f"check-{time.monotonic_ns()}.db")
    copy_base(dest, restored)
    check_consistent(restored, expected)
    restored.unlink()


def fingerprint(path: Path) -> tuple[str, int, int]:
    return (
        hashlib.sha256(path.read_bytes()).hexdigest(),
        path.stat().st_mtime_ns,
        path.stat().st_ino,
    )


def metis(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "metis_lite", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_published_copy_is_one_marked_read_only_file_that_searches_as_its_base(tmp_path):
    base_file = small_base(tmp_path / "live.db", "alpha words here", "beta words there")
    out = tmp_path / "out"
    out.mkdir()
    done = publish(base_file, out / "pub.db")

    dest = out / "pub.db"
    assert sorted(p.name for p in out.iterdir()) == ["pub.db"]  # one file, nothing beside it
    assert stat.S_IMODE(dest.stat().st_mode) == 0o444
    assert dest.read_bytes()[18:20] == b"\x01\x01"  # rollback journal, not WAL: no -wal needed
    with closing(sqlite3.connect(f"file:{dest}?mode=ro", uri=True)) as plain:  # any client
        meta = dict(plain.execute("SELECT key, value FROM meta"))
    assert meta["published_id"] == done.publication.id and len(done.publication.id) == 32
    assert meta["published_at"] == done.publication.at
    assert (done.chunks, done.last_run, done.bytes) == (2, 1, dest.stat().st_size)
    check_published(dest, expected_chunks(base_file.parent / "live-src", CHUNK_CHARS))
    with Base(base_file) as live, Base(dest) as copy:
        for question in ("alpha", "words", "beta there"):
            want = live.search(question, mode="keyword").results
            got = copy.search(question, mode="keyword").results
            assert [(r.citation.document, r.score) for r in got] == [
                (r.citation.document, r.score) for r in want
            ]
        assert copy.published and copy.status().published == done.publication


def test_publishing_again_replaces_the_copy_in_one_rename_under_its_readers(tmp_path):
    base_file = small_base(tmp_path / "live.db", "alpha words here")
    dest = tmp_path / "pub.db"
    publish(base_file, dest)
    first_inode = dest.stat().st_ino
    copy, stores = open_copy(dest, 2)  # a reader, holding the first copy open
    try:
        assert copy.immutable and copy.state.inode == first_inode
        (tmp_path / "live-src" / "new.md").write_text("# New\n\nomega arrives later\n")
        with Base(base_file) as live:
            live.index()
        second = publish(base_file, dest)
        assert dest.stat().st_ino != first_inode
        assert not [p.name for p in tmp_path.iterdir() if ".publish-" in p.name]
        for store in stores:  # the reader goes on reading the file it opened, whole
            assert store.counts()["documents"] == 1
            assert store.publication() == copy.publication != second.publication
        assert not copy.serves(file_state(dest))
    finally:
        for store in stores:
            store.close()
    with Store(dest) as reader:  # a new reader opens the new copy
        assert reader.counts()["documents"] == 2
        assert reader.publication() == second.publication


def test_copies_published_while_a_process_indexes_are_each_consistent(tmp_path):
    src = corpus(tmp_path / "src", n=120)
    expected = expected_chunks(src, CHUNK_CHARS)
    base_file = tmp_path / "b.db"
    words_only_base(base_file, src).close()
    dest = tmp_path / "out" / "pub.db"
    dest.parent.mkdir()
    indexer = subprocess.Popen(
        [sys.executable, "-m", "metis_lite", "index", str(base_file)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    counts = []
    try:
        while indexer.poll() is None or not counts:
            publish(base_file, dest)
            copy, stores = open_copy(dest, 1)
            with stores[0] as store:
                counts.append(store.counts()["documents"])
            check_published(dest, expected)
            time.sleep(0.1)
    finally:
        indexer.wait(timeout=120)
    assert indexer.returncode in (0, 3), indexer.stderr.read()  # 3: words only
    indexer.stderr.close()
    publish(base_file, dest)
    with Store(dest) as store:
        counts.append(store.counts()["documents"])
    assert counts == sorted(counts) and counts[-1] == 120
    assert sorted(p.name for p in dest.parent.iterdir()) == ["pub.db"]


def test_two_publishers_at_once_leave_one_whole_copy(tmp_path):
    one = small_base(tmp_path / "one.db", "from the first base")
    two = small_base(tmp_path / "two.db", "from the second base", "and more of it")
    dest = tmp_path / "out" / "pub.db"
    dest.parent.mkdir()
    failures: list[BaseException] = []

    def publisher(source: Path) -> None:
        try:
            for _ in range(8):
                publish(source, dest)
        except BaseException as exc:  # reported by the test, not lost in the thread
            failures.append(exc)

    threads = [threading.Thread(target=publisher, args=(s,)) for s in (one, two, one)]
    for thread in threads:
        thread.start()
    process = subprocess.run(  # and a second process at the same time
        [sys.executable, "-m", "metis_lite", "publish", str(two), str(dest)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    assert process.returncode == 0, process.stderr
    assert sorted(p.name for p in dest.parent.iterdir()) == ["pub.db"]
    with Store(dest) as store:
        assert store.counts()["documents"] in (1, 2)
        assert [row[0] for row in store.db.execute("PRAGMA integrity_check")] == ["ok"]


@pytest.mark.parametrize(
    "what",
    ["live base", "wal beside", "folder", "link", "itself", "no folder", "other db", "text"],
)
def test_publish_refuses_what_a_rename_would_lose(tmp_path, what):
    base_file = small_base(tmp_path / "live.db")
    dest = tmp_path / "dest.db"
    if what == "live base":
        small_base(dest)
    elif what == "wal beside":
        publish(base_file, dest)
        Path(f"{dest}-wal").write_bytes(b"")
    elif what == "folder":
        dest.mkdir()
    elif what == "link":
        publish(base_file, tmp_path / "target.db")
        dest.symlink_to(tmp_path / "target.db")
    elif what == "itself":
        dest = base_file
    elif what == "no folder":
        dest = tmp_path / "nowhere" / "dest.db"
    elif what == "other db":
        with closing(sqlite3.connect(dest)) as plain:
            plain.execute("CREATE TABLE mine (x)")
    else:
        dest.write_text("my notes, not a base\n")
    before = {
        p.name: fingerprint(p) for p in tmp_path.iterdir() if p.is_file() and not p.is_symlink()
    }
    with pytest.raises(InvalidRequest) as refused:
        publish(base_file, dest)
    assert refused.value.code == "INVALID_REQUEST" and str(dest.parent) in refused.value.message
    after = {
        p.name: fingerprint(p) for p in tmp_path.iterdir() if p.is_file() and not p.is_symlink()
    }
    assert after == before  # nothing replaced, nothing left behind
    assert not [name for name in after if ".publish-" in name]


def test_a_failed_publish_leaves_the_published_copy_as_it_was(tmp_path):
    base_file = small_base(tmp_path / "live.db")
    dest = tmp_path / "out" / "pub.db"
    dest.parent.mkdir()
    publish(base_file, dest)
    before = fingerprint(dest)
    with Base(base_file):  # folds the WAL into the file, which is then damaged
        pass
    base_file.write_bytes(base_file.read_bytes()[:8192])
    with pytest.raises(BaseDamaged):
        publish(base_file, dest)
    assert fingerprint(dest) == before
    assert sorted(p.name for p in dest.parent.iterdir()) == ["pub.db"]


def test_a_published_copy_is_never_written_by_any_command_and_a_copy_of_it_is_a_base(tmp_path):
    base_file = small_base(tmp_path / "live.db", "alpha words here")
    dest = tmp_path / "out" / "pub.db"
    dest.parent.mkdir()
    publish(base_file, dest)
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "x.md").write_text("# X\n\nmore\n")
    before = fingerprint(dest)
    for args in (
        ("index", str(dest)),
        ("index", str(dest), str(folder)),
        ("remember", str(dest), "a fact"),
        ("sources", str(dest), "--remove", "live-src"),
    ):
        done = metis(*args)
        assert done.returncode == 1, (args, done.stderr)
        assert "BASE_READ_ONLY" in done.stderr and "published copy" in done.stderr
    for args in (("search", str(dest), "alpha", "--mode", "keyword"), ("status", str(dest))):
        done = metis(*args)
        assert done.returncode == 0, done.stderr
    with Base(dest) as copy, pytest.raises(BaseReadOnly):
        copy.configure(fusion="rrf")
    assert fingerprint(dest) == before  # not one byte, not its time
    assert sorted(p.name for p in dest.parent.iterdir()) == ["pub.db"]  # no .lock, no -wal

    restored = tmp_path / "restored.db"
    copy_base(dest, restored)  # a copy of a published copy is a base to write again
    with Base(restored) as base:
        assert not base.published and base.status().published is None
        base.add_source(folder)
        assert base.index().added == 1
    assert fingerprint(dest) == before


def test_the_publish_command(tmp_path):
    base_file = small_base(tmp_path / "live.db")
    dest = tmp_path / "pub.db"
    done = metis("publish", str(base_file), str(dest), "--json")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    with Store(dest) as store:
        mark = store.publication()
    assert mark is not None
    assert said == {
        "base": str(base_file),
        "published": str(dest),
        "bytes": dest.stat().st_size,
        "chunks": 2,
        "last_run": 1,
        "published_id": mark.id,
        "published_at": mark.at,
        "seconds": said["seconds"],
    }
    again = metis("publish", str(base_file), str(dest))
    assert again.returncode == 0 and again.stdout.startswith(f"published {base_file} at {dest}")
    refused = metis("publish", str(base_file), str(base_file))
    assert refused.returncode == 2 and "INVALID_REQUEST" in refused.stderr
    missing = metis("publish", str(tmp_path / "nope.db"), str(tmp_path / "x.db"))
    assert missing.returncode == 2 and "BASE_NOT_FOUND" in missing.stderr
    assert not os.path.exists(tmp_path / "x.db")


def test_status_says_a_published_copy_and_a_read_only_base_in_text(tmp_path, monkeypatch, capsys):
    base_file = small_base(tmp_path / "live.db", "alpha words here")
    dest = tmp_path / "pub.db"
    mark = publish(base_file, dest).publication
    said = metis("status", str(dest))
    assert said.returncode == 0, said.stderr
    line = said.stdout.splitlines()[1]
    assert line == (
        f"  a published copy: {mark.id}, published {mark.at}; read-only (to change it, publish"
        " the working base again)"
    )
    live = metis("status", str(base_file)).stdout.splitlines()
    assert not any(s.startswith(("  a published copy", "  read-only")) for s in live)

    from metis_lite import cli

    # A base this process may not write (as `serve --read-only` opens it).
    monkeypatch.setattr(Base, "open", classmethod(lambda cls, path, **_: cls(path, read_only=True)))
    assert cli.main(["status", str(base_file)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "  read-only: nothing is written to it (no indexing, no facts, no search counts)"
    )


def test_publish_removes_what_a_gone_copy_left_beside_its_place(tmp_path):
    """A -wal, -shm or -journal beside a DEST that is not there (a reader of an ordinary base
    once put there made them; a writer was killed) would be read with the new copy, or keep
    every publish out: publish removes them. Beside a DEST that is there, they are refused."""
    base_file = small_base(tmp_path / "live.db", "alpha words here")
    dest = tmp_path / "pub.db"
    for suffix in ("-wal", "-shm", "-journal"):
        Path(f"{dest}{suffix}").write_bytes(b"stale")
    publish(base_file, dest)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pub.db")) == ["pub.db"]
    with Base(dest, read_only=True) as reader:
        assert reader.copy is not None and reader.copy.immutable
        found = reader.search("alpha", mode="keyword").results
        assert [r.citation.document for r in found] == ["d0.md"]
    Path(f"{dest}-wal").write_bytes(b"a writer's")
    with pytest.raises(InvalidRequest, match="-wal lies beside"):
        publish(base_file, dest)
