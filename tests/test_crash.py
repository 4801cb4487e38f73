"""kill -9 at many precise points of a real indexing run leaves a consistent base that the next
run completes to exactly what an uninterrupted run gives.

Each case runs `metis-lite index` in a subprocess through tests/crash_runner.py, which sends the
process SIGKILL at the Nth arrival at one point: while parsing, inside a document's transaction
(between its chunk inserts, after the old version was deleted), while embedding, while vectors
are written, in the middle of a commit's WAL frames, during a checkpoint; and at the pipeline's
own points, with the files parsed in the indexer or by worker processes: before a parsed file
is written (mid words pass, inside a transaction of several documents), once every file is
written and vectors still wait (between words and vectors), and while vectors are made
alongside the words. The embedding model is
the real one, served over TEI by `metis-lite models serve` on loopback, so vectors are
real (a relay in front of it remembers each text's vector, so each text is embedded once).
After each kill the base must pass `consistency.check_consistent`; then an ordinary run must finish it and
give the same documents, chunk texts and vectors as an uninterrupted run.
"""

from __future__ import annotations

import json
import select
import shutil
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES, ROOT
from consistency import assert_same_content, check_consistent, content, expected_chunks

from metis_lite.base.core import Base
from metis_lite.indexing import ingest

MODEL = "multilingual-e5-small"
"""What the model server serves by default (its vectors are labelled so here)."""
CHUNK_SIZE = 400
EMBED_BATCH = 8
"""Small chunks in small batches: the corpus gives ~30 chunks, four embedding batches."""

CORPUS = (
    "people/benefits.htm",
    "people/onboarding.docx",
    "ti/relatorio-de-incidentes.txt",
    "ti/configuração-do-proxy.md",
    "it/security-guide.pdf",
    "welcome.md",
)
"""Files of the example handbook, one of each kind (and a name with accents)."""

RUNNER = Path(__file__).resolve().parent / "crash_runner.py"
RUN_TIMEOUT_S = 120


# -- the model server, the corpus and the reference runs ------------------------------------


@pytest.fixture(scope="module")
def model_url() -> str:
    """The embedded model served over TEI by the real server process, once for this module,
    behind a relay that remembers each text's vector: every text is embedded by the model once,
    however many runs ask for it (the runs here ask for the same texts again and again)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "metis_lite", "models", "serve", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], 120)
        line = process.stdout.readline() if ready else ""
        assert " on http://" in line, f"the model server did not start: {line!r}"
        relay = Relay(line.rsplit(" on ", 1)[1].strip())
        try:
            yield relay.url
        finally:
            relay.close()
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stdout.close()


class Relay:
    """POST /embed on loopback: the vectors the model server made, each text asked once."""

    def __init__(self, upstream: str) -> None:
        vectors: dict[str, list[float]] = {}
        lock = threading.Lock()
        client = httpx.Client(timeout=120)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    missing = list(dict.fromkeys(t for t in body["inputs"] if t not in vectors))
                    if missing:
                        answer = client.post(upstream + "/embed", json={**body, "inputs": missing})
                        answer.raise_for_status()
                        vectors.update(zip(missing, answer.json(), strict=True))
                    data = json.dumps([vectors[t] for t in body["inputs"]]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._client = client
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()


@pytest.fixture(scope="module", autouse=True)
def small_batches():
    """This process embeds in batches of EMBED_BATCH too, as the killed runs do."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ingest, "EMBED_BATCH", EMBED_BATCH)
        yield


@pytest.fixture(scope="module")
def world(tmp_path_factory, model_url):
    """Two corpora (one indexed fresh, one changed after its first run), their expected chunks
    for every version of every file, and the bases an uninterrupted run gives."""
    root = tmp_path_factory.mktemp("crash")
    spec = {"provider": "tei", "url": model_url, "model": MODEL, "timeout_s": 60}
    fresh, changing = root / "fresh", root / "changing"
    for folder in (fresh, changing):
        for name in CORPUS:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(EXAMPLES / name, folder / name)
    expected = expected_chunks(fresh, CHUNK_SIZE)

    empty = root / "empty.db"
    with Base(empty, create=True) as base:
        base.configure(embedding=spec, chunk_size=CHUNK_SIZE)
        base.add_source(fresh, name="handbook")
    fresh_done = root / "fresh-done.db"
    shutil.copy(empty, fresh_done)
    with Base(fresh_done) as base:
        assert base.index().without_vector == 0

    before = root / "changing-v1.db"
    with Base(before, create=True) as base:
        base.configure(embedding=spec, chunk_size=CHUNK_SIZE)
        base.add_source(changing, name="handbook")
        assert base.index().without_vector == 0
    change(changing)
    expected.update(expected_chunks(changing, CHUNK_SIZE))
    changed_done = root / "changing-v2.db"
    shutil.copy(before, changed_done)
    with Base(changed_done) as base:
        report = base.index()
        assert (report.added, report.updated, report.removed) == (1, 2, 1)
        assert report.without_vector == 0
    return {
        "root": root,
        "expected": expected,
        "fresh": (empty, content(fresh_done)),
        "changing": (before, content(changed_done)),
    }


