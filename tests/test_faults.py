"""Model faults, while indexing and while searching: nothing is lost, and a search says what it
could not do.

One model server on loopback (stdlib http.server) speaks TEI's POST /embed and POST /rerank and
can be told, at any moment, to misbehave in each way a real one does: stall past the deadline,
answer 500 or 429, reset the connection, answer vectors of the wrong dimension, NaN, fewer
vectors (or scores) than texts, or text that is not JSON. While indexing, every document is
still stored and searchable by words, the chunks without a vector wait for it, and the next
run that reaches a healthy model fills exactly those. While searching, the warnings of
docs/how-search-works.md: by words only when the embedding model fails, the fused order when the reranker does, and
`mode: dense` refused (EMBEDDING_MODEL_UNAVAILABLE).
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from metis_lite.base.core import Base
from metis_lite.errors import EmbeddingModelUnavailable
from metis_lite.indexing import ingest
from metis_lite.text.tokenizer import tokens

DIMENSION = 32
STALL_S = 3.0
"""A stalled answer comes this late: past the 1 s deadline the tests give their models."""

FAULTS = ("stall", "500", "429", "reset", "wrong-dimension", "nan", "fewer", "invalid-json")
EMBEDDING_FAULTS = FAULTS
RERANK_FAULTS = tuple(f for f in FAULTS if f != "wrong-dimension")

UNAVAILABLE = {"stall", "500", "429", "reset"}
"""Faults where no usable answer came (the rest are answers that cannot be used)."""


def vector_of(text: str) -> list[float]:
    """A deterministic bag-of-words vector: texts sharing words are close (cosine)."""
    vector = np.zeros(DIMENSION)
    for word in tokens(text):
        vector[
            int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % DIMENSION
        ] += 1
    vector[0] += 0.01  # never all zeros
    return (vector / np.linalg.norm(vector)).tolist()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that gave up on a stalled answer is what these tests do


class FaultyModel:
    """TEI embed + rerank on 127.0.0.1, healthy until told a fault (`fault`, from the
    `healthy_calls`-th call on); records how many texts each call carried."""

    def __init__(self) -> None:
        self.fault: str | None = None
        self.healthy_calls = 0
        self.calls = 0
        self.lock = threading.Lock()
        self.released = threading.Event()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with model.lock:
                    model.calls += 1
                    fault = model.fault if model.calls > model.healthy_calls else None
                texts = body.get("inputs") or body.get("texts")
                if self.path == "/embed":
                    answer = [vector_of(t) for t in texts]
                else:
                    query = set(tokens(body["query"]))
                    scores = [len(query & set(tokens(t))) / (1 + len(t) / 1000) for t in texts]
                    answer = sorted(
                        ({"index": i, "score": s} for i, s in enumerate(scores)),
                        key=lambda pair: -pair["score"],
                    )
                self.misbehave(fault, answer, body)

            def misbehave(self, fault, answer, body):
                if fault == "stall":
                    model.released.wait(STALL_S)
                elif fault in ("500", "429"):
                    headers = {"Retry-After": "30"} if fault == "429" else {}
                    return self.send(int(fault), b'{"error": "overloaded"}', headers)
                elif fault == "reset":
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.connection.close()
                    self.close_connection = True
                    return
                elif fault == "wrong-dimension" and self.path == "/embed":
                    answer = [row[: DIMENSION // 2] for row in answer]
                elif fault == "nan":
                    if self.path == "/embed":
                        answer[0][0] = float("nan")
                    else:
                        answer[0]["score"] = float("nan")
                elif fault == "fewer":
                    answer = answer[:-1]
                elif fault == "invalid-json":
                    return self.send(200, b'[{"index": 0, "score": 0.5}, oops')
                return self.send(200, json.dumps(answer).encode())  # NaN stays a literal NaN

            def send(self, status, data, headers=None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def misbehave(self, fault: str | None, *, after: int = 0) -> None:
        """From now on (after `after` more healthy calls), answer with `fault`."""
        with self.lock:
            self.fault = fault
            self.healthy_calls = self.calls + after

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def model():
    server = FaultyModel()
    yield server
    server.close()


@pytest.fixture
def small_batches(monkeypatch):
    """Four chunks per embedding batch, so a small folder gives several batches."""
    monkeypatch.setattr(ingest, "EMBED_BATCH", 4)


def folder(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    topics = ["vacation days", "travel expenses", "proxy settings", "gpu errors", "purchase orders"]
    for i, topic in enumerate(topics):
        paragraphs = [f"Paragraph {n} about {topic}, rule number {i}{n}." for n in range(4)]
        (src / f"doc{i}.md").write_text(f"# {topic.title()}\n\n" + "\n\n".join(paragraphs))
    return src


def make_base(path: Path, model: FaultyModel, src: Path, *, reranker: bool = False) -> Base:
    base = Base(path, create=True)
    base.configure(
        embedding={"provider": "tei", "url": model.url, "model": "fake-bow", "timeout_s": 1},
        chunk_size=100,
        reranker={"provider": "tei", "url": model.url, "timeout_s": 1} if reranker else None,
    )
    base.add_source(src)
    return base


def chunk_ids_without_vector(base: Base) -> set[int]:
    return {
        r[0]
        for r in base.store.db.execute(
            "SELECT id FROM chunks WHERE id NOT IN (SELECT chunk_id FROM vectors)"
        )
    }


def expected_code(fault: str, reranker: bool = False) -> str:
    if fault in UNAVAILABLE:
        return "RERANKER_UNAVAILABLE" if reranker else "EMBEDDING_MODEL_UNAVAILABLE"
    return "MODEL_ANSWER_INVALID"


# -- while indexing -------------------------------------------------------------------------


@pytest.mark.parametrize("fault", EMBEDDING_FAULTS)
def test_a_model_fault_while_indexing_loses_nothing_and_the_next_run_fills_the_gap(
    tmp_path, model, small_batches, fault
):
    src = folder(tmp_path)
    with make_base(tmp_path / "b.db", model, src) as base:
        model.misbehave(fault, after=2)  # two batches get their vectors, then the fault
        report = base.index()
        assert report.added == 5 and not report.skipped
        assert report.embedded == 8
        assert report.without_vector == report.chunks - 8 > 0
        [warning] = report.warnings
        assert warning.code == expected_code(fault)
        assert f"{report.without_vector} chunks wait for their vectors" in warning.message
        waiting = chunk_ids_without_vector(base)
        assert len(waiting) == report.without_vector
        assert base.status().chunks_without_vector == len(waiting)

        # Every document is searchable by words meanwhile; once the model answers again, a
        # search says how many chunks still wait.
        answer = base.search("proxy settings")
        assert [w.code for w in answer.warnings] == ["EMBEDDING_MODEL_UNAVAILABLE"]
        assert answer.results[0].citation.document == "doc2.md"
        model.misbehave(None)
        answer = base.search("proxy settings")
        assert [w.code for w in answer.warnings] == ["CHUNKS_WITHOUT_VECTORS"]
        assert answer.warnings[0].message.startswith(f"{len(waiting)} of {report.chunks} chunks")
        assert answer.results[0].citation.document == "doc2.md"

        vectors_before = dict(base.store.db.execute("SELECT chunk_id, seq FROM vectors"))
        again = base.index()
        assert (again.unchanged, again.added, again.updated) == (5, 0, 0)  # nothing re-read
        assert again.embedded == len(waiting) and again.without_vector == 0
        assert not again.warnings
        assert chunk_ids_without_vector(base) == set()
        vectors_after = dict(base.store.db.execute("SELECT chunk_id, seq FROM vectors"))
        assert {c: vectors_after[c] for c in vectors_before} == vectors_before  # kept as they were
        assert not base.search("proxy settings").warnings


@pytest.mark.parametrize("fault", ["500", "wrong-dimension", "nan"])
def test_a_model_failing_from_the_first_batch_leaves_every_chunk_waiting(
    tmp_path, model, small_batches, fault
):
    src = folder(tmp_path)
    with make_base(tmp_path / "b.db", model, src) as base:
        base.configure(embedding={**base.spec["embedding"], "dimension": DIMENSION})
        model.misbehave(fault)
        report = base.index()
        assert report.embedded == 0 and report.without_vector == report.chunks > 0
        assert report.warnings[0].code == expected_code(fault)
        answer = base.search("gpu errors")
        assert [w.code for w in answer.warnings] == ["NO_VECTORS"]
        assert answer.results[0].citation.document == "doc3.md"
        with pytest.raises(EmbeddingModelUnavailable):
            base.search("gpu errors", mode="dense")
        model.misbehave(None)
        assert base.index().without_vector == 0


# -- while searching ------------------------------------------------------------------------


@pytest.fixture
def indexed(tmp_path, model):
    """A base whose every chunk has its vector, and a reranker on the same faulty server."""
    src = folder(tmp_path)
    base = make_base(tmp_path / "b.db", model, src, reranker=True)
    report = base.index()
    assert report.without_vector == 0 and not report.warnings
    yield base
    base.close()


@pytest.mark.parametrize("fault", EMBEDDING_FAULTS)
def test_an_embedding_fault_while_searching_means_words_only_with_the_warning(
    indexed, model, tmp_path, fault
):
    # A fresh Base, as a new CLI search or service start has: its provider has learnt nothing.
    with Base(tmp_path / "b.db") as base:
        healthy = base.search("travel expenses", rerank=False)
        assert healthy.results[0].scores.dense is not None
    with Base(tmp_path / "b.db") as base:
        model.misbehave(fault)
        answer = base.search("travel expenses", rerank=False)
        assert [w.code for w in answer.warnings] == ["EMBEDDING_MODEL_UNAVAILABLE"]
        assert answer.warnings[0].message.endswith(": results by keywords only")
        assert answer.results[0].citation.document == "doc1.md"
        assert all(r.scores.dense is None for r in answer.results)
        assert [r.chunk_id for r in answer.results] == [
            r.chunk_id for r in base.search("travel expenses", mode="keyword", rerank=False).results
        ]
        with pytest.raises(EmbeddingModelUnavailable):
            base.search("travel expenses", mode="dense")
        assert base.search("travel expenses", mode="keyword", rerank=False).warnings == ()
        model.misbehave(None)
        assert base.search("travel expenses", rerank=False).warnings == ()


@pytest.mark.parametrize("fault", RERANK_FAULTS)
def test_a_rerank_fault_while_searching_keeps_the_fused_order_with_the_warning(
    indexed, model, fault
):
    fused = indexed.search("vacation days rule", rerank=False)
    reranked = indexed.search("vacation days rule")
    assert reranked.reranked and not reranked.warnings
    # Every call from now on fails: the embedding of the question too, for the faults that the
    # embedding and rerank paths share; so ask by words, where only the reranker is called.
    fused = indexed.search("vacation days rule", mode="keyword", rerank=False)
    model.misbehave(fault)
    answer = indexed.search("vacation days rule", mode="keyword")
    assert not answer.reranked
    assert [w.code for w in answer.warnings] == ["RERANKER_UNAVAILABLE"]
    assert answer.warnings[0].message.endswith(": results in the fused order")
    assert [r.chunk_id for r in answer.results] == [r.chunk_id for r in fused.results]
    assert all(r.scores.rerank is None for r in answer.results)
    model.misbehave(None)
    assert indexed.search("vacation days rule", mode="keyword").reranked


def test_both_models_failing_still_answers_by_words_with_both_warnings(indexed, model, tmp_path):
    with Base(tmp_path / "b.db") as base:
        model.misbehave("500")
        answer = base.search("purchase orders")
        assert [w.code for w in answer.warnings] == [
            "EMBEDDING_MODEL_UNAVAILABLE",
            "RERANKER_UNAVAILABLE",
        ]
        assert answer.results[0].citation.document == "doc4.md" and not answer.reranked


def test_a_wrong_dimension_is_caught_even_when_the_base_has_not_recorded_its_own(
    indexed, model, tmp_path
):
    """The search's own check (the provider has no dimension to hold the answer to)."""
    indexed.store.set_spec({"dimension": None})
    with Base(tmp_path / "b.db") as base:
        model.misbehave("wrong-dimension")
        answer = base.search("travel expenses")
        assert [w.code for w in answer.warnings] == ["EMBEDDING_MODEL_UNAVAILABLE"]
        assert "dimension 16, the base's vectors have 32" in answer.warnings[0].message
        assert answer.results[0].citation.document == "doc1.md"
        with pytest.raises(EmbeddingModelUnavailable, match="dimension 16"):
            base.search("travel expenses", mode="dense")
