"""Disks and files: a full disk or a read-only base is said clearly (its code, exit code 1, no
traceback) and the base stays consistent; a base from a newer metis-lite, a file that is not a
base and a damaged base file are refused clearly, and left as they were.

A full disk two ways: a real one (a 2 MB tmpfs, mounted when the tests run as root) and, on
any machine, the base capped by `PRAGMA max_page_count` (SQLite answers SQLITE_FULL exactly as
for a full disk). A read-only base two ways too: a tmpfs remounted read-only (root reads and
writes files whatever their mode), and every connection opened SQLITE_OPEN_READONLY.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
from contextlib import closing, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from conftest import ROOT, words_only_base
from consistency import check_consistent, content, expected_chunks

from metis_lite import cli
from metis_lite.settings import CHUNK_CHARS
from metis_lite.store import SCHEMA_VERSION

RUNNER = Path(__file__).resolve().parent / "crash_runner.py"
WORDS_ONLY = ("--embedding", "tei", "--embedding-url", "http://127.0.0.1:9")
"""Index options for a base searched by words only (nothing listens on port 9): fast."""

WORDS_ONLY_DONE = (0, 3)
"""A finished index run of a words-only base: 3 when chunks were left without vectors."""


def corpus(folder: Path, n: int) -> Path:
    """n documents of ~12 KB each, every one findable by its own word (wordN)."""
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"d{i:03}.md").write_text(
            f"# D{i}\n\n" + f"word{i} alpha beta gamma delta epsilon. " * 300
        )
    return folder


def metis(*args: str, runner: tuple[str, ...] | None = None) -> subprocess.CompletedProcess:
    """The CLI: in this process (its exit code and what it printed; an exception escaping it
    fails the test, as a traceback would), or in a subprocess through crash_runner."""
    if runner is not None:
        command = [sys.executable, str(RUNNER), *runner, "--", *map(str, args)]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main([str(a) for a in args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def assert_refused(run: subprocess.CompletedProcess, code: str) -> None:
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    assert f"error: {code}: " in run.stderr, run.stderr
    assert "Traceback" not in run.stderr, run.stderr


def documents(base_file: Path) -> int:
    with closing(sqlite3.connect(f"file:{base_file}?mode=ro", uri=True)) as plain:
        return plain.execute("SELECT count(*) FROM documents").fetchone()[0]


def other_sqlite(path: Path) -> None:
    with closing(sqlite3.connect(path)) as plain, plain:
        plain.execute("CREATE TABLE t (x)")


@pytest.fixture
def tmpfs(tmp_path):
    """A 2 MB tmpfs at tmp_path/mnt (needs root; skipped, saying why, where mount is refused)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the max_page_count tests cover a full disk)")
    mount = tmp_path / "mnt"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"mount is not permitted here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def remount(mount: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(mount)], check=True)


# -- a full disk ----------------------------------------------------------------------------


def test_a_base_at_its_size_limit_says_disk_full_and_the_next_run_completes(tmp_path):
    src = corpus(tmp_path / "src", 120)
    expected = expected_chunks(src, CHUNK_CHARS)
    base_file = tmp_path / "b.db"
    full = metis("index", base_file, src, *WORDS_ONLY, runner=("--max-page-count", "120"))
    assert_refused(full, "DISK_FULL")
    assert "disk is full" in full.stderr
    check_consistent(base_file, expected)
    assert 0 < documents(base_file) < 120

    found = metis("search", base_file, "word3 alpha", "--mode", "keyword")
    assert found.returncode == 0 and "d003.md" in found.stdout, found.stderr

    done = metis("index", base_file, "--json")
    assert done.returncode in WORDS_ONLY_DONE, done.stderr
    check_consistent(base_file, expected)
    reference = tmp_path / "reference.db"
    words_only_base(reference, src).close()
    assert metis("index", reference).returncode in WORDS_ONLY_DONE
    assert content(base_file)["texts"] == content(reference)["texts"]