def change(folder: Path) -> None:
    """A second version of the corpus: two files changed, one removed, one added."""
    welcome = folder / "welcome.md"
    welcome.write_text(
        welcome.read_text(encoding="utf-8")
        + "\n## Sabbatical\n\n"
        + "A sabbatical of three months is granted after seven years. " * 8,
        encoding="utf-8",
    )
    proxy = folder / "ti" / "configuração-do-proxy.md"
    proxy.write_text(proxy.read_text(encoding="utf-8")[:1200], encoding="utf-8")
    (folder / "ti" / "relatorio-de-incidentes.txt").unlink()
    (folder / "new.md").write_text(
        "# New\n\n" + "Parking permits are issued by facilities. " * 15, encoding="utf-8"
    )


# -- the kill points ------------------------------------------------------------------------

POOL = ("--pool-always",)
"""Runner options that make the six files parse in worker processes (the run's words computed
there, documents written in groups), as a larger folder would."""

CASES = [
    # corpus, point, Nth arrival, SQL pattern, runner options
    ("fresh", "parse", 1, None, ()),
    ("fresh", "parse", 4, None, ()),
    ("fresh", "chunk", 3, None, ()),
    ("fresh", "sql", 2, r"^INSERT INTO documents", ()),
    ("fresh", "sql", 3, r"^INSERT INTO chunks_fts", ()),
    ("fresh", "sql", 20, r"^INSERT INTO chunks \(", ()),
    ("fresh", "embed", 1, None, ()),
    ("fresh", "embed", 3, None, ()),
    ("fresh", "embedded", 2, None, ()),
    ("fresh", "sql", 13, r"^INSERT INTO vectors", ()),
    ("fresh", "put_vectors", 4, None, ()),
    ("fresh", "sql", 1, r"^UPDATE runs SET finished_at", ()),
    ("fresh", "sql", 2, r"^UPDATE runs SET added", ()),  # a run's counts, with its documents
    ("fresh", "wal-write", 10, None, ()),
    ("fresh", "wal-write", 60, None, ()),
    ("fresh", "db-write", 3, None, ("--autocheckpoint", "8")),
    ("changing", "sql", 1, r"^DELETE FROM documents", ()),
    ("changing", "sql", 4, r"^INSERT INTO chunks_fts", ()),
    ("changing", "sql", 3, r"^DELETE FROM chunks_fts", ()),
    ("changing", "embed", 1, None, ()),
    # the pipeline: words first (mid words pass, parsed here or by workers), then the vectors
    # still waiting (between words and vectors), vectors alongside (mid vectors, with workers)
    ("fresh", "parsed", 5, None, ()),
    ("fresh", "parsed", 2, None, POOL),
    ("fresh", "sql", 4, r"^INSERT INTO chunks_fts", POOL),
    ("fresh", "words-done", 1, None, ()),
    ("fresh", "words-done", 1, None, POOL),
    ("fresh", "put_vectors", 2, None, POOL),
    ("fresh", "embedded", 1, None, POOL),
    ("changing", "parsed", 2, None, POOL),
    ("changing", "words-done", 1, None, POOL),
]


@pytest.mark.parametrize(
    ("corpus", "point", "at", "pattern", "options"),
    CASES,
    ids=[
        f"{c}-{p}-{n}"
        + (f"-{s.split()[-1].strip('(^')}" if s else "")
        + ("-workers" if o == POOL else "")
        for c, p, n, s, o in CASES
    ],
)
def test_kill_9_leaves_a_consistent_base_that_the_next_run_completes(
    world, tmp_path, corpus, point, at, pattern, options
):
    start, reference = world[corpus]
    base_file = tmp_path / "base.db"
    shutil.copy(start, base_file)
    command = [sys.executable, str(RUNNER), "--kill", point, "--at", str(at), *options]
    command += ["--embed-batch", str(EMBED_BATCH)]
    if pattern:
        command += ["--pattern", pattern]
    killed = subprocess.run(
        [*command, "--", "index", str(base_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert killed.returncode == -signal.SIGKILL, (
        f"the run was not killed at {point} #{at} (exit {killed.returncode}): {killed.stderr}"
    )
    check_consistent(base_file, world["expected"])

    with Base(base_file) as base:
        report = base.index()
        assert report.without_vector == 0, report.warnings
        assert base.status().last_indexing["state"] == "done"
    check_consistent(base_file, world["expected"])
    assert_same_content(content(base_file), reference)
