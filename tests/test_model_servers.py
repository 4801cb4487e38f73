"""Model servers as an index run and a search meet them: slow ones still used (a batch that is
late shrinks, and its answer is kept), several side by side (every one gets batches, questions
go to the fastest), `models serve` answering 503 while it loads, and servers that answer
garbage, vectors of the wrong size or NaN, or nothing at all."""

from __future__ import annotations

import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from loopback import Loopback, Quiet

from metis_lite import cli
from metis_lite.base.core import Base
from metis_lite.errors import EmbeddingModelUnavailable
from metis_lite.models import http, http_pool, registry

ROOT = Path(__file__).resolve().parent.parent
DIMENSION = 16
MODEL = "fake-bow"


def vector_of(text: str) -> list[float]:
    """The stand-ins' model: a text's words hashed into DIMENSION buckets (never zeros)."""
    vector = np.zeros(DIMENSION)
    for word in text.lower().split():
        vector[
            int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % DIMENSION
        ] += 1
    vector[0] += 0.01
    return (vector / np.linalg.norm(vector)).tolist()


class StandIn:
    """A TEI server (POST /embed) on loopback taking `per_text_s` a text; `fault` spoils its
    answers ("garbage", "wrong-size", "nan", "busy": 503 with Retry-After for `busy` answers);
    `sizes` records how many texts each request carried."""

    def __init__(self, per_text_s: float = 0.0, fault: str | None = None, busy: int = 0) -> None:
        self.per_text_s, self.fault, self.busy = per_text_s, fault, busy
        self.sizes: list[int] = []
        self.seconds: list[float] = []
        self.lock = threading.Lock()
        stand_in = self

        class Handler(Quiet):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                started = time.monotonic()
                texts = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"]
                with stand_in.lock:
                    if stand_in.busy > 0:
                        stand_in.busy -= 1
                        return self.send(503, b'{"error": "loading"}', retry="1")
                    stand_in.sizes.append(len(texts))
                time.sleep(stand_in.per_text_s * len(texts))
                vectors = [vector_of(text) for text in texts]
                if stand_in.fault == "wrong-size":
                    vectors = [row[:-1] for row in vectors]
                elif stand_in.fault == "nan":
                    vectors[0][0] = float("nan")
                data = json.dumps(vectors).encode()  # NaN written as Python writes it
                if stand_in.fault == "garbage":
                    data = b"<html>502 Bad Gateway</html>"
                stand_in.seconds.append(time.monotonic() - started)
                self.send(200, data)

            def send(self, status: int, data: bytes, retry: str | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if retry:
                    self.send_header("Retry-After", retry)
                self.end_headers()
                self.wfile.write(data)

        self.loopback = Loopback(Handler)
        self.server, self.url = self.loopback.server, self.loopback.url

    def close(self) -> None:
        self.loopback.close()


@pytest.fixture
def stand_ins() -> Iterator[list[StandIn]]:
    made: list[StandIn] = []
    yield made
    for stand_in in made:
        stand_in.close()


def corpus(folder: Path, files: int) -> Path:
    """`files` Markdown files of one chunk each, ~500 characters."""
    folder.mkdir()
    for i in range(files):
        words = " ".join(f"word{i}x{n}" for n in range(50))
        (folder / f"note{i}.md").write_text(f"# Note {i}\n\n{words}\n", encoding="utf-8")
    return folder


def vectors_in(path: Path) -> tuple[int, int]:
    """(chunks, chunks with a vector) of the base at `path`."""
    with Base(path) as base:
        status = base.status()
        return status.chunks, status.chunks - status.chunks_without_vector


# -- slow servers ------------------------------------------------------------------------------


def test_a_slow_server_still_gives_every_chunk_its_vector(
    tmp_path: Path, stand_ins: list[StandIn], capsys: pytest.CaptureFixture[str]
) -> None:
    """3 s per 8 texts: the run's first batch of 32 takes 12 s, past the 10 s deadline of a
    question; it is kept all the same, and the next batches are smaller."""
    slow = StandIn(per_text_s=3 / 8)
    stand_ins.append(slow)
    src = corpus(tmp_path / "src", 36)
    base = tmp_path / "kb.db"
    argv = ["index", str(base), str(src), "--embedding", "tei", "--embedding-url", slow.url]
    argv += ["--embedding-model", MODEL]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert vectors_in(base) == (36, 36)
    assert max(slow.seconds) > 10  # the late answer was used
    assert slow.sizes[0] == 32 and max(slow.sizes[1:]) <= 16


def test_a_batch_shrinks_while_late_and_grows_back_when_quick() -> None:
    sizes: list[int] = []
    per_text = [0.06]

    def send(url: str, texts: list[str], deadline: float) -> np.ndarray:
        sizes.append(len(texts))
        time.sleep(per_text[0] * len(texts))
        return np.ones((len(texts), 4), np.float32)

    pool = http_pool.ServerPool(["http://a"], batch=8, timeout_s=0.2, send=send)
    texts = ["x" * 100] * 8
    for _ in range(3):
        assert pool.spread(texts).shape == (8, 4)
    assert sizes[:3] == [8, 4, 2]  # 0.48 s, 0.24 s: late, halved; 0.12 s kept
    assert set(sizes[3:]) == {2}
    per_text[0] = 0.0
    sizes.clear()
    for _ in range(3):
        pool.spread(texts)
    assert sizes[0] == 2 and max(sizes) == 8  # quick answers: 2, 4, then 8 again


def test_a_failing_server_rests_then_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_pool, "SERVER_REST_S", 0.5)
    asked: list[str] = []
    down = {"http://down"}

    def send(url: str, texts: list[str], deadline: float) -> np.ndarray:
        asked.append(url)
        if url in down:
            raise EmbeddingModelUnavailable(f"{url}/embed: cannot connect (refused)")
        return np.ones((len(texts), 4), np.float32)

    pool = http_pool.ServerPool(["http://down", "http://up"], batch=4, timeout_s=1, send=send)
    for _ in range(6):
        assert pool.spread(["t"] * 8).shape == (8, 4)
    assert asked.count("http://down") == http_pool.SERVER_FAILURES_MAX  # then left alone
    down.clear()
    time.sleep(0.6)
    asked.clear()
    pool.spread(["t"] * 8)
    assert "http://down" in asked  # back after its rest