def test_a_full_file_system_says_disk_full_and_the_base_stays_consistent(tmpfs, tmp_path):
    src = corpus(tmp_path / "src", 300)  # ~3.6 MB of text: more than the 2 MB disk holds
    expected = expected_chunks(src, CHUNK_CHARS)
    base_file = tmpfs / "b.db"
    full = metis("index", base_file, src, *WORDS_ONLY)
    assert_refused(full, "DISK_FULL")
    kept = documents(base_file)
    assert 0 < kept < 300

    # Searches still answer on the full disk (the count of searches just waits).
    found = metis("search", base_file, "word1 alpha", "--mode", "keyword")
    assert found.returncode == 0 and "d001.md" in found.stdout, found.stderr
    assert_refused(metis("index", base_file), "DISK_FULL")  # still full: said again, no harm
    assert documents(base_file) >= kept

    remount(tmpfs, "size=64m")
    done = metis("index", base_file)
    assert done.returncode in WORDS_ONLY_DONE, done.stderr
    check_consistent(base_file, expected)
    assert documents(base_file) == 300


# -- a read-only base -----------------------------------------------------------------------


def test_a_base_on_a_read_only_file_system_is_searched_and_not_written(tmpfs, tmp_path):
    src = corpus(tmp_path / "src", 10)
    base_file = tmpfs / "b.db"
    assert metis("index", base_file, src, *WORDS_ONLY).returncode in WORDS_ONLY_DONE
    before = base_file.read_bytes()
    remount(tmpfs, "ro")
    try:
        found = metis("search", base_file, "word7", "--mode", "keyword")
        assert found.returncode == 0 and "d007.md" in found.stdout, found.stderr
        status = metis("status", base_file)
        assert status.returncode == 0 and "documents 10" in status.stdout, status.stderr
        assert_refused(metis("index", base_file), "BASE_READ_ONLY")
        another = corpus(tmp_path / "another", 2)  # a new source: refused, nothing written
        assert_refused(metis("index", base_file, another), "BASE_READ_ONLY")
        assert base_file.read_bytes() == before
    finally:
        remount(tmpfs, "rw")
    check_consistent(base_file, expected_chunks(src, CHUNK_CHARS))


def test_a_base_on_a_read_only_mount_is_served_beside_a_writable_one(tmpfs, tmp_path):
    import httpx
    from serving import serve, stop

    for place, name in ((tmpfs, "frozen"), (tmp_path, "live")):
        made = metis("index", place / f"{name}.db", corpus(tmp_path / name, 4), *WORDS_ONLY)
        assert made.returncode in WORDS_ONLY_DONE, made.stderr
        assert metis("remember", place / f"{name}.db", f"A fact of {name}.").returncode in (0, 3)
    remount(tmpfs, "ro")
    service = serve(tmp_path, str(tmpfs / "frozen.db"), str(tmp_path / "live.db"), "--poll", "0")
    try:
        with httpx.Client(base_url=service.url, timeout=60) as http:
            asked = {"question": "word2", "mode": "keyword"}
            found = {n: http.post(f"/v1/bases/{n}/search", json=asked) for n in ("frozen", "live")}
            facts = {
                n: http.post(f"/v1/bases/{n}/facts", json={"text": f"New {n}."})
                for n in ("frozen", "live")
            }
            listed = http.get("/v1/bases").json()
            frozen_facts = http.get("/v1/bases/frozen/facts").json()
    finally:
        stop(service)
    assert all(r.status_code == 200 and r.json()["results"] for r in found.values())
    assert facts["live"].status_code == 201
    assert facts["frozen"].status_code == 409
    assert facts["frozen"].json()["error"]["code"] == "BASE_READ_ONLY"
    assert [b["name"] for b in listed["bases"]] == ["frozen", "live"]
    assert frozen_facts["total"] == 1  # nothing written, nothing lost
    assert "Traceback" not in service.output()


