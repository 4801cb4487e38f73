"""kill -9 at many precise points of a real indexing run leaves a consistent base that the next
run completes to exactly what an uninterrupted run gives.

Each case runs `metis-lite index` in a subprocess through tests/crash_runner.py, which sends the
process SIGKILL at the Nth arrival at one point: while parsing, inside a document's transaction
(between its chunk inserts, after the old version was deleted), while embedding, while vectors
are written, in the middle of a commit's WAL frames, during a checkpoint. The embedding model is
the real one, served over TEI by `python -m metis_lite.models.server` on loopback, so vectors are
real (a relay in front of it remembers each text's vector, so each text is embedded once).
After each kill the base must pass `check_consistent`; then an ordinary run must finish it and
give the same documents, chunk texts and vectors as an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import select
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import EXAMPLES, ROOT

from metis_lite import ingest, parsing
from metis_lite.base import Base
from metis_lite.chunking import chunk
from metis_lite.models import registry
from metis_lite.store import Store
from metis_lite.tokenizer import fts_query, tokens

MODEL = "all-MiniLM-L6-v2"
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

DIMENSION = 384
RUNNER = Path(__file__).resolve().parent / "crash_runner.py"
RUN_TIMEOUT_S = 120
SAME_VECTOR = 0.999
"""Cosine above which a re-made vector is the same (batches differ after a crash)."""


# -- the model server, the corpus and the reference runs ------------------------------------


@pytest.fixture(scope="module")
def model_url() -> str:
    """The embedded model served over TEI by the real server process, once for this module,
    behind a relay that remembers each text's vector: every text is embedded by the model once,
    however many runs ask for it (the runs here ask for the same texts again and again)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "metis_lite.models.server", "--port", "0"],
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
    expected = expected_chunks(fresh)

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
    expected.update(expected_chunks(changing))
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


def expected_chunks(folder: Path) -> dict[tuple[str, str], list[str]]:
    """(path, sha256) → the chunk texts a fresh parse and chunking of that file gives."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and parsing.kind_of(path):
            data = path.read_bytes()
            document = parsing.parse(path, data=data)
            texts = [c.text for c in chunk(document, chunk_size=CHUNK_SIZE)]
            out[(path.relative_to(folder).as_posix(), hashlib.sha256(data).hexdigest())] = texts
    return out


def content(base_file: Path) -> dict:
    """What a base holds: documents with their hashes, chunk texts in order, and vectors."""
    with Store(base_file) as store:
        documents = dict(store.db.execute("SELECT path, content_hash FROM documents"))
        texts: dict[str, list[str]] = {}
        for path, text in store.db.execute(
            "SELECT d.path, c.text FROM chunks c JOIN documents d ON d.id = c.document_id"
            " ORDER BY d.path, c.ordinal"
        ):
            texts.setdefault(path, []).append(text)
        vectors = {
            (path, ordinal): np.frombuffer(blob, dtype="<f4")
            for path, ordinal, blob in store.db.execute(
                "SELECT d.path, c.ordinal, v.embedding FROM vectors v"
                " JOIN chunks c ON c.id = v.chunk_id JOIN documents d ON d.id = c.document_id"
            )
        }
    return {"documents": documents, "texts": texts, "vectors": vectors}


# -- what must hold after any kill ----------------------------------------------------------


def check_consistent(base_file: Path, expected: dict[tuple[str, str], list[str]]) -> None:
    """The base file is whole, its FTS index matches its chunks word for word, each chunk has
    at most one vector and only of the base's model, and no document is half-indexed."""
    with Store(base_file) as store:
        db = store.db
        assert [r[0] for r in db.execute("PRAGMA integrity_check")] == ["ok"]
        db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        assert not list(db.execute("PRAGMA foreign_key_check"))

        chunks = list(
            db.execute("SELECT id, text, title, headings, document_id, ordinal FROM chunks")
        )
        # Every chunk has its FTS row (found by a word of its own, at its rowid) ...
        for chunk_id, text, title, _, _, _ in chunks:
            words = tokens(text) or tokens(title)
            assert words, f"chunk {chunk_id} has no word"
            found = db.execute(
                "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid = ?",
                (fts_query(words[0]), chunk_id),
            ).fetchone()[0]
            assert found == 1, f"chunk {chunk_id} has no FTS row"
        # ... holding exactly its words, and the index holds no row of a chunk that is gone.
        db.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, chunks_fts, instance)")
        indexed: dict[tuple[int, str], Counter] = {}
        for term, doc, column in db.execute("SELECT term, doc, col FROM temp.words"):
            indexed.setdefault((doc, column), Counter())[term] += 1
        assert {doc for doc, _ in indexed} == {c[0] for c in chunks}
        for chunk_id, text, title, headings, _, _ in chunks:
            context = " ".join((title, *json.loads(headings)))
            assert indexed.get((chunk_id, "text"), Counter()) == Counter(tokens(text))
            assert indexed.get((chunk_id, "context"), Counter()) == Counter(tokens(context))

        model_label = registry.model_label(store.spec()["embedding"])
        assert not list(
            db.execute("SELECT chunk_id FROM vectors GROUP BY chunk_id HAVING count(*) > 1")
        )
        assert {r[0] for r in db.execute("SELECT DISTINCT model FROM vectors")} <= {model_label}
        for (blob,) in db.execute("SELECT embedding FROM vectors"):
            vector = np.frombuffer(blob, dtype="<f4")
            assert vector.shape == (DIMENSION,) and np.all(np.isfinite(vector))
            assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3

        # No document is half-indexed: its chunks are those of a fresh parse of its version.
        by_document: dict[int, list[tuple[int, str]]] = {}
        for _, text, _, _, document_id, ordinal in chunks:
            by_document.setdefault(document_id, []).append((ordinal, text))
        for document_id, path, digest in db.execute("SELECT id, path, content_hash FROM documents"):
            stored = [text for _, text in sorted(by_document.get(document_id, []))]
            assert stored == expected[(path, digest)], f"{path} is half-indexed"
        assert set(by_document) <= {r[0] for r in db.execute("SELECT id FROM documents")}


def assert_same_content(got: dict, want: dict) -> None:
    assert got["documents"] == want["documents"]
    assert got["texts"] == want["texts"]
    assert set(got["vectors"]) == set(want["vectors"])
    for key, vector in want["vectors"].items():
        assert float(got["vectors"][key] @ vector) > SAME_VECTOR, key


# -- the kill points ------------------------------------------------------------------------

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
    ("fresh", "sql", 1, r"^UPDATE runs", ()),
    ("fresh", "wal-write", 10, None, ()),
    ("fresh", "wal-write", 60, None, ()),
    ("fresh", "db-write", 3, None, ("--autocheckpoint", "8")),
    ("changing", "sql", 1, r"^DELETE FROM documents", ()),
    ("changing", "sql", 4, r"^INSERT INTO chunks_fts", ()),
    ("changing", "sql", 3, r"^DELETE FROM chunks_fts", ()),
    ("changing", "embed", 1, None, ()),
]


@pytest.mark.parametrize(
    ("corpus", "point", "at", "pattern", "options"),
    CASES,
    ids=[
        f"{c}-{p}-{n}" + (f"-{s.split()[-1].strip('(^')}" if s else "") for c, p, n, s, _ in CASES
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
