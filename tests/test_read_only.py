"""Read-only readers (`metis-lite serve --read-only`, Base(read_only=True)): nothing is written
to a base they serve, writes are refused with BASE_READ_ONLY, /v1/health says which file each
base serves, and a copy published over a served one is switched to between requests — searches
in flight finish on the old copy, none fails, and no descriptor of it is left once they end
(read in /proc). In this process with threads, and with a service and a publisher as processes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import ROOT, add_passages, words_only_base
from serving import serve, stop
from word_models import WORDS, WordsEmbedder, serving

from metis_lite.base.core import Base
from metis_lite.copies.publish import publish
from metis_lite.errors import BaseReadOnly, InvalidRequest
from metis_lite.models import registry
from metis_lite.service.bases import SearchRequest, Service, open_bases
from metis_lite.store import Store

http = httpx.Client(timeout=60)
TOKEN = "reader-token-0123456789abcdef012"
SWITCH_S = 30.0
"""How long a test waits for a reader to serve a new copy (it looks every 0.5 s; opening and
warming a small copy takes a fraction of a second, far more on a loaded machine)."""


@pytest.fixture(scope="module", autouse=True)
def close_http_client():
    yield
    http.close()


def live_base(folder: Path, *texts: str, vectors: bool = False) -> Path:
    """A base of one document per text (by words only; with `vectors`, each chunk also gets
    a vector from the words-hash model: the base's spec names it, word_models.WORDS)."""
    src = folder / "src"
    src.mkdir(parents=True)
    for n, text in enumerate(texts):
        (src / f"d{n}.md").write_text(f"# Doc {n}\n\n{text}\n")
    path = folder / "live.db"
    with words_only_base(path, src) as base:
        if vectors:
            base.configure(embedding=WORDS)
        base.index()
    return path


def add_document(live: Path, name: str, text: str) -> None:
    """A document more, indexed with the models the base's spec names (live_base)."""
    (live.parent / "src" / f"{name}.md").write_text(f"# {name}\n\n{text}\n")
    with Base(live) as base:
        base.index()


def fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def open_files(pid: int | str = "self") -> list[str]:
    """What each descriptor of a process names (a file renamed over reads 'PATH (deleted)')."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass  # closed meanwhile
    return found


def of(path: Path, files: Sequence[str]) -> tuple[int, int]:
    """Descriptors of the file at `path` now, and of files that were there before."""
    now = sum(1 for name in files if name == str(path))
    gone = sum(1 for name in files if name == f"{path} (deleted)")
    return now, gone


def wait_until(check, what: str, timeout: float = SWITCH_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        time.sleep(0.05)


def documents_of(answer) -> set[str]:
    return {result.citation.document for result in answer.results}


# -- a read-only Base ----------------------------------------------------------------------


def test_a_read_only_base_writes_nothing_and_refuses_every_write(tmp_path):
    live = live_base(tmp_path, "alpha words here", "beta words there")
    dest = tmp_path / "pub.db"
    publish(live, dest)
    for target in (dest, live):
        with Base(live):  # the live base's WAL folded into its file: its bytes say it all
            pass
        before = fingerprint(target)
        beside = sorted(p.name for p in tmp_path.iterdir())
        with Store(target, readonly=True) as store:
            counts_before = store.search_counts()
        with Base(target, read_only=True) as reader:
            counted = reader.status().searches_per_day
            for _ in range(3):
                assert documents_of(reader.search("alpha", mode="keyword")) == {"d0.md"}
                reader.search("beta words", mode="hybrid")  # the model is down: by words
            reader.facts()
            status = reader.status()
            assert status.read_only and status.searches_per_day == counted
            assert reader.copy is not None and reader.copy.immutable == (target == dest)
            for write in (
                lambda: reader.remember("a fact"),
                lambda: reader.index(),
                lambda: reader.add_source(tmp_path / "src"),
                lambda: reader.remove_source("src"),
                lambda: reader.configure(fusion="rrf"),
            ):
                with pytest.raises(BaseReadOnly) as refused:
                    write()
                assert "served read-only" in refused.value.message
        assert fingerprint(target) == before  # not a byte, not its time
        with Store(target, readonly=True) as store:
            assert store.search_counts() == counts_before  # no search counted
        made = sorted({p.name for p in tmp_path.iterdir()} - set(beside))
        if target == dest:  # immutable: no -wal, -shm, -journal or .lock ever made
            assert made == []
        else:  # a live base in WAL mode: SQLite's own -wal (empty) and -shm (docs/deploy.md)
            assert made == ["live.db-shm", "live.db-wal"]
            assert Path(f"{live}-wal").stat().st_size == 0
        assert not Path(f"{target}.lock").exists() or target == live
    with pytest.raises(InvalidRequest):
        Base(tmp_path / "new.db", create=True, read_only=True)
    assert not (tmp_path / "new.db").exists()


def test_only_a_published_copy_nothing_may_write_is_opened_immutable(tmp_path):
    live = live_base(tmp_path, "alpha words here")
    dest = tmp_path / "pub.db"
    publish(live, dest)

    def immutable(path: Path) -> bool:
        with Base(path, read_only=True) as reader:
            assert reader.copy is not None
            return reader.copy.immutable

    assert immutable(dest)
    os.chmod(dest, 0o644)  # made writable again: something may write it
    assert not immutable(dest)
    os.chmod(dest, 0o444)
    Path(f"{dest}-journal").write_bytes(b"")  # a writer's journal beside it
    assert not immutable(dest)
    Path(f"{dest}-journal").unlink()
    assert immutable(dest)
    assert not immutable(live)  # a live base in WAL mode: its indexer writes it


def test_a_reader_of_a_live_base_sees_what_another_process_commits(tmp_path):
    live = live_base(tmp_path, "alpha words here")
    with Base(live, read_only=True) as reader:
        assert not documents_of(reader.search("omega", mode="keyword"))
        (tmp_path / "src" / "later.md").write_text("# Later\n\nomega arrives later\n")
        indexed = subprocess.run(
            [sys.executable, "-m", "metis_lite", "index", str(live)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert indexed.returncode in (0, 3), indexed.stderr  # 3: by words only
        assert documents_of(reader.search("omega", mode="keyword")) == {"later.md"}
        assert reader.status().documents == 2


# -- a read-only service, in this process ---------------------------------------------------


class GatedEmbedder(WordsEmbedder):
    """The words-hash model, which holds each question until `release` is set."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.entered.set()
        assert self.release.wait(60), "the test never released the question"
        return super().embed(texts)


def served_publication(service: Service):
    copy = service.bases["pub"].copy
    return copy.publication if copy is not None else None


def reader_service(dest: Path, logs: list[str]) -> Service:
    service = Service(
        open_bases([f"pub={dest}"], read_only=True), poll_s=0, read_only=True, log=logs.append
    )
    service.start()
    return service


def test_a_new_copy_is_served_between_requests_and_the_old_closed_after_its_last_search(
    tmp_path,
):
    live = live_base(tmp_path, "alpha words here", "beta words there", vectors=True)
    dest = tmp_path / "pub.db"
    first = publish(live, dest)
    logs: list[str] = []
    service = reader_service(dest, logs)
    try:
        old = service.bases["pub"]
        gate = GatedEmbedder()
        held: dict[str, object] = {}

        def slow_search() -> None:
            try:
                with service.request():
                    held["answer"] = service.search("pub", SearchRequest("alpha words"))
            except BaseException as exc:  # reported by the test, not lost in the thread
                held["error"] = exc

        in_flight = threading.Thread(target=slow_search)
        with registry.registered(serving(gate)):  # the model the old copy makes: the gate
            in_flight.start()
            assert gate.entered.wait(30), "the search never asked the model"

        add_document(live, "later", "omega arrives later")
        second = publish(live, dest)
        wait_until(lambda: service.bases["pub"] is not old, "the switch")
        new = service.bases["pub"]
        assert new.copy is not None and new.copy.publication == second.publication
        assert new.embedder() is gate  # the model was handed over, not made again
        with service.request():  # a new request: the new copy, while the old one is held
            answer = service.search("pub", SearchRequest("omega", mode="keyword"))
        assert documents_of(answer) == {"later.md"}
        assert of(dest, open_files()) == (17, 17)  # both copies open: 16 + the words index's

        gate.release.set()
        in_flight.join(timeout=60)
        assert "error" not in held, held.get("error")
        finished = held["answer"]
        assert documents_of(finished) <= {"d0.md", "d1.md"} and finished.results  # the old copy
        assert not finished.warnings
        wait_until(lambda: of(dest, open_files()) == (17, 0), "the old copy's closing", 10)
        health = service.health(["pub"])[0]
        assert health.open and health.copy is not None
        assert health.copy.publication == second.publication != first.publication
        assert any("serving pub: a new copy" in line for line in logs)
    finally:
        service.close()
    assert of(dest, open_files()) == (0, 0)


def test_an_mcp_search_past_its_answer_deadline_holds_its_copy_until_it_ends(tmp_path):
    """/mcp answers 503 once its deadline passes, and the request's own hold ends then; the
    tool call's thread still searches the old copy, which must stay open until it is done."""
    from metis_lite.agents.mcp_server import McpHttp
    from metis_lite.service.follow import WATCH_S

    live = live_base(tmp_path, "alpha words here", "beta words there", vectors=True)
    dest = tmp_path / "pub.db"
    publish(live, dest)
    service = reader_service(dest, [])
    gate = GatedEmbedder()
    bridge = McpHttp(service.bases, answer_s=0.5, hold=service.request)
    try:
        old = service.bases["pub"]
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        call = {"name": "search", "arguments": {"question": "alpha words"}, "_meta": meta}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
        headers = [
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
        ]
        with registry.registered(serving(gate)):  # the model the old copy makes: the gate
            with service.request():  # as the service's routes hold every request
                status, _, answered = bridge.handle(
                    "POST", headers, body.encode(), allowed_bases=None
                )
            assert status == 503, answered  # no answer in time: the search waits on its model
            assert gate.entered.wait(30), "the search never asked the model"

        add_document(live, "later", "omega arrives later")
        publish(live, dest)
        wait_until(lambda: service.bases["pub"] is not old, "the switch")
        time.sleep(4 * WATCH_S)  # the watcher looked again, and would have closed a free copy
        assert of(dest, open_files()) == (17, 17)  # the old copy is open under the search
        gate.release.set()
        wait_until(lambda: of(dest, open_files()) == (17, 0), "the old copy's closing", 10)
    finally:
        gate.release.set()
        bridge.close()
        service.close()
    assert of(dest, open_files()) == (0, 0)


def test_searches_on_many_threads_never_fail_while_copies_are_published(tmp_path):
    live = live_base(tmp_path, "alpha words here", "beta words there")
    dest = tmp_path / "pub.db"
    publish(live, dest)
    service = reader_service(dest, [])
    failures: list[BaseException] = []
    answered = [0]
    stop_event = threading.Event()

    def client(question: str) -> None:
        while not stop_event.is_set():
            try:
                with service.request():
                    answer = service.search("pub", SearchRequest(question, mode="keyword"))
                    status = service.status("pub")
                assert answer.results and status.read_only
                answered[0] += 1
            except BaseException as exc:  # reported by the test, not lost in the thread
                failures.append(exc)
                return

    clients = [
        threading.Thread(target=client, args=(q,)) for q in ("alpha", "words", "beta", "here")
    ]
    try:
        for thread in clients:
            thread.start()
        for n in range(4):
            add_document(live, f"new{n}", f"marker{n} words")
            wanted = publish(live, dest).publication
            wait_until(lambda wanted=wanted: served_publication(service) == wanted, f"copy {n}")
    finally:
        stop_event.set()
        for thread in clients:
            thread.join(timeout=60)
    try:
        assert not failures, failures[:3]
        assert answered[0] > 0
        with service.request():
            found = service.search("pub", SearchRequest("marker3", mode="keyword"))
        assert documents_of(found) == {"new3.md"}
        wait_until(lambda: of(dest, open_files()) == (17, 0), "closing the old copies", 10)
    finally:
        service.close()


def test_a_link_turned_to_another_copy_switches_the_reader(tmp_path):
    live = live_base(tmp_path, "alpha words here")
    publish(live, tmp_path / "v1.db")
    add_document(live, "later", "omega arrives later")
    second = publish(live, tmp_path / "v2.db")
    link = tmp_path / "pub.db"
    link.symlink_to("v1.db")
    service = Service(
        open_bases([f"pub={link}"], read_only=True), poll_s=0, read_only=True, log=[].append
    )
    service.start()
    try:
        (tmp_path / "next").symlink_to("v2.db")
        os.replace(tmp_path / "next", link)  # the link turned, in one rename
        wait_until(lambda: served_publication(service) == second.publication, "the switch")
        with service.request():
            found = service.search("pub", SearchRequest("omega", mode="keyword"))
        assert documents_of(found) == {"later.md"}
        v1 = str(tmp_path / "v1.db")
        wait_until(lambda: v1 not in open_files(), "closing the first copy", 10)
    finally:
        service.close()


# -- a read-only service, as a process ------------------------------------------------------


def served_id(url: str) -> str | None:
    """The published_id of the copy the service's one base serves, as /v1/health says."""
    return http.get(f"{url}/v1/health").json()["bases"][0]["copy"]["published_id"]


def test_a_read_only_service_refuses_writes_with_their_code_and_says_which_copy_it_serves(
    tmp_path,
):
    live = live_base(tmp_path, "alpha words here")
    dest = tmp_path / "pub.db"
    done = publish(live, dest)
    before = fingerprint(dest)
    tokens = {"tokens": [{"token": TOKEN, "bases": ["pub"]}]}
    service = serve(
        tmp_path, f"pub={dest}", "--read-only", env={"METIS_TOKENS": json.dumps(tokens)}
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    url = service.url
    try:
        writes = {
            "fact": http.post(f"{url}/v1/bases/pub/facts", json={"text": "x"}, headers=auth),
            "index": http.post(f"{url}/v1/bases/pub/index", json={}, headers=auth),
            "remove": http.delete(f"{url}/v1/bases/pub/sources/src", headers=auth),
        }
        reads = {
            "search": http.post(
                f"{url}/v1/bases/pub/search", json={"question": "alpha"}, headers=auth
            ),
            "facts": http.get(f"{url}/v1/bases/pub/facts", headers=auth),
            "bases": http.get(f"{url}/v1/bases", headers=auth),
        }
        bare = http.get(f"{url}/v1/health")
        wait_until(
            lambda: http.get(f"{url}/v1/health", headers=auth).json()["bases"][0]["warm"],
            "the base read into memory",
        )
        told = http.get(f"{url}/v1/health", headers=auth)
        wrong = http.get(f"{url}/v1/health", headers={"Authorization": "Bearer nope"})
    finally:
        stop(service)
    for name, response in writes.items():
        assert response.status_code == 409, (name, response.text)
        assert response.json()["error"]["code"] == "BASE_READ_ONLY"
    assert all(r.status_code == 200 for r in reads.values()), {k: r.text for k, r in reads.items()}
    assert reads["search"].json()["results"]
    listed = reads["bases"].json()["bases"][0]
    assert listed["read_only"] is True
    assert listed["published"] == {"id": done.publication.id, "at": done.publication.at}
    assert bare.status_code == 200
    assert bare.json() == {
        "status": "ok",
        "version": bare.json()["version"],
        "read_only": True,
        "open": 1,
        "unavailable": 0,
    }  # without a token: no names, no paths
    assert told.status_code == 200
    [seen] = told.json()["bases"]
    copy = seen["copy"]
    assert seen["open"] is True and seen["warm"] is True and copy["path"] == str(dest)
    assert (copy["inode"], copy["bytes"]) == (dest.stat().st_ino, dest.stat().st_size)
    assert copy["immutable"] is True and copy["last_run"] == 1
    assert copy["published_id"] == done.publication.id
    assert wrong.status_code == 401
    assert fingerprint(dest) == before
    assert "Traceback" not in service.output()


def test_read_only_and_poll_together_are_refused():
    done = subprocess.run(
        [sys.executable, "-m", "metis_lite", "serve", "x.db", "--read-only", "--poll", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "INVALID_REQUEST" in done.stderr and "--poll" in done.stderr


def test_a_file_that_cannot_be_served_never_replaces_the_copy_served(tmp_path):
    live = live_base(tmp_path, "alpha words here")
    dest = tmp_path / "pub.db"
    publish(live, dest)
    broken = tmp_path / "pub.db.new"
    broken.write_text("not a base at all\n")
    service = serve(tmp_path, f"pub={dest}", "--read-only", "--no-access-log")
    url = service.url

    def search(question: str) -> httpx.Response:
        return http.post(
            f"{url}/v1/bases/pub/search", json={"question": question, "mode": "keyword"}
        )

    try:
        os.replace(broken, dest)  # a careless publisher: a file that is no base
        wait_until(
            lambda: "replacement" in http.get(f"{url}/v1/health").json()["bases"][0], "the refusal"
        )
        health = http.get(f"{url}/v1/health").json()
        kept = search("alpha")
        add_document(live, "later", "omega arrives later")
        publish_again = subprocess.run(
            [sys.executable, "-m", "metis_lite", "publish", str(live), str(dest)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert publish_again.returncode == 2  # what is there is not a published copy
        dest.unlink()
        publish(live, dest)
        wait_until(lambda: "later.md" in search("omega").text, "the good copy")
        healed = http.get(f"{url}/v1/health").json()
    finally:
        stop(service)
    assert health["status"] == "degraded" and health["bases"][0]["open"] is True
    assert health["bases"][0]["replacement"]["code"] == "NOT_A_BASE"
    assert kept.status_code == 200 and "d0.md" in kept.text
    assert "replacement" not in healed["bases"][0]
    log = service.output()
    assert "the new file at" in log and "is not served (NOT_A_BASE" in log
    assert "Traceback" not in log


def test_a_base_refused_at_start_is_served_once_a_good_copy_is_published(tmp_path):
    live = live_base(tmp_path, "alpha words here")
    good = tmp_path / "good.db"
    publish(live, good)
    dest = tmp_path / "pub.db"
    dest.write_bytes(good.read_bytes()[:4096])  # a damaged file where the copy should be
    service = serve(tmp_path, f"good={good}", f"pub={dest}", "--read-only")
    url = service.url
    try:
        before = http.get(f"{url}/v1/health")
        dest.unlink()
        publish(live, dest)
        wait_until(lambda: http.get(f"{url}/v1/health").status_code == 200, "the copy's opening")
        after = http.get(f"{url}/v1/health").json()
        searched = http.post(f"{url}/v1/bases/pub/search", json={"question": "alpha"})
    finally:
        stop(service)
    assert before.status_code == 503  # a reader missing a base is out of rotation
    said = before.json()
    assert (said["status"], said["open"], said["unavailable"]) == ("degraded", 1, 1)
    assert said["bases"][1]["error"]["code"] in ("BASE_DAMAGED", "NOT_A_BASE")
    assert after["status"] == "ok" and after["open"] == 2
    assert searched.status_code == 200 and searched.json()["results"]


def test_a_service_answers_while_another_process_publishes_and_closes_each_old_copy(tmp_path):
    live = live_base(tmp_path, "alpha words here", "beta words there")
    dest = tmp_path / "pub.db"
    publish(live, dest)
    service = serve(tmp_path, f"pub={dest}", "--read-only", "--no-access-log")
    url = service.url
    statuses: list[int] = []
    lock = threading.Lock()
    stop_event = threading.Event()

    def client(question: str) -> None:
        with httpx.Client(timeout=60) as own:
            while not stop_event.is_set():
                try:
                    response = own.post(
                        f"{url}/v1/bases/pub/search", json={"question": question, "mode": "keyword"}
                    )
                    code = response.status_code
                except httpx.HTTPError:
                    code = -1
                with lock:
                    statuses.append(code)

    clients = [threading.Thread(target=client, args=(q,)) for q in ("alpha", "words", "beta")]
    try:
        for thread in clients:
            thread.start()
        for n in range(3):
            add_document(live, f"new{n}", f"marker{n} words")
            published = subprocess.run(  # the publisher: a second process
                [sys.executable, "-m", "metis_lite", "publish", str(live), str(dest), "--json"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert published.returncode == 0, published.stderr
            wanted = json.loads(published.stdout)["published_id"]
            wait_until(lambda wanted=wanted: served_id(url) == wanted, f"copy {n}")
        stop_event.set()
        for thread in clients:
            thread.join(timeout=60)
        newest = http.post(f"{url}/v1/bases/pub/search", json={"question": "marker2"})
        wait_until(
            lambda: of(dest, open_files(service.process.pid)) == (17, 0),
            "closing the old copies",
            10,
        )
    finally:
        stop_event.set()
        stop(service)
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
    assert [r["citation"]["document"] for r in newest.json()["results"]] == ["new2.md"]
    assert "Traceback" not in service.output()


# -- a reader switches only to a published copy --------------------------------------------


def passages_base(path: Path, *texts: str) -> Path:
    """An ordinary base (WAL mode, unpublished) of one passage per text, without an indexer."""
    (path.parent / f"{path.stem}-src").mkdir()
    with words_only_base(path, path.parent / f"{path.stem}-src") as base:
        add_passages(base.store, list(texts))
    return path


def beside(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f"{path.name}-"))


def test_a_reader_switches_only_to_a_published_copy_and_publish_recovers_the_place(tmp_path):
    live = passages_base(tmp_path / "live.db", "alpha words here")
    dest = tmp_path / "pub.db"
    first = publish(live, dest)
    service = serve(tmp_path, f"pub={dest}", "--read-only", "--no-access-log")
    url = service.url

    def search(question: str) -> httpx.Response:
        return http.post(
            f"{url}/v1/bases/pub/search", json={"question": question, "mode": "keyword"}
        )

    def health() -> httpx.Response:
        return http.get(f"{url}/v1/health")

    try:
        ordinary = passages_base(tmp_path / "ordinary.db", "omega of an ordinary base")
        os.replace(ordinary, dest)  # moved over the published copy: never published
        wait_until(lambda: "replacement" in health().json()["bases"][0], "the refusal")
        refused, kept = health(), search("alpha")
        beside_refused = beside(dest)
        dest.unlink()  # and then deleted
        wait_until(
            lambda: health().json()["bases"][0]["replacement"]["code"] == "BASE_NOT_FOUND", "gone"
        )
        gone, kept_gone = health(), search("alpha")
        second = publish(live, dest)  # the place is published to again, and served
        wait_until(lambda: served_id(url) == second.publication.id, "the new copy")
        healed = health()
    finally:
        stop(service)
    said = refused.json()
    assert refused.status_code == 200 and said["status"] == "degraded"
    [base] = said["bases"]
    assert base["open"] is True and base["copy"]["published_id"] == first.publication.id
    assert base["copy"]["immutable"] is True
    assert base["replacement"]["code"] == "STORE_ERROR"
    assert "not published" in base["replacement"]["message"]
    assert beside_refused == []  # nothing made beside the ordinary base: no -wal, no -shm
    assert kept.status_code == 200 and "p0.txt" in kept.text and "omega" not in kept.text
    assert gone.status_code == 200 and gone.json()["status"] == "degraded"
    assert kept_gone.status_code == 200 and "p0.txt" in kept_gone.text
    assert healed.json()["status"] == "ok" and "replacement" not in healed.json()["bases"][0]
    assert healed.json()["bases"][0]["copy"]["immutable"] is True
    assert beside(dest) == []
    log = service.output()
    assert "is not served (STORE_ERROR" in log and "Traceback" not in log