def test_a_polling_service_says_once_that_a_read_only_base_is_not_indexed(tmpfs, tmp_path):
    """Polled every 0.2 s, the base on a read-only mount is said once to be searched and not
    indexed (not a failure at every poll), an index asked of it is BASE_READ_ONLY rather than
    202, and the writable base beside it is indexed."""
    import time

    import httpx
    from serving import serve, stop

    for place, name in ((tmpfs, "frozen"), (tmp_path, "live")):
        made = metis("index", place / f"{name}.db", corpus(tmp_path / name, 2), *WORDS_ONLY)
        assert made.returncode in WORDS_ONLY_DONE, made.stderr
    remount(tmpfs, "ro")
    (tmp_path / "live" / "late.md").write_text("# Late\n\nA quokka came late.\n")
    service = serve(tmp_path, str(tmpfs / "frozen.db"), str(tmp_path / "live.db"), "--poll", "0.2")
    try:
        with httpx.Client(base_url=service.url, timeout=60) as http:
            time.sleep(2)  # ten polls
            frozen = http.post("/v1/bases/frozen/index")
            asked = {"question": "quokka", "mode": "keyword"}
            live = http.post("/v1/bases/live/search", json=asked).json()["results"]
    finally:
        stop(service)
    assert (frozen.status_code, frozen.json()["error"]["code"]) == (409, "BASE_READ_ONLY")
    assert [r["citation"]["document"] for r in live] == ["late.md"]
    log = service.output()
    assert log.count("base frozen cannot be written") == 1, log
    assert "indexing frozen failed" not in log and "Traceback" not in log, log


def test_a_live_base_on_a_read_only_mount_is_served_read_only(tmpfs, tmp_path):
    """`serve --read-only` of a base in WAL mode on a read-only file system, no -wal or -shm
    beside it: SQLite cannot make the -shm a WAL reader needs, so the file is read as it is
    (nothing can change it), as every other command reads it there."""
    from metis_lite.base.core import Base

    base_file = tmpfs / "live.db"
    made = metis("index", base_file, corpus(tmp_path / "src", 3), *WORDS_ONLY)
    assert made.returncode in WORDS_ONLY_DONE, made.stderr
    assert not Path(f"{base_file}-wal").exists() and not Path(f"{base_file}-shm").exists()
    remount(tmpfs, "ro")
    try:
        with Base(base_file, read_only=True) as base:
            found = base.search("word2", mode="keyword").results
            assert [r.citation.document for r in found][:1] == ["d002.md"]
            assert base.status().documents == 3
        with Base(base_file) as base:  # and a base not asked to be read-only, as before
            assert base.search("word1", mode="keyword").results
    finally:
        remount(tmpfs, "rw")


def test_a_base_opened_read_only_says_so_and_still_answers(tmp_path):
    src = corpus(tmp_path / "src", 10)
    base_file = tmp_path / "b.db"
    assert metis("index", base_file, src, *WORDS_ONLY).returncode in WORDS_ONLY_DONE
    (src / "d999.md").write_text("# New\n\nA new document.\n")
    refused = metis("index", base_file, *WORDS_ONLY, runner=("--readonly",))
    assert_refused(refused, "BASE_READ_ONLY")
    found = metis("search", base_file, "word4", "--mode", "keyword", runner=("--readonly",))
    assert found.returncode == 0 and "d004.md" in found.stdout, found.stderr
    check_consistent(base_file, expected_chunks(src, CHUNK_CHARS))
    assert documents(base_file) == 10


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes files whatever their mode")
def test_a_read_only_base_file_is_searched_and_not_written(tmp_path):
    src = corpus(tmp_path / "src", 5)
    base_file = tmp_path / "b.db"
    assert metis("index", base_file, src, *WORDS_ONLY).returncode in WORDS_ONLY_DONE
    base_file.chmod(0o444)
    assert_refused(metis("index", base_file), "BASE_READ_ONLY")
    found = metis("search", base_file, "word2", "--mode", "keyword")
    assert found.returncode == 0 and "d002.md" in found.stdout, found.stderr


