"""Writers at the same moment: every write goes through the Store, takes the write lock before
it reads and waits its turn within the busy timeout; facts written together all succeed and
one holds per key; a full disk is DISK_FULL; a fact from the future is refused."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import apsw
import httpx
import pytest
from conftest import ROOT, words_only_base

from metis_lite.base.core import Base
from metis_lite.errors import BaseBusy, DiskFull, InvalidRequest
from metis_lite.evaluation import saved
from metis_lite.evaluation.sets import EvalSet, Expected, Question
from metis_lite.store import connection

WRITERS = 30


@pytest.fixture
def team(tmp_path):
    with words_only_base(tmp_path / "team.db") as base:
        base.configure(kind="memory")
        yield base


def holding(base: Base, key: str) -> list[str]:
    return [f.text for f in base.facts(limit=1000)[0] if f.key == key and f.holds]


def assert_one_chain(base: Base, key: str, count: int) -> None:
    """`count` facts with the key, one holding; each other replaced by a fact that exists."""
    facts = [f for f in base.facts(limit=1000)[0] if f.key == key]
    ids = {f.id for f in facts}
    assert len(facts) == count
    assert len([f for f in facts if f.holds]) == 1
    assert all(f.replaced_by in ids for f in facts if not f.holds)


def hold_write_lock(path, seconds: float, started: threading.Event) -> threading.Thread:
    """Another connection holding the base's write lock for `seconds` (as an indexer's
    document transaction, or another process's fact, does)."""

    def hold() -> None:
        other = apsw.Connection(str(path))
        other.execute("BEGIN IMMEDIATE")
        other.execute("UPDATE meta SET value = value WHERE key = 'created_at'")
        started.set()
        time.sleep(seconds)
        other.execute("COMMIT")
        other.close()

    thread = threading.Thread(target=hold)
    thread.start()
    started.wait(10)
    return thread


def test_facts_written_at_the_same_moment_all_succeed_and_one_holds(team):
    barrier = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        barrier.wait()
        try:
            team.remember(f"The on-call engineer is person {n}.", key="on-call", subject="rota")
        except BaseException as exc:  # noqa: BLE001 - every failure is what the test reports
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert_one_chain(team, "on-call", WRITERS)
    assert team.search("on-call engineer", mode="keyword", top_k=50).results