# -- several servers ---------------------------------------------------------------------------


def test_several_urls_are_one_model_and_the_cli_takes_them(tmp_path: Path) -> None:
    one = {"provider": "tei", "url": "http://a:1", "model": MODEL}
    both = {**one, "urls": ["http://a:1", "http://b:2"]}
    assert registry.model_label(one) == registry.model_label(both) == MODEL
    assert registry.model_label({"provider": "tei", "urls": ["http://a:1", "http://b:2"]}) == (
        registry.model_label({"provider": "tei", "url": "http://a:1"})
    )
    with pytest.raises(Exception, match="urls must be a non-empty list"):
        registry.check_embedding_spec({**one, "urls": []})
    with pytest.raises(Exception, match="not a url|must start with"):
        registry.check_embedding_spec({**one, "urls": ["http://a:1", "ftp://b"]})
    base = tmp_path / "kb.db"
    argv = ["index", str(base), "--embedding", "tei", "--embedding-model", MODEL]
    argv += ["--embedding-url", "http://127.0.0.1:9", "--embedding-url", "http://127.0.0.1:10"]
    cli.main(argv)
    with Base(base) as opened:
        spec = opened.spec.embedding
    assert spec["url"] == "http://127.0.0.1:9"
    assert spec["urls"] == ["http://127.0.0.1:9", "http://127.0.0.1:10"]


def test_questions_go_to_the_fastest_server_that_answers(stand_ins: list[StandIn]) -> None:
    slow, fast = StandIn(per_text_s=0.3), StandIn()
    stand_ins += [slow, fast]
    with socket.socket() as probe:  # a port nobody listens on: a server that is down
        probe.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{probe.getsockname()[1]}"
    spec = {"provider": "tei", "url": down, "urls": [slow.url, fast.url], "model": MODEL}
    embedder = registry.embedder_from_spec(spec)
    try:
        for _ in range(6):
            assert embedder.embed(["how many holidays"]).shape == (1, DIMENSION)
    finally:
        embedder.close()
    assert len(fast.sizes) >= 4 and len(slow.sizes) <= 2


def test_an_index_run_spreads_batches_over_two_servers(
    tmp_path: Path, stand_ins: list[StandIn]
) -> None:
    first, second = StandIn(per_text_s=0.01), StandIn(per_text_s=0.01)
    stand_ins += [first, second]
    with Base(tmp_path / "kb.db", create=True) as base:
        base.configure(embedding={"provider": "tei", "urls": [first.url, second.url]})
        base.add_source(corpus(tmp_path / "src", 40))
        report = base.index()
        assert report.without_vector == 0 and not report.warnings
    assert sum(first.sizes) + sum(second.sizes) == 40
    assert first.sizes and second.sizes  # both received batches


# -- models serve ------------------------------------------------------------------------------


class ModelsServe:
    """`metis-lite models serve --port 0` as a process, its stderr read line by line."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "metis_lite", "models", "serve", "--port", "0"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        loading = self.line()
        assert loading.startswith("loading multilingual-e5-small…"), loading
        self.url = loading.split(" on ", 1)[1].split()[0]

    def line(self, timeout: float = 120) -> str:
        ready, _, _ = select.select([self.process.stderr], [], [], timeout)
        assert ready, "models serve said nothing"
        return self.process.stderr.readline()

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stderr.close()


def test_models_serve_answers_503_while_loading_then_serves(tmp_path: Path) -> None:
    """Two real `models serve`: each says 503 with Retry-After while it loads, then "ready
    on URL", then answers; an index run naming both gives each of them batches."""
    servers = [ModelsServe(), ModelsServe()]
    try:
        for server in servers:
            early = httpx.post(server.url + "/embed", json={"inputs": ["x"]}, timeout=30)
            if early.status_code == 503:
                assert early.headers["Retry-After"].isdigit()
            else:  # loaded before the first request arrived (a fast machine)
                assert early.status_code == 200
            assert server.line() == f"ready on {server.url}\n"
            assert httpx.post(server.url + "/embed", json={"inputs": ["x"]}).status_code == 200
        counted = [Counting(server.url) for server in servers]
        try:
            with Base(tmp_path / "kb.db", create=True) as base:
                urls = [relay.url for relay in counted]
                base.configure(embedding={"provider": "tei", "urls": urls, "model": MODEL_E5})
                base.add_source(corpus(tmp_path / "src", 24))
                report = base.index()
                assert report.without_vector == 0 and not report.warnings
        finally:
            for relay in counted:
                relay.close()
        assert all(relay.texts > 0 for relay in counted), [r.texts for r in counted]
    finally:
        for server in servers:
            server.close()