# -- what is not a base this metis-lite reads -----------------------------------------------


def small_base(tmp_path: Path) -> Path:
    src = corpus(tmp_path / "src", 3)
    base_file = tmp_path / "b.db"
    assert metis("index", base_file, src, *WORDS_ONLY).returncode in WORDS_ONLY_DONE
    return base_file


@pytest.mark.parametrize("command", ["search", "status", "index"])
def test_a_base_from_a_newer_metis_lite_is_refused_by_every_command(tmp_path, command):
    base_file = small_base(tmp_path)
    with closing(sqlite3.connect(base_file)) as plain, plain:
        plain.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    before = base_file.read_bytes()
    args = {"search": (base_file, "word1"), "status": (base_file,), "index": (base_file,)}
    refused = metis(command, *args[command])
    assert_refused(refused, "SCHEMA_TOO_NEW")
    assert "upgrade metis-lite" in refused.stderr
    assert base_file.read_bytes() == before


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda p: p.write_bytes(b"%PDF-1.4 not a base at all\n" * 50), id="not-sqlite"
        ),
        pytest.param(other_sqlite, id="other-sqlite"),
        pytest.param(lambda p: p.mkdir(), id="a-folder"),
    ],
)
@pytest.mark.parametrize("command", ["search", "status", "index"])
def test_a_file_that_is_not_a_base_is_refused_and_left_alone(tmp_path, make, command):
    target = tmp_path / "x.db"
    make(target)
    before = target.read_bytes() if target.is_file() else None
    args = {"search": (target, "word1"), "status": (target,), "index": (target,)}
    assert_refused(metis(command, *args[command]), "NOT_A_BASE")
    assert (target.read_bytes() if target.is_file() else None) == before


DAMAGED_COMMANDS = {
    "status": ("status", "{base}"),
    "search": ("search", "{base}", "word1", "--mode", "keyword"),
    "sources": ("sources", "{base}"),
    "facts": ("facts", "{base}"),
    "copy": ("copy", "{base}", "{tmp}/copy.db"),
    "index": ("index", "{base}"),
    "remember": ("remember", "{base}", "A fact."),
    "eval-run": ("eval", "run", "{base}", "saved"),
    "shell": ("shell", "{base}"),
    "serve": ("serve", "{base}", "--port", "0"),
    "mcp": ("mcp", "{base}"),
}
"""Every command that opens a base; the last three read stdin or serve, so they run in a
process of their own (a command that wrongly started would be killed by the timeout)."""