def test_thirty_facts_posted_over_http_at_once_are_all_stored_and_one_holds(team, tmp_path):
    """30 parallel POST /v1/bases/team/facts with one key, to a real service."""
    from serving import serve, stop

    team.close()
    service = serve(tmp_path, str(team.path), "--poll", "0")
    try:
        barrier = threading.Barrier(WRITERS)
        answers: list[int] = []

        def post(n: int) -> None:
            body = {"text": f"The on-call engineer is person {n}.", "key": "on-call"}
            barrier.wait()
            answer = httpx.post(f"{service.url}/v1/bases/team/facts", json=body, timeout=60)
            answers.append(answer.status_code)

        threads = [threading.Thread(target=post, args=(n,)) for n in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        assert sorted(answers) == [201] * WRITERS
    finally:
        stop(service)
    assert "Traceback" not in service.output()
    with Base(team.path) as base:
        assert_one_chain(base, "on-call", WRITERS)


REMEMBER_AT = """
import sys, time
from metis_lite import cli
start, base, n = float(sys.argv[1]), sys.argv[2], sys.argv[3]
time.sleep(max(0.0, start - time.time()))  # all six begin at the same moment
codes = [cli.main(["remember", base, f"Fact {n}.{i}.", "--key", "shared"]) for i in range(5)]
sys.exit(max(codes))
"""


def test_six_remember_commands_at_once_all_succeed(team):
    """Six processes, each running `metis-lite remember` five times, all starting together
    (once their imports are done)."""
    team.close()
    start = time.time() + 4
    commands = [
        subprocess.Popen(
            [sys.executable, "-c", REMEMBER_AT, str(start), str(team.path), str(n)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(6)
    ]
    for command in commands:
        out, err = command.communicate(timeout=120)
        assert command.returncode in (0, 3), err  # 3: stored, its vector waits for the model
        # One line per fact; a fact stated a moment before another process's, but written
        # after it, is born replaced ("fact 9 …: already replaced by fact 10"), as it should.
        assert "Traceback" not in err
        assert sum(line.startswith("fact ") for line in out.splitlines()) == 5, out
    with Base(team.path) as base:
        assert_one_chain(base, "shared", 30)


def test_a_writer_waits_for_another_writers_lock(team):
    started = threading.Event()
    holder = hold_write_lock(team.path, 1.0, started)
    began = time.monotonic()
    fact = team.remember("Written after the other writer committed.", key="k")
    holder.join()
    assert fact.holds and time.monotonic() - began >= 0.9
    evalset = EvalSet("s", "jsonl", "test", (Question("q", (Expected("a.md"),)),))
    holder = hold_write_lock(team.path, 0.5, threading.Event())
    saved.save_set(team, "smoke", evalset)
    saved.record_run(team, "smoke", {"keyword": {"ndcg@10": 1.0}}, {"embedding": "m"})
    holder.join()
    assert saved.list_sets(team)[0][:2] == ("smoke", 1)
    assert saved.last_run(team, "smoke").metrics == {"keyword": {"ndcg@10": 1.0}}


def test_a_lock_held_past_the_busy_timeout_is_base_busy_and_nothing_is_written(team, monkeypatch):
    monkeypatch.setattr(connection, "BUSY_TIMEOUT_MS", 300)
    holder = hold_write_lock(team.path, 2.0, threading.Event())
    try:
        with pytest.raises(BaseBusy) as busy:
            team.remember("Never written.", key="k")
        assert busy.value.code == "BASE_BUSY" and "nothing was written" in busy.value.message
    finally:
        holder.join()
    assert team.facts()[1] == 0


def test_a_full_disk_while_writing_a_fact_is_disk_full_and_nothing_is_half_written(
    team, monkeypatch
):
    team.remember("A first fact.", key="k")
    pages = team.store.db.execute("PRAGMA page_count").fetchone()[0]
    real_connect = connection.connect

    def capped(path, **kwargs):
        db = real_connect(path, **kwargs)
        db.execute(f"PRAGMA max_page_count = {pages}")
        return db

    monkeypatch.setattr(connection, "connect", capped)
    with Base(team.path) as full_disk, pytest.raises(DiskFull) as full:  # every connection capped
        full_disk.remember("A long fact. " * 700, key="k")
    assert full.value.code == "DISK_FULL"
    monkeypatch.undo()
    assert [f.text for f in team.facts()[0]] == ["A first fact."]
    assert holding(team, "k") == ["A first fact."]


def test_a_fact_stated_in_the_future_is_refused(team):
    now = datetime.now(UTC)
    for when in ("9999-01-01", "9999-12-31T23:59:59-05:00", (now + timedelta(hours=1)).isoformat()):
        with pytest.raises(InvalidRequest) as refused:
            team.remember("From the future.", stated_at=when, key="k")
        assert refused.value.code == "INVALID_REQUEST"
    assert team.facts()[1] == 0
    soon = team.remember(
        "A clock a minute ahead.", stated_at=(now + timedelta(minutes=1)).isoformat()
    )
    assert soon.holds


def test_a_fact_dated_in_the_future_before_it_was_refused_does_not_pin_its_key(team):
    old = team.remember("Ana works on billing.", key="ana/work")
    team.store.db.execute(  # as an older metis-lite let it be written
        "UPDATE facts SET stated_at = '9999-01-01T00:00:00Z' WHERE id = ?", (old.id,)
    )
    new = team.remember("Ana works on search.", key="ana/work")
    assert new.holds
    assert holding(team, "ana/work") == ["Ana works on search."]