MODEL_E5 = "multilingual-e5-small"


class Counting:
    """A relay in front of a real server that counts the texts it passes on."""

    def __init__(self, upstream: str) -> None:
        self.texts = 0
        relay = self
        self.client = client = httpx.Client(timeout=120)

        class Handler(Quiet):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                relay.texts += len(json.loads(body)["inputs"])
                answer = client.post(
                    upstream + self.path,
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

        self.loopback = Loopback(Handler)
        self.server, self.url = self.loopback.server, self.loopback.url

    def close(self) -> None:
        self.loopback.close()
        self.client.close()


def test_our_client_waits_for_a_server_that_says_retry_after(stand_ins: list[StandIn]) -> None:
    loading = StandIn(busy=2)  # two 503s with Retry-After: 1, then answers
    stand_ins.append(loading)
    with http.TEIEmbedder(loading.url, timeout_s=5) as embedder:
        assert embedder.embed(["x"]).shape == (1, DIMENSION)
    loading.busy = 5
    with http.TEIEmbedder(loading.url, timeout_s=1.5) as embedder:
        started = time.monotonic()
        with pytest.raises(EmbeddingModelUnavailable, match="HTTP 503"):
            embedder.embed(["x"])  # the next wait would pass the deadline: said at once
        assert time.monotonic() - started < 3


# -- bad answers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("garbage", "not valid JSON"),
        ("wrong-size", "dimension 15"),
        ("nan", "NaN"),
    ],
)
def test_an_unusable_answer_refuses_its_batch_and_stores_nothing(
    tmp_path: Path, stand_ins: list[StandIn], fault: str, said: str
) -> None:
    good, bad = StandIn(), StandIn(fault=fault)
    stand_ins += [good, bad]
    with Base(tmp_path / "kb.db", create=True) as base:
        base.configure(
            embedding={"provider": "tei", "urls": [bad.url, good.url], "dimension": DIMENSION}
        )
        base.add_source(corpus(tmp_path / "src", 6))
        report = base.index()
        assert report.added == 6 and report.embedded == 0
        assert report.without_vector == report.chunks == 6
        [warning] = report.warnings
        assert warning.code == "MODEL_ANSWER_INVALID"
        assert bad.url in warning.message and said in warning.message
        assert "6 chunks wait for their vectors" in warning.message
        bad.fault = None  # mended: the next run uses both servers again
        again = base.index()
        assert again.embedded == 6 and again.without_vector == 0 and not again.warnings


def test_a_server_that_answered_badly_is_asked_again_by_the_next_run(
    tmp_path: Path, stand_ins: list[StandIn]
) -> None:
    """Its one server answered a batch unusably: the run ends with the chunks waiting, and the
    server is not left counted as busy, so the next run (on the same Base) asks it at once."""
    alone = StandIn(fault="wrong-size")
    stand_ins.append(alone)
    with Base(tmp_path / "kb.db", create=True) as base:
        base.configure(embedding={"provider": "tei", "url": alone.url, "dimension": DIMENSION})
        base.add_source(corpus(tmp_path / "src", 6))
        assert base.index().without_vector == 6
        alone.fault = None
        again = base.index()
        assert again.embedded == 6 and again.without_vector == 0 and not again.warnings


def test_a_server_that_hangs_after_accepting_is_left_at_the_deadline(tmp_path: Path) -> None:
    with socket.socket() as hanging:
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(8)  # accepts (the kernel does), never answers
        url = f"http://127.0.0.1:{hanging.getsockname()[1]}"
        with Base(tmp_path / "kb.db", create=True) as base:
            base.configure(embedding={"provider": "tei", "url": url, "timeout_s": 0.5})
            base.add_source(corpus(tmp_path / "src", 2))
            started = time.monotonic()
            report = base.index()
            assert time.monotonic() - started < 15
            assert report.without_vector == 2
            assert report.warnings[0].code == "EMBEDDING_MODEL_UNAVAILABLE"
            assert "within" in report.warnings[0].message
        embedder = registry.embedder_from_spec({"provider": "tei", "url": url, "timeout_s": 1})
        started = time.monotonic()
        with pytest.raises(EmbeddingModelUnavailable, match="within 1 s"):
            embedder.embed(["a question"])  # a question keeps its deadline
        assert time.monotonic() - started < 3
        embedder.close()