def truncate(base_file: Path) -> None:
    whole = base_file.read_bytes()
    base_file.write_bytes(whole[: len(whole) // 3])


def garble_chunks(base_file: Path) -> None:
    """Overwrite the first page of the chunks table (the file still opens: found when read)."""
    with closing(sqlite3.connect(base_file)) as plain:
        root = plain.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'chunks'").fetchone()
        page = plain.execute("PRAGMA page_size").fetchone()[0]
    with base_file.open("r+b") as raw:
        raw.seek((root[0] - 1) * page)
        raw.write(b"\xa5" * page)


@pytest.mark.parametrize("command", list(DAMAGED_COMMANDS))
def test_a_damaged_base_file_is_refused_clearly_by_every_command(tmp_path, command):
    base_file = small_base(tmp_path)
    truncate(base_file)
    before = base_file.read_bytes()
    args = [a.format(base=base_file, tmp=tmp_path) for a in DAMAGED_COMMANDS[command]]
    if command in ("shell", "serve", "mcp"):
        run = subprocess.run(
            [sys.executable, "-m", "metis_lite", *args],
            input="SELECT count(*) FROM chunks;\n",
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
    else:
        run = metis(*args)
    assert_refused(run, "BASE_DAMAGED")
    assert run.stderr.count("\n") == 1, run.stderr  # one line
    assert base_file.read_bytes() == before
    assert not (tmp_path / "copy.db").exists()


@pytest.mark.parametrize("command", ["search", "copy"])
def test_a_base_damaged_inside_is_refused_when_the_damage_is_read(tmp_path, command):
    # (`status` and `sources` count chunks by an index, and read no passage's text when the
    # model reads every language: they never reach the damaged page, and say the counts.)
    base_file = small_base(tmp_path)
    garble_chunks(base_file)
    before = base_file.read_bytes()
    args = [a.format(base=base_file, tmp=tmp_path) for a in DAMAGED_COMMANDS[command]]
    assert_refused(metis(*args), "BASE_DAMAGED")
    assert base_file.read_bytes() == before


def test_a_file_whose_first_page_was_overwritten_is_not_a_base(tmp_path):
    base_file = small_base(tmp_path)
    with base_file.open("r+b") as raw:
        raw.write(b"\0" * 100)  # the SQLite header: nothing says what the file was
    assert_refused(metis("status", base_file), "NOT_A_BASE")


def fill(mount: Path) -> Path:
    """Write zeros to a file on `mount` until the disk has no room left."""
    filler = mount / "filler"
    with filler.open("wb", buffering=0) as out:
        try:
            while out.write(b"\0" * 4096):
                pass
        except OSError:
            pass
    return filler


def test_a_full_disk_is_said_as_full_by_every_command_and_serve_serves_the_others(tmpfs, tmp_path):
    """A base on a full disk, closed (no -shm beside it): SQLite cannot make the -shm it
    needs to read it, and says only "disk I/O error"; a copy or publication to a full disk
    fails with SQLite's "not an error". Each is DISK_FULL, and serve serves the other base."""
    import httpx
    from serving import serve, stop

    src = corpus(tmp_path / "src", 3)
    for place in (tmpfs, tmp_path):
        made = metis("index", place / "b.db", src, *WORDS_ONLY)
        assert made.returncode in WORDS_ONLY_DONE, made.stderr
    full = tmpfs / "b.db"
    assert not Path(f"{full}-shm").exists()
    filler = fill(tmpfs)
    for args in (("status", full), ("search", full, "word1"), ("sources", full)):
        done = metis(*args)
        assert_refused(done, "DISK_FULL")
        assert done.stderr.count("\n") == 1 and "disk is full" in done.stderr, done.stderr
    for command in ("copy", "publish"):
        done = metis(command, tmp_path / "b.db", tmpfs / f"{command}.db")
        assert_refused(done, "DISK_FULL")
        assert "not an error" not in done.stderr, done.stderr
        assert sorted(p.name for p in tmpfs.iterdir() if command in p.name) == []
    service = serve(tmp_path, f"full={full}", f"other={tmp_path / 'b.db'}", "--poll", "0")
    try:
        with httpx.Client(base_url=service.url, timeout=60) as http:
            listed = http.get("/v1/bases").json()
            found = http.post("/v1/bases/other/search", json={"question": "word2"})
            refused = http.post("/v1/bases/full/search", json={"question": "word2"})
    finally:
        stop(service)
    assert [b["name"] for b in listed["bases"]] == ["other"]
    assert [(u["name"], u["code"]) for u in listed["unavailable"]] == [("full", "DISK_FULL")]
    assert "-wal or -shm deleted" not in listed["unavailable"][0]["message"]
    assert found.status_code == 200 and found.json()["results"]
    assert (refused.status_code, refused.json()["error"]["code"]) == (507, "DISK_FULL")
    assert "Traceback" not in service.output()

    filler.unlink()  # room again: the base is read as it was
    status = metis("status", full)
    assert status.returncode == 0 and "documents 3" in status.stdout, status.stderr
