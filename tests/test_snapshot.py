"""One snapshot per search: whatever indexing does meanwhile, a search cites, reranks and counts
only what one snapshot of the base holds, and never fails on a chunk gone between its steps.

The models are tests/word_models.py's (always answer, fast, in any process), so searches rank
by meaning, by words and rerank at full speed while index runs add and remove documents.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from conftest import ROOT, words_only_base
from serving import serve, stop
from test_faults import FaultyModel
from test_sqlite_clients import needs_shell, shell
from word_models import WordsEmbedder, attach, serving

from metis_lite.base.core import Base
from metis_lite.models import registry
from metis_lite.store import Store

CHURN_S = 4.0
"""How long index runs add and remove documents while searches run beside them."""

SERVED_CHURN_S = 6.0
"""The same through a real `serve`: how long its index passes run beside searches over HTTP."""

SEARCHER = Path(__file__).resolve().parent / "snapshot_searcher.py"


def text_of(n: int) -> str:
    return f"churn topic word{n % 40} and passage {n} of its own."


def write_document(src: Path, n: int) -> None:
    (src / f"d{n:04}.md").write_text(text_of(n) + "\n")


class Churn:
    """Index runs that each add three documents and remove the three oldest, recording when
    each document's addition and removal may have been committed (time.monotonic). `index`
    runs one (a Base's, or a service's asked over HTTP) and returns (added, removed), or None
    where it cannot tell."""

    def __init__(
        self,
        index: Callable[[], tuple[int, int] | None],
        src: Path,
        first: int,
        *,
        empty: bool = False,
    ) -> None:
        self.index, self.src, self.empty = index, src, empty  # empty: gone by emptying the file
        self.present = list(range(first))
        self.added: dict[str, float] = {f"d{n:04}.md": -math.inf for n in range(first)}
        self.removed: dict[str, float] = {}
        self.runs = 0
        self.next = first

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            new = list(range(self.next, self.next + 3))
            self.next += 3
            gone, self.present = self.present[:3], self.present[3:] + new
            for n in new:
                write_document(self.src, n)
            for n in gone:
                if self.empty:  # the file stays, holding nothing: its document must go
                    (self.src / f"d{n:04}.md").write_text("")
                else:
                    (self.src / f"d{n:04}.md").unlink()
            started = time.monotonic()
            for n in new:
                self.added[f"d{n:04}.md"] = started
            counts = self.index()
            ended = time.monotonic()
            assert counts in (None, (3, 3)), counts
            for n in gone:
                self.removed[f"d{n:04}.md"] = ended
            self.runs += 1

    def ghosts(self, started: float, ended: float, found: list[tuple[str, str]]) -> list[str]:
        """Results of a search that ran from `started` to `ended` that no snapshot taken
        meanwhile could hold: a document added after it ended, removed before it began, or a
        text its document never had."""
        bad = []
        for document, text in found:
            n = int(document[1:5])
            if text != text_of(n):
                bad.append(f"{document}: {text!r}")
            elif self.added.get(document, math.inf) > ended:
                bad.append(f"{document}: added after the search")
            elif self.removed.get(document, math.inf) < started:
                bad.append(f"{document}: removed before the search")
        return bad


def beside_a_churn(
    churn: Churn, seconds: float, searching: Callable[[int, threading.Event], None], args: list[str]
) -> dict:
    """churn.run(seconds) while three threads run searching(offset, stop) until it ends and a
    second process searches the base (snapshot_searcher.py ARGS…): that process's report, with
    the ghosts its searches met under "ghosts"."""
    other = subprocess.Popen(
        [sys.executable, str(SEARCHER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    done = threading.Event()
    threads = [threading.Thread(target=searching, args=(k, done)) for k in range(3)]
    for thread in threads:
        thread.start()
    try:
        churn.run(seconds)
    finally:
        done.set()
        for thread in threads:
            thread.join()
        out, err = other.communicate(timeout=120)
    assert other.returncode == 0, err
    second = json.loads(out)
    second["ghosts"] = [
        ghost
        for started, ended, found in second["searches"]
        for ghost in churn.ghosts(started, ended, [tuple(f) for f in found])
    ]
    return second


def search_beside(base: Base, churn: Churn, n: int, errors: list[str], ghosts: list[str]) -> int:
    """The n-th search of a thread beside a churn, in its mode: its error, or the ghosts among
    its results (Churn.ghosts), recorded; 1 when it answered."""
    mode = ("hybrid", "dense", "keyword")[n % 3]
    started = time.monotonic()
    try:
        answer = base.search(f"churn topic word{n % 40}", mode=mode, top_k=10)
    except Exception as exc:  # noqa: BLE001 - the test fails on any
        errors.append(f"{mode}: {type(exc).__name__}: {exc}")
        return 0
    found = [(r.citation.document, r.text) for r in answer.results]
    ghosts.extend(churn.ghosts(started, time.monotonic(), found))
    assert len(found) <= 10
    return 1


def churned_base(tmp_path: Path, name: str, **options) -> tuple[Base, Churn]:
    """A base of 30 documents, indexed, and the Churn of its index runs (Churn's `options`)."""
    src = tmp_path / "src"
    src.mkdir()
    for n in range(30):
        write_document(src, n)
    base = attach(words_only_base(tmp_path / name, src))
    base.index()

    def index() -> tuple[int, int]:
        report = base.index()
        return report.added, report.removed

    return base, Churn(index, src, 30, **options)


def test_searches_beside_index_runs_that_add_and_remove_documents_see_one_snapshot(tmp_path):
    base, churn = churned_base(tmp_path, "churn.db")
    errors: list[str] = []
    ghosts: list[str] = []
    searches = 0

    def searching(offset: int, done: threading.Event) -> None:
        nonlocal searches
        n = offset
        while not done.is_set():
            searches += search_beside(base, churn, n, errors, ghosts)
            n += 1

    try:
        second = beside_a_churn(churn, CHURN_S, searching, [str(base.path), str(CHURN_S)])
    finally:
        base.close()
    ghosts.extend(second["ghosts"])
    assert errors == [] and second["errors"] == []
    assert ghosts == []
    assert churn.runs >= 2 and searches > 0 and second["searches"]


@needs_shell
def test_documents_whose_files_are_emptied_leave_whole_beside_threads_a_process_and_the_shell(
    tmp_path,
):
    """Index runs that empty three files each (their documents removed as holding nothing)
    and add three, while three threads and a second process search and the sqlite3 shell
    reads: no search meets an emptied document after its run, none a half-removed one, and
    the shell never sees a chunk without its document or its words."""
    base, churn = churned_base(tmp_path, "empty.db", empty=True)
    errors: list[str] = []
    ghosts: list[str] = []
    orphans: list[str] = []

    def searching(offset: int, done: threading.Event) -> None:
        n = offset
        while not done.is_set():
            if offset == 0:  # one of the threads runs the shell beside the others
                read = shell(
                    base.path,
                    "SELECT count(*) FROM chunks WHERE document_id NOT IN (SELECT id FROM"
                    " documents); SELECT count(*) FROM chunks_fts_docsize WHERE id NOT IN"
                    " (SELECT id FROM chunks);",
                )
                if read.returncode != 0 or read.stdout.split() != ["0", "0"]:
                    orphans.append(f"{read.returncode} {read.stdout!r} {read.stderr!r}")
                continue
            search_beside(base, churn, n, errors, ghosts)
            n += 1

    try:
        second = beside_a_churn(churn, CHURN_S, searching, [str(base.path), str(CHURN_S)])
        assert base.status().documents == 30  # the emptied ones gone, their files still there
    finally:
        base.close()
    ghosts.extend(second["ghosts"])
    assert errors == [] and second["errors"] == [] and orphans == []
    assert ghosts == []
    assert churn.runs >= 2 and second["searches"]


def test_searches_over_http_beside_the_services_index_passes_never_fail(tmp_path):
    """The same churn through a real `serve`: it indexes on request (POST /index, one pass
    after another) while three clients search it over HTTP in every mode, reranked, and a
    second process searches the base beside it; the models answer over HTTP (TEI). No answer
    is anything but 200, no result is a ghost, and the service logs no traceback."""
    src = tmp_path / "src"
    src.mkdir()
    for n in range(30):
        write_document(src, n)
    model = FaultyModel()
    base_file = tmp_path / "served.db"
    with Base(base_file, create=True) as base:
        base.configure(
            embedding={"provider": "tei", "url": model.url, "model": "bow", "timeout_s": 10},
            reranker={"provider": "tei", "url": model.url, "timeout_s": 10},
        )
        base.add_source(src)
        base.index()
    service = serve(tmp_path, f"served={base_file}", "--poll", "0", "--no-access-log")
    client = httpx.Client(base_url=service.url, timeout=60)

    def index() -> None:
        asked = client.post("/v1/bases/served/index")
        assert asked.status_code == 202, asked.text
        while client.get("/v1/bases").json()["bases"][0]["state"] != "Waiting":
            time.sleep(0.02)

    churn = Churn(index, src, 30)
    statuses: list[tuple[str, int, str]] = []
    ghosts: list[str] = []
    reranked = 0

    def searching(offset: int, done: threading.Event) -> None:
        nonlocal reranked
        with httpx.Client(base_url=service.url, timeout=60) as own:
            n = offset
            while not done.is_set():
                mode = ("hybrid", "dense", "keyword")[n % 3]
                started = time.monotonic()
                asked = {"question": f"churn topic word{n % 40}", "mode": mode, "top_k": 10}
                answer = own.post("/v1/bases/served/search", json=asked)
                n += 1
                if answer.status_code != 200:
                    statuses.append((mode, answer.status_code, answer.text[:300]))
                    continue
                body = answer.json()
                reranked += bool(body["reranked"])
                found = [(r["citation"]["document"], r["text"]) for r in body["results"]]
                ghosts.extend(churn.ghosts(started, time.monotonic(), found))

    try:
        second = beside_a_churn(
            churn, SERVED_CHURN_S, searching, [str(base_file), str(SERVED_CHURN_S), "spec"]
        )
    finally:
        client.close()
        stop(service)
        model.close()
    ghosts.extend(second["ghosts"])
    assert statuses == [] and second["errors"] == []
    assert ghosts == []
    assert churn.runs >= 2 and reranked > 0 and second["searches"]
    assert "Traceback" not in service.output()


def test_a_chunk_the_shared_vectors_hold_that_the_snapshot_lacks_is_never_reranked_or_cited(
    tmp_path,
):
    """Deterministic: while a search embeds its question (its snapshot already taken),
    another connection adds a document whose text is the question and removes one the
    snapshot holds, and another search brings the shared vectors up to date. The search ranks
    by the shared vectors, yet reranks and cites only its snapshot's chunks."""
    src = tmp_path / "src"
    src.mkdir()
    for n in range(6):
        write_document(src, n)
    base = attach(words_only_base(tmp_path / "b.db", src))
    question = "churn topic word5 newcomer"

    class Meanwhile(WordsEmbedder):
        armed = True

        def embed(self, texts):
            if self.armed and texts[0].endswith(question):
                self.armed = False
                (src / "newcomer.md").write_text(question + "\n")
                (src / "d0005.md").unlink()
                with attach(Base(base.path)) as writer:  # another process would do the same
                    report = writer.index()
                    assert (report.added, report.removed) == (1, 1)
                with Store(base.path) as newer:  # another search's sync, on a newer snapshot
                    base._vectors.sync(newer)
            return super().embed(texts)

    meanwhile = Meanwhile()
    with registry.registered(serving(meanwhile)):  # the model this run makes, the base keeps
        base.index()
    assert base.embedder() is meanwhile
    answer = base.search(question, mode="hybrid", top_k=5)
    documents = [r.citation.document for r in answer.results]
    assert "newcomer.md" not in documents  # added after the snapshot
    assert "d0005.md" in documents  # removed after it: the snapshot still holds it
    assert answer.reranked and all(r.scores.rerank is not None for r in answer.results)
    later = base.search(question, mode="hybrid", top_k=5)
    assert [r.citation.document for r in later.results][0] == "newcomer.md"
    assert "d0005.md" not in [r.citation.document for r in later.results]
    base.close()
