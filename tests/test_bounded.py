"""Bounded resources: connections to a base are pooled and reused whatever the threads, a
thread's own connection goes with the thread, and a search never waits on a writer to count
itself."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import words_only_base

from metis_lite.base import models as base_models
from metis_lite.base.core import Base
from metis_lite.base.multi import search_bases
from metis_lite.store import Store, connection

CALLS = 1_000
WARM_UP = 100
RSS_GROWTH_MAX = 16 * 1024 * 1024
"""Bytes the process may grow by over 900 searches of two bases once warm: one connection
per thread, as before the pool, was ~2,000 connections (and descriptors) by then."""


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def two_bases(tmp_path):
    made = []
    for name in ("one", "two"):
        src = tmp_path / f"src-{name}"
        src.mkdir()
        for n in range(5):
            (src / f"{name}{n}.md").write_text(f"# {name} {n}\n\nshared words {name} number {n}.\n")
        base = words_only_base(tmp_path / f"{name}.db", src)
        base.index()
        made.append(base)
    yield made
    for base in made:
        base.close()


def test_a_thousand_searches_of_several_bases_without_an_executor_leave_descriptors_flat(
    two_bases,
):
    for _ in range(WARM_UP):
        search_bases(two_bases, "shared words", mode="keyword")
    fds, rss = descriptors(), rss_bytes()
    for _ in range(CALLS - WARM_UP):
        answer = search_bases(two_bases, "shared words", mode="keyword")
        assert len(answer.results) == 10
    assert descriptors() <= fds
    assert rss_bytes() - rss < RSS_GROWTH_MAX


def test_a_threads_own_connection_is_closed_when_the_thread_ends(two_bases):
    base = two_bases[0]

    def read() -> None:
        assert base.store.counts()["documents"] == 5

    for _ in range(10):  # warm: whatever a first thread leaves for good
        worker = threading.Thread(target=read)
        worker.start()
        worker.join()
    fds = descriptors()
    for _ in range(200):
        worker = threading.Thread(target=read)
        worker.start()
        worker.join()
    assert descriptors() <= fds


def test_a_search_counts_itself_without_waiting_for_a_writer(two_bases, monkeypatch):
    """A writer holds the base's write lock for as long as the test likes; searches meanwhile
    answer (each would wait up to the busy timeout, 60 s here, if its count waited), and the
    counts they kept for later are written once the writer is done: none is lost."""
    base = two_bases[0]
    monkeypatch.setattr(base_models, "COUNT_FLUSH_S", 0.0)  # every search tries to write
    monkeypatch.setattr(connection, "BUSY_TIMEOUT_MS", 60_000)
    before = sum(base.status().searches_per_day.values())
    holding, release = threading.Event(), threading.Event()

    def writer() -> None:
        with Store(Path(base.path)) as other, other.writing():
            other.db.execute("CREATE TABLE IF NOT EXISTS held (x)")
            holding.set()
            release.wait(120)

    holder = threading.Thread(target=writer)
    holder.start()
    answered = threading.Event()

    def searching() -> None:
        for _ in range(3):
            base.search("shared words", mode="keyword")
        answered.set()

    try:
        assert holding.wait(60)
        searcher = threading.Thread(target=searching)
        searcher.start()
        assert answered.wait(50), "a search waited for the writer to count itself"
    finally:
        release.set()
        holder.join()
    searcher.join()
    assert sum(base.status().searches_per_day.values()) == before + 3


PROMPT_S = 1.0
"""How long closing a base or reading its status may take beside a writer (the busy timeout,
5 s, is what each waited)."""

HOLD_WRITE = """
import sqlite3, sys
plain = sqlite3.connect(sys.argv[1], isolation_level=None)
plain.execute("BEGIN IMMEDIATE")
plain.execute("CREATE TABLE held (x)")
print("holding", flush=True)
sys.stdin.read()
plain.execute("ROLLBACK")
"""


def test_a_base_closes_and_says_its_status_at_once_while_another_process_writes(tmp_path):
    """Another process holds a write transaction (as `sqlite3` with BEGIN IMMEDIATE does) while
    a base is opened, searched, asked its status and closed, as `metis-lite search` and
    `status` do: none of it waits for the writer. The status counts the search not yet
    written; the close drops it (nothing would write it later)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# A\n\nshared words.\n")
    base_file = tmp_path / "b.db"
    with words_only_base(base_file, src) as made:
        made.index()
        made.search("shared", mode="keyword")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITE, str(base_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "holding"
        base = Base(base_file)
        try:
            assert base.search("shared", mode="keyword").results
            started = time.monotonic()
            status = base.status()
            assert time.monotonic() - started < PROMPT_S, "the status waited for the writer"
            assert sum(status.searches_per_day.values()) == 2  # one written, one pending
        finally:
            started = time.monotonic()
            base.close()
            closed_in = time.monotonic() - started
        assert closed_in < PROMPT_S, f"closing waited {closed_in:.1f} s for the writer"
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0
        holder.stdout.close()
    with Base(base_file) as after:
        assert sum(after.status().searches_per_day.values()) == 1
