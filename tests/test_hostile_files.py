"""A source folder that holds anything at all: each hostile name or file is skipped with its
reason, the run goes on and indexes the rest, and what is read is what was checked (a file
swapped for a link during a run is never read)."""

from __future__ import annotations

import gc
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, words_only_base
from test_sqlite_clients import needs_shell, shell

from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest
from metis_lite.indexing import ingest
from metis_lite.store import files


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def documents(base: Base) -> set[str]:
    return {r[0] for r in base.store.db.execute("SELECT path FROM documents")}


def reasons(report) -> dict[str, str]:
    return {s.path.split("/", 1)[1]: s.reason for s in report.skipped}


def found(base: Base, word: str) -> list[str]:
    return [r.citation.document for r in base.search(word, mode="keyword").results]


@pytest.fixture
def hostile(tmp_path):
    """A folder holding one good file beside every kind of hostile entry named *.md."""
    src = tmp_path / "src"
    write(src, "good.md", "# Good\n\nThe quokka is readable.\n")
    (src / "loop-a.md").symlink_to(src / "loop-b.md")
    (src / "loop-b.md").symlink_to(src / "loop-a.md")
    (src / "dangling.md").symlink_to(src / "nowhere.md")
    os.mkfifo(src / "pipe.md")
    with open(os.path.join(os.fsencode(src), b"bad\xffname.md"), "wb") as handle:
        handle.write(b"# Bad name\n\nNot indexed.\n")
    os.makedirs(os.path.join(os.fsencode(src), b"dir\xfe"))
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(src / "sock.md"))
    try:
        os.mknod(src / "device.md", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null
    except PermissionError:
        pass  # not root: no device (every other entry still counts)
    (src / "folder.md").mkdir()
    yield src
    listener.close()


def test_every_hostile_entry_is_skipped_with_its_reason_and_the_rest_indexed(hostile, tmp_path):
    with words_only_base(tmp_path / "b.db", hostile) as base:
        report = base.index()
        why = reasons(report)
        assert documents(base) == {"good.md"}
        assert found(base, "quokka") == ["good.md"]
        assert "symlink loop" in why["loop-a.md"] and "symlink loop" in why["loop-b.md"]
        assert "leads nowhere" in why["dangling.md"]
        assert why["pipe.md"] == "not a regular file (a FIFO)"
        assert why["sock.md"] == "not a regular file (a socket)"
        assert "not valid UTF-8" in why["bad\\xffname.md"]
        assert "not valid UTF-8" in why["dir\\xfe/"]
        if (hostile / "device.md").exists():
            assert why["device.md"] == "not a regular file (a character device)"
        assert "folder.md" not in why  # a folder is walked, not read
        assert base.store.last_run()["state"] == "done"


def test_the_cli_indexes_a_hostile_folder_without_a_traceback_or_a_hang(hostile, tmp_path):
    words_only_base(tmp_path / "b.db").close()
    for _ in range(2):  # the second run meets them again
        run = subprocess.run(
            [sys.executable, "-m", "metis_lite", "index", str(tmp_path / "b.db"), str(hostile)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,  # a FIFO opened for reading would block here forever
        )
        assert run.returncode in (0, 3), run.stderr  # 3: words only, chunks without vectors
        assert "Traceback" not in run.stderr
        assert "skipped src/pipe.md: not a regular file (a FIFO)" in run.stdout
        assert "skipped src/bad\\xffname.md:" in run.stdout
    as_json = subprocess.run(
        [sys.executable, "-m", "metis_lite", "index", str(tmp_path / "b.db"), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    skipped = {s["path"] for s in json.loads(as_json.stdout)["skipped"]}
    assert {"src/pipe.md", "src/bad\\xffname.md", "src/loop-a.md"} <= skipped
    with Base(tmp_path / "b.db") as base:
        assert base.status().state == "Waiting"
        assert base.status().last_indexing["state"] == "done"


def test_a_document_whose_file_turns_hostile_is_removed(tmp_path):
    src, outside = tmp_path / "src", tmp_path / "outside"
    write(src, "a.md", "# A\n\nThe axolotl.\n")
    write(src, "b.md", "# B\n\nThe bilby.\n")
    write(src, "c.md", "# C\n\nThe capybara.\n")
    write(outside, "secret.md", "# Secret\n\nThe salamander is secret.\n")
    with words_only_base(tmp_path / "b.db", src) as base:
        assert base.index().added == 3
        (src / "a.md").unlink()
        (src / "a.md").symlink_to(outside / "secret.md")
        (src / "b.md").unlink()
        os.mkfifo(src / "b.md")
        (src / "c.md").unlink()
        (src / "c.md").symlink_to(src / "c.md")
        report = base.index()
        assert report.removed == 3
        assert reasons(report)["a.md"] == "symlink leads outside the source"
        assert documents(base) == set()
        assert not found(base, "axolotl") and not found(base, "salamander")


def test_a_file_swapped_for_an_outside_link_during_the_run_is_never_read(tmp_path):
    """A leak once possible: z.txt replaced by a link to a file outside while the run reads a.txt.
    Listed as a plain file, it must be read as one: the outside file is never indexed."""
    src, outside = tmp_path / "src", tmp_path / "outside"
    write(src, "a.txt", "The aardvark.\n")
    write(src, "z.txt", "The zebra.\n")
    write(outside, "secret.txt", "The salamander is secret.\n")

    def swap(stage: str, done: int, total: int) -> None:
        if stage == "files" and done == 1:
            (src / "z.txt").unlink()
            (src / "z.txt").symlink_to(outside / "secret.txt")

    with words_only_base(tmp_path / "b.db", src) as base:
        report = base.index(progress=swap)
        assert "outside" in reasons(report)["z.txt"]
        assert not found(base, "salamander")
        assert documents(base) == {"a.txt"}


def test_a_swap_between_the_check_and_the_open_is_caught_on_the_descriptor(tmp_path, monkeypatch):
    """The narrowest race: the entry is checked (a plain file, or a link inside the source),
    then swapped before it is opened. O_NOFOLLOW refuses the first; the opened descriptor's
    real path refuses the second."""
    src, outside = tmp_path / "src", tmp_path / "outside"
    write(src, "plain.txt", "The plain platypus.\n")
    write(src, "target.txt", "The target tapir.\n")
    (src / "link.txt").symlink_to(src / "target.txt")
    write(outside, "secret.txt", "The salamander is secret.\n")
    real_lstat, real_realpath = os.lstat, os.path.realpath
    swapped: set[str] = set()

    def swap_once(path) -> None:
        name = Path(path).name
        if name in ("plain.txt", "link.txt") and name not in swapped:
            swapped.add(name)
            Path(path).unlink()
            Path(path).symlink_to(outside / "secret.txt")

    def lstat_then_swap(path, *args, **kwargs):
        result = real_lstat(path, *args, **kwargs)
        if Path(path).name == "plain.txt":
            swap_once(path)
        return result

    def realpath_then_swap(path, *args, **kwargs):
        result = real_realpath(path, *args, **kwargs)
        if Path(path).name == "link.txt":
            swap_once(path)
        return result

    monkeypatch.setattr(ingest.os, "lstat", lstat_then_swap)
    monkeypatch.setattr(ingest.os.path, "realpath", realpath_then_swap)
    with words_only_base(tmp_path / "b.db", src) as base:
        report = base.index()
        monkeypatch.undo()
        why = reasons(report)
        assert "symlink" in why["plain.txt"]
        assert "outside" in why["link.txt"]
        assert swapped == {"plain.txt", "link.txt"}
        assert documents(base) == {"target.txt"}
        assert not found(base, "salamander")


def test_a_base_this_process_has_open_is_never_opened_as_a_source_file(tmp_path, monkeypatch):
    """The base lies in its source, reached by a hard link, a symlink, a link to its -wal, and
    a link swapped in between its check and its open: each is skipped with its reason and
    none is ever opened for reading (closing it would drop SQLite's locks, and another
    process closing the base would then delete the -wal under this one)."""
    src = tmp_path / "src"
    write(src, "good.md", "# Good\n\nThe quokka is readable.\n")
    write(src, "target.md", "# Target\n\nThe tapir.\n")
    (src / "late.md").symlink_to("target.md")
    base_file = src / "b.db"
    real_realpath = os.path.realpath

    def realpath_then_swap(path, *args, **kwargs):
        result = real_realpath(path, *args, **kwargs)
        if Path(path).name == "late.md" and (src / "late.md").readlink() == Path("target.md"):
            (src / "late.md").unlink()
            (src / "late.md").symlink_to("b.db")  # inside the source, as the one checked
        return result

    with words_only_base(base_file, src) as base:
        base.remember("A fact kept in the -wal.")
        os.link(base_file, src / "hard.md")
        (src / "soft.md").symlink_to("b.db")
        (src / "wal.md").symlink_to("b.db-wal")
        monkeypatch.setattr(os.path, "realpath", realpath_then_swap)
        report = base.index()
        monkeypatch.undo()
        closed = subprocess.run(  # another process opens and closes the base
            [
                sys.executable,
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
                " c.execute('SELECT count(*) FROM facts').fetchone(); c.close()",
                str(base_file),
            ],
            timeout=60,
        )
        assert closed.returncode == 0
        assert Path(f"{base_file}-wal").exists(), "the -wal was deleted: a lock was dropped"
        why = reasons(report)
        for name in ("hard.md", "soft.md", "wal.md", "late.md"):
            assert why[name].startswith("is the file of a base this process has open"), why
        assert documents(base) >= {"good.md", "target.md"}
        assert not {"hard.md", "soft.md", "wal.md", "late.md"} & documents(base)
        assert base.facts()[1] == 1
        held = os.stat(base_file)
        assert (held.st_dev, held.st_ino) in files.database_ids()
    del base
    gc.collect()  # its connections gone, the file is no longer one this process holds
    assert (held.st_dev, held.st_ino) not in files.database_ids()


HOLD_AND_COLLECT = """
import gc, sys, weakref
from metis_lite.store import files

release = files.hold_database(sys.argv[1])

class Connection:  # in a cycle: only the garbage collector frees it, wherever it runs
    pass

connection = Connection()
connection.itself = connection
weakref.finalize(connection, release)
del connection
with files._databases_lock:  # as inside another connection's hold or release
    gc.collect()  # its finalizer runs here, in this thread, the lock held
print(len(files.database_ids()))
"""


def test_a_connection_freed_while_another_is_held_or_released_never_hangs(tmp_path):
    """A connection's release runs from the garbage collector, which runs wherever a thread
    allocates, also inside another release or hold that holds the lock of the databases held
    (a CI run once hung there, in test_disk): the release must not wait for that lock."""
    db = tmp_path / "a.db"
    db.write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-c", HOLD_AND_COLLECT, str(db)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"  # released, applied by the next look
    # From another thread, while this one holds the lock: it returns at once too.
    other = files.hold_database(tmp_path / "b.db")
    (tmp_path / "b.db").write_bytes(b"")
    held = os.stat(tmp_path / "b.db")
    assert (held.st_dev, held.st_ino) in files.database_ids()
    thread = threading.Thread(target=other)
    with files._databases_lock:
        thread.start()
        thread.join(10)
        waited = thread.is_alive()
    thread.join()
    assert not waited
    assert (held.st_dev, held.st_ino) not in files.database_ids()
    other()  # once, whatever the calls
    assert (held.st_dev, held.st_ino) not in files.database_ids()


SEARCHING = """
import sys, time
from metis_lite.base.core import Base
with Base(sys.argv[1]) as base:
    end, n = time.monotonic() + float(sys.argv[2]), 0
    while time.monotonic() < end:
        assert base.search("quokka", mode="keyword").results
        n += 1
print(n)
"""


@needs_shell
def test_bases_opened_and_freed_by_threads_beside_a_process_and_the_shell_never_hang(tmp_path):
    """Four threads open the base, search it and close it over and over, two of them leaving
    cycles of garbage and running the collector as they go (so that connections' releases run
    inside the others' holds and releases), while a second process searches it and the sqlite3
    shell reads it: every thread ends, every search finds, and the file is held no more after."""
    src = tmp_path / "src"
    write(src, "a.md", "# A\n\nThe quokka hops.\n")
    path = tmp_path / "b.db"
    with words_only_base(path, src) as base:
        base.index()
    seconds = 4.0
    end = time.monotonic() + seconds
    errors: list[str] = []
    opened = [0]

    def churn(collects: bool) -> None:
        try:
            while time.monotonic() < end:
                with Base(path) as base:
                    assert base.search("quokka", mode="keyword").results
                    opened[0] += 1
                if collects:
                    cycle: list[object] = [object()]
                    cycle.append(cycle)
                    del cycle
                    gc.collect()
        except Exception as exc:  # noqa: BLE001 - said by the assertion
            errors.append(repr(exc))

    threads = [threading.Thread(target=churn, args=(n % 2 == 0,)) for n in range(4)]
    second = subprocess.Popen(
        [sys.executable, "-c", SEARCHING, str(path), str(seconds)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    for thread in threads:
        thread.start()
    reads = []
    while time.monotonic() < end:
        reads.append(shell(path, "SELECT count(*) FROM documents;"))
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a thread hangs"
    out, _ = second.communicate(timeout=60)
    assert errors == [] and opened[0] > 0
    assert second.returncode == 0 and int(out) > 0
    assert reads and all(r.returncode == 0 and r.stdout.strip() == "1" for r in reads)
    gc.collect()
    held = os.stat(path)
    assert (held.st_dev, held.st_ino) not in files.database_ids()


def test_a_file_that_vanishes_before_it_is_read_is_skipped_and_removed(tmp_path):
    src = tmp_path / "src"
    write(src, "a.txt", "The aardvark.\n")
    write(src, "z.txt", "The zebra.\n")
    with words_only_base(tmp_path / "b.db", src) as base:
        base.index()
        os.utime(src / "z.txt", (1, 1))  # changed, so it is read again

        def vanish(stage: str, done: int, total: int) -> None:
            if stage == "files" and done == 1:
                (src / "z.txt").unlink()

        report = base.index(progress=vanish)
        assert "vanished" in reasons(report)["z.txt"]
        assert report.removed == 1 and documents(base) == {"a.txt"}


def test_a_file_that_changes_while_read_is_skipped_and_its_version_kept(tmp_path, monkeypatch):
    src = tmp_path / "src"
    path = write(src, "log.txt", "The first line.\n")
    with words_only_base(tmp_path / "b.db", src) as base:
        base.index()
        path.write_text("The second version.\n")
        real_read_all = ingest.read_all

        def read_while_written(fd, size):
            with path.open("a") as handle:
                handle.write("Another line, written during the read.\n")
            return real_read_all(fd, size)

        monkeypatch.setattr(ingest, "read_all", read_while_written)
        report = base.index()
        assert "changed while it was read" in reasons(report)["log.txt"]
        assert found(base, "first") == ["log.txt"]  # the indexed version is kept
        monkeypatch.undo()
        again = base.index()
        assert again.updated == 1 and found(base, "another") == ["log.txt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_a_file_that_turns_unreadable_is_removed(tmp_path):
    src = tmp_path / "src"
    path = write(src, "locked.md", "# Locked\n\nThe lemur.\n")
    with words_only_base(tmp_path / "b.db", src) as base:
        base.index()
        path.chmod(0)
        os.utime(path, (1, 1))
        report = base.index()
        assert "Permission denied" in reasons(report)["locked.md"]
        assert report.removed == 1 and not found(base, "lemur")


def test_a_folder_that_cannot_be_listed_is_skipped(tmp_path, monkeypatch):
    """A folder inside the source that cannot be listed: skipped, its documents removed. The
    source folder itself: skipped, its documents kept (as for a missing folder)."""
    src = tmp_path / "src"
    write(src, "top.md", "# Top\n\nThe tarsier.\n")
    write(src, "locked/inner.md", "# Inner\n\nThe ibex.\n")
    real_scandir = os.scandir
    refused: set[Path] = set()

    def scandir(path="."):
        if Path(path) in refused:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with words_only_base(tmp_path / "b.db", src) as base:
        base.index()
        refused.add(src / "locked")
        report = base.index()
        assert "folder cannot be read: Permission denied" in reasons(report)["locked/"]
        assert report.removed == 1 and documents(base) == {"top.md"}
        refused.add(src)
        report = base.index()
        assert "source folder cannot be read" in {s.path: s.reason for s in report.skipped}["src/"]
        assert report.removed == 0 and documents(base) == {"top.md"}


def test_a_source_folder_whose_path_is_not_utf8_is_refused(tmp_path):
    folder = os.path.join(os.fsencode(tmp_path), b"caf\xe9")
    os.makedirs(folder)
    with words_only_base(tmp_path / "b.db") as base:
        with pytest.raises(InvalidRequest, match="UTF-8"):
            base.add_source(os.fsdecode(folder))
        assert base.sources() == ()
