"""A served base beside other SQLite clients: the real `sqlite3` shell and Python's `sqlite3`
read it and write a table of their own while `metis-lite serve` writes facts, indexes and
counts searches. Every request succeeds, the -wal stays while the base is served (no
descriptor of the base is ever closed under SQLite's locks), and afterwards
`PRAGMA integrity_check` is ok and every fact is there.

Also here: questions embedded at once by threads and another process beside the shell, a source
folder holding links to the served base, `kill -9` of the service during a
burst of facts while `sqlite3` reads, two services on one base, `copy` while the shell holds a
write transaction open, and a -wal deleted by hand under the service.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from conftest import DEAD_EMBEDDING, ROOT, words_only_base
from serving import Service, serve, stop

from metis_lite.base.core import Base
from metis_lite.store import Store

SQLITE3 = shutil.which("sqlite3")
needs_shell = pytest.mark.skipif(
    SQLITE3 is None, reason="Debian's sqlite3 package is not installed (scripts/test installs it)"
)

SERVED_S = 7.0
"""How long the clients run beside the service: past base_models.COUNT_FLUSH_S (5 s), so search
counts are written while the shell reads."""

http = httpx.Client(timeout=60)


def shell(base_file: Path, sql: str) -> subprocess.CompletedProcess[str]:
    """The shell as another client runs it: waiting up to 10 s for a writer, as every client
    that writes to a live base must (docs/reliability.md)."""
    assert SQLITE3 is not None
    return subprocess.run(
        [SQLITE3, "-bail", "-cmd", ".timeout 10000", str(base_file), sql],
        capture_output=True,
        text=True,
        timeout=60,
    )


def documents_base(tmp_path: Path, documents: int = 5) -> tuple[Path, Path]:
    src = tmp_path / "src"
    src.mkdir()
    for n in range(documents):
        (src / f"d{n}.md").write_text(f"# Doc {n}\n\nshared words and word{n} here.\n")
    base_file = tmp_path / "served.db"
    with words_only_base(base_file, src) as base:
        base.index()
    return base_file, src


def post_fact(service: Service, base: str, text: str) -> httpx.Response:
    return http.post(f"{service.url}/v1/bases/{base}/facts", json={"text": text})


@needs_shell
def test_the_sqlite3_shell_and_python_read_and_write_beside_a_serving_base(tmp_path):
    base_file, src = documents_base(tmp_path)
    service = serve(tmp_path, f"served={base_file}", "--poll", "0", "--no-access-log")
    wal = Path(f"{base_file}-wal")
    facts: list[str] = []
    statuses: list[tuple[str, int]] = []
    shell_rows = python_rows = 0
    try:
        deadline = time.monotonic() + SERVED_S
        for n in itertools.count():
            if time.monotonic() > deadline:
                break
            text = f"Fact number {n} of the burst."
            answer = post_fact(service, "served", text)
            statuses.append(("fact", answer.status_code))
            if answer.status_code == 201:
                facts.append(text)
            searched = http.post(
                f"{service.url}/v1/bases/served/search",
                json={"question": f"shared word{n % 5}", "mode": "keyword"},
            )
            statuses.append(("search", searched.status_code))
            if n % 5 == 0:
                (src / f"new{n}.md").write_text(f"# New {n}\n\nshared fresh text {n}.\n")
                indexed = http.post(f"{service.url}/v1/bases/served/index")
                statuses.append(
                    ("index", 202 if indexed.status_code == 409 else indexed.status_code)
                )
            read = shell(
                base_file,
                "SELECT count(*) FROM facts; SELECT count(*) FROM chunks;"
                " CREATE TABLE IF NOT EXISTS shell_notes (n INTEGER);"
                f" INSERT INTO shell_notes VALUES ({n});",
            )
            assert read.returncode == 0, read.stderr
            shell_rows += 1
            with closing(sqlite3.connect(base_file, timeout=10)) as plain:
                plain.execute("SELECT count(*) FROM search_counts").fetchone()
                with plain:
                    plain.execute("CREATE TABLE IF NOT EXISTS python_notes (n INTEGER)")
                    plain.execute("INSERT INTO python_notes VALUES (?)", (n,))
            python_rows += 1
            assert wal.exists(), "the -wal of a served base was deleted under the service"
        status = http.get(f"{service.url}/v1/bases").json()["bases"][0]
    finally:
        stop(service)
    assert [s for s in statuses if s[1] not in (200, 201, 202)] == []
    assert sum(status["searches_per_day"].values()) > 0  # counted while the shell read
    assert "Traceback" not in service.output()
    with closing(sqlite3.connect(base_file)) as plain:
        assert plain.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        stored = [r[0] for r in plain.execute("SELECT text FROM facts ORDER BY id")]
        assert plain.execute("SELECT count(*) FROM shell_notes").fetchone()[0] == shell_rows
        assert plain.execute("SELECT count(*) FROM python_notes").fetchone()[0] == python_rows
    assert stored == facts and len(facts) > 3
    with Store(base_file) as store:  # the words index too (it needs the metis tokenizer)
        store.db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
        news = store.db.execute("SELECT count(*) FROM documents WHERE path LIKE 'new%'")
        assert news.fetchone()[0] >= 1


@needs_shell
def test_the_shell_closing_a_base_this_process_has_open_leaves_its_wal(tmp_path):
    """The cause of the WAL lost under a service: a descriptor of the base closed by this
    process (a check of its first bytes) dropped SQLite's locks, and the shell, seeing no
    other reader, checkpointed and deleted the -wal and -shm on exit."""
    base_file = tmp_path / "team.db"
    with Base(base_file, create=True) as base:
        base.configure(embedding=DEAD_EMBEDDING, kind="memory")
        base.remember("The first fact.")
        for n in range(3):
            assert shell(base_file, "SELECT count(*) FROM facts;").stdout.strip() == str(n + 1)
            assert Path(f"{base_file}-wal").exists() and Path(f"{base_file}-shm").exists()
            base.remember(f"Fact {n + 2}.")  # a new connection of this process, and a write
        assert base.facts()[1] == 4
    with closing(sqlite3.connect(base_file)) as plain:
        assert plain.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


@needs_shell
def test_a_source_holding_links_to_the_served_base_never_opens_its_files(tmp_path):
    """The base lies in its own source, which holds a symlink and a hard link to it (and a
    link to its -wal) named like documents. Opening and closing them would drop SQLite's locks
    and let the shell delete the -wal: the document route answers 404, the service's indexer
    and an index run beside it skip them with their reason, and the base stays whole."""
    src = tmp_path / "src"
    src.mkdir()
    base_file = src / "served.db"
    for name in ("a", "b", "keep"):
        (src / f"{name}.md").write_text(f"# {name}\n\nshared words of {name}.\n")
    with words_only_base(base_file, src) as base:
        base.index()
    (src / "a.md").unlink()
    (src / "a.md").symlink_to("served.db")
    (src / "b.md").unlink()
    os.link(base_file, src / "b.md")
    (src / "w.md").symlink_to("served.db-wal")
    service = serve(tmp_path, f"served={base_file}", "--poll", "0", "--no-access-log")
    wal = Path(f"{base_file}-wal")
    documents: list[httpx.Response] = []
    try:
        for n in range(12):
            assert post_fact(service, "served", f"Fact {n}.").status_code == 201
            for name in ("a", "b", "w"):
                document = f"{service.url}/v1/bases/served/documents/src/{name}.md"
                documents.append(http.get(document))
            if n == 4:
                assert http.post(f"{service.url}/v1/bases/served/index").status_code == 202
            read = shell(base_file, "SELECT count(*) FROM facts;")
            assert read.returncode == 0 and read.stdout.strip() == str(n + 1), read.stderr
            assert wal.exists(), "the -wal of a served base was deleted under the service"
        deadline = time.monotonic() + 30
        while http.get(f"{service.url}/v1/bases").json()["bases"][0]["state"] != "Waiting":
            assert time.monotonic() < deadline, "the service's indexing pass did not end"
            time.sleep(0.1)
        beside = subprocess.run(
            [sys.executable, "-m", "metis_lite", "index", str(base_file)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert shell(base_file, "SELECT count(*) FROM facts;").stdout.strip() == "12"
        assert wal.exists()
    finally:
        stop(service)
    assert {d.status_code for d in documents} == {404}
    assert not any(b"SQLite format" in d.content for d in documents)
    assert beside.returncode in (0, 3), beside.stderr
    for name in ("a", "b", "w"):
        assert f"skipped src/{name}.md: is the file of a base this process has open" in (
            beside.stdout + beside.stderr
        )
    assert "Traceback" not in service.output()
    assert shell(base_file, "PRAGMA integrity_check;").stdout.strip() == "ok"
    with closing(sqlite3.connect(base_file)) as plain:
        facts = {r[0] for r in plain.execute("SELECT text FROM facts")}
        paths = {r[0] for r in plain.execute("SELECT path FROM documents WHERE kind = 'md'")}
    assert facts == {f"Fact {n}." for n in range(12)}
    assert paths == {"keep.md"}  # the two files that became the base's are removed


POSTERS = 4
"""Threads posting facts without pause when the service is killed."""


@needs_shell
def test_kill_9_of_the_service_during_a_burst_of_facts_loses_no_fact_it_answered(tmp_path):
    """Four clients post facts without pause while the shell reads; the service is killed
    (SIGKILL) with requests in flight. Every fact it answered 201 is in the base, which is
    whole; requests cut by the kill may or may not have been written, never half."""
    base_file, _ = documents_base(tmp_path, documents=1)
    service = serve(tmp_path, f"served={base_file}", "--poll", "0", "--no-access-log")
    answered: list[str] = []
    cut: list[float] = []  # when each request the kill cut short was sent
    reads: list[int] = []
    stop_posting, stop_reading = threading.Event(), threading.Event()

    def post_while(k: int) -> None:
        with httpx.Client(timeout=30) as client:
            for n in itertools.count():
                if stop_posting.is_set():
                    return
                text = f"Burst fact {k}-{n}."
                sent = time.monotonic()
                try:
                    answer = client.post(
                        f"{service.url}/v1/bases/served/facts", json={"text": text}
                    )
                except httpx.HTTPError:
                    cut.append(sent)
                    continue
                assert answer.status_code == 201, answer.text
                answered.append(text)

    def read_while() -> None:
        while not stop_reading.is_set():
            reads.append(shell(base_file, "SELECT count(*) FROM facts;").returncode)

    threads = [threading.Thread(target=post_while, args=(k,)) for k in range(POSTERS)]
    reader = threading.Thread(target=read_while)
    for thread in [*threads, reader]:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(answered) < 40:
            assert time.monotonic() < deadline and all(t.is_alive() for t in threads)
            time.sleep(0.01)
        killed_at = time.monotonic()
        service.process.send_signal(signal.SIGKILL)
        service.process.wait()
    finally:
        stop_posting.set()
        for thread in threads:
            thread.join()
        stop_reading.set()
        reader.join()
        if service.process.poll() is None:
            stop(service)
    assert any(sent < killed_at for sent in cut), "no request was in flight when it was killed"
    assert reads and set(reads) == {0}
    assert shell(base_file, "PRAGMA integrity_check;").stdout.strip() == "ok"
    with closing(sqlite3.connect(base_file)) as plain:
        stored = {r[0] for r in plain.execute("SELECT text FROM facts")}
    assert set(answered) <= stored and len(answered) >= 40


def test_two_services_on_one_base_both_answer_and_every_fact_is_kept(tmp_path):
    base_file, _ = documents_base(tmp_path, documents=2)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = serve(tmp_path / "one", f"served={base_file}", "--poll", "0", "--no-access-log")
    try:
        second = serve(tmp_path / "two", f"served={base_file}", "--poll", "0", "--no-access-log")
        try:
            answers = [post_fact((first, second)[n % 2], "served", f"Fact {n}.") for n in range(12)]
            seen = [
                http.get(f"{s.url}/v1/bases/served/facts", params={"limit": 100}).json()["total"]
                for s in (first, second)
            ]
            indexed = [
                http.post(f"{s.url}/v1/bases/served/index").status_code for s in (first, second)
            ]
        finally:
            stop(second)
    finally:
        stop(first)
    assert [a.status_code for a in answers] == [201] * 12
    assert seen == [12, 12]  # each sees the other's facts
    assert set(indexed) <= {202, 409}  # one indexes at a time: the other says BASE_BUSY
    with closing(sqlite3.connect(base_file)) as plain:
        assert plain.execute("SELECT count(*) FROM facts").fetchone()[0] == 12
        assert plain.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert plain.execute("SELECT count(*) FROM sources WHERE path IS NULL").fetchone()[0] == 1


@needs_shell
def test_copy_while_the_shell_holds_a_write_transaction_copies_what_was_committed(tmp_path):
    base_file, _ = documents_base(tmp_path, documents=3)
    assert SQLITE3 is not None
    holder = subprocess.Popen(
        [SQLITE3, str(base_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        holder.stdin.write(
            "BEGIN IMMEDIATE; CREATE TABLE mine (x); INSERT INTO mine VALUES (1);"
            " SELECT 'holding';\n"
        )
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "holding"  # the write lock is held now
        copied = subprocess.run(
            [sys.executable, "-m", "metis_lite", "copy", str(base_file), str(tmp_path / "c.db")],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert copied.returncode == 0, copied.stderr
        holder.stdin.write("COMMIT;\n")
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()
    with closing(sqlite3.connect(tmp_path / "c.db")) as copy:
        assert copy.execute("SELECT count(*) FROM documents").fetchone()[0] == 3
        names = {r[0] for r in copy.execute("SELECT name FROM sqlite_schema")}
        assert "mine" not in names  # not committed when the copy was taken
    with closing(sqlite3.connect(base_file)) as plain:
        assert plain.execute("SELECT x FROM mine").fetchall() == [(1,)]
    assert not os.path.exists(f"{tmp_path / 'c.db'}-wal")


@pytest.mark.parametrize("deleted", [("-wal",), ("-wal", "-shm")], ids=["wal", "wal-and-shm"])
def test_a_wal_deleted_by_hand_under_the_service_is_refused_and_loses_no_fact_it_answered(
    tmp_path, deleted
):
    """Never to be done (docs/reliability.md), and still: another process then fails with a
    disk I/O error (the -wal alone) or reads the base without the commits the deleted WAL held
    (both); the service notices at its next write that its -wal is not the file of that name
    any more and answers BASE_DAMAGED from then on, never a 201 for a fact no other process
    would see (nor a 500); every fact it answered 201 is in the base once it has closed."""
    base_file, _ = documents_base(tmp_path, documents=2)
    service = serve(tmp_path, f"served={base_file}", "--poll", "0", "--no-access-log")
    answered: list[str] = []
    try:
        for n in range(3):
            assert post_fact(service, "served", f"Before {n}.").status_code == 201
            answered.append(f"Before {n}.")
        for suffix in deleted:
            Path(f"{base_file}{suffix}").unlink()
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
                " print(c.execute('SELECT count(*) FROM facts').fetchone()[0])",
                str(base_file),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        searches: list[httpx.Response] = []

        def ask() -> None:
            searches.append(
                http.post(
                    f"{service.url}/v1/bases/served/search",
                    json={"question": "shared", "mode": "keyword"},
                )
            )

        threads = [threading.Thread(target=ask) for _ in range(20)]  # new pooled connections
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        after = [post_fact(service, "served", f"After {n}.") for n in range(3)]
        later = http.post(
            f"{service.url}/v1/bases/served/search", json={"question": "shared", "mode": "keyword"}
        )
    finally:
        stop(service)
    if deleted == ("-wal",):  # the -shm still says the WAL holds commits the new one lacks
        assert other.returncode == 1 and "disk I/O error" in other.stderr, other
    else:  # a new -wal and -shm: the base as the main file has it, without the 3 facts
        assert other.returncode == 0 and other.stdout.strip() == "0", other
    for answer in searches:
        if answer.status_code != 200:
            assert answer.json()["error"]["code"] in ("STORE_ERROR", "BASE_DAMAGED"), answer.text
    assert [(a.status_code, a.json()["error"]["code"]) for a in after] == [
        (409, "BASE_DAMAGED")
    ] * 3
    assert "-wal or -shm was deleted or replaced" in after[0].json()["error"]["message"]
    assert (later.status_code, later.json()["error"]["code"]) == (409, "BASE_DAMAGED")
    assert "Traceback" not in service.output()
    with closing(sqlite3.connect(base_file)) as plain:
        assert plain.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        stored = {r[0] for r in plain.execute("SELECT text FROM facts")}
    assert stored == set(answered)


QUESTIONS = (
    "how many holidays do I get",
    "configuração do proxy",
    "who pays for a hotel abroad",
    "what do I do when I am ill",
)


@needs_shell
def test_questions_asked_at_once_by_threads_and_another_process_get_the_vectors_they_get_alone(
    example_base_file, tmp_path
):
    """The embedded model is shared by every thread of a process (one BatchRunner, its workers
    taking a question's groups while the other cores are free): four threads asking at once
    and another process asking the same questions, while the `sqlite3` shell reads the base,
    each find the chunks and cosines one caller alone finds (to the last bit in this process)."""
    base_file = tmp_path / "handbook.db"
    shutil.copy(example_base_file, base_file)

    def found(answer) -> list[tuple[int, float | None]]:
        return [(r.chunk_id, r.scores.dense) for r in answer.results]

    with Base(base_file) as base:
        alone = {q: found(base.search(q, mode="dense", top_k=5)) for q in QUESTIONS}
    other = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "metis_lite",
            "search",
            str(base_file),
            "--json",
            "--mode",
            "dense",
            "--top-k",
            "5",
            "--",
            QUESTIONS[0],
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    reads: list[subprocess.CompletedProcess[str]] = []
    asked: list[tuple[str, list[tuple[int, float | None]]]] = []
    errors: list[str] = []
    with Base(base_file) as base:

        def asking(offset: int) -> None:
            for n in range(8):
                question = QUESTIONS[(offset + n) % len(QUESTIONS)]
                try:
                    answer = base.search(question, mode="dense", top_k=5)
                except Exception as exc:  # noqa: BLE001 - the test fails on any
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                asked.append((question, found(answer)))

        threads = [threading.Thread(target=asking, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            reads.append(shell(base_file, "SELECT count(*) FROM chunks; PRAGMA quick_check;"))
        for thread in threads:
            thread.join()
    out, err = other.communicate(timeout=300)
    assert other.returncode == 0, err
    assert errors == [] and len(asked) == 32
    assert all(got == alone[question] for question, got in asked)
    # The other process answers in JSON: each passage by its text, its cosine to 6 decimals.
    theirs = [(r["text"], r["scores"]["dense"]) for r in json.loads(out)["results"]]
    with Store(base_file) as store:
        texts = store.chunk_rows([c for c, _ in alone[QUESTIONS[0]]])
    assert theirs == [(texts[c].text, round(s, 6)) for c, s in alone[QUESTIONS[0]]]
    assert reads and all(r.returncode == 0 and r.stdout.split() == ["46", "ok"] for r in reads)
