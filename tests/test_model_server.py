"""The model server (metis_lite/http/model_routes.py on http/server.py): each protocol's
documented request gets an answer of the documented shape, every bad request a JSON error with a
fitting status, a web page's request (another Host, another Origin, a body that is not JSON) a
refusal, and a request that asks for too much work a 413 before the model runs.

The models here are small stand-ins so that these tests need no weights; test_http_models.py
runs the real server process with the embedded model."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import math
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from metis_lite import cli
from metis_lite.errors import EmbeddingModelUnavailable
from metis_lite.http import model_routes as model_server
from metis_lite.http.run import make_model_server as make_server
from metis_lite.http.wire import Head, Request
from metis_lite.models import http as providers

PROTOCOLS = Path(__file__).resolve().parent / "fixtures" / "protocols"


class StubEmbedder:
    """Unit vectors from a hash of the text: deterministic, distinct, no weights."""

    dimension = 8

    def __init__(self, name: str = "stub-embedder") -> None:
        self.name = name
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        rows = [
            np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8)[:8] for t in texts
        ]
        matrix = np.asarray(rows, dtype=np.float32) - 127.5
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    def close(self) -> None:
        pass


class StubReranker:
    """Logit = shared words − 1."""

    def __init__(self, name: str = "stub-reranker") -> None:
        self.name = name

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        words = set(question.lower().split())
        return [len(words & set(p.lower().split())) - 1.0 for p in passages]

    def close(self) -> None:
        pass


class CountingEmbedder(StubEmbedder):
    """A stand-in that counts its tokens as a model does: one per character, at most 512."""

    def __init__(self) -> None:
        super().__init__()
        self.counted = 0

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        self.counted += len(texts)
        return [min(len(text), 512) for text in texts]


class Broken(StubEmbedder):
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("secret internal detail")


class Serving:
    def __init__(self, embedder: Any, reranker: Any = None) -> None:
        self.server = make_server(embedder, reranker, port=0)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        self.host, self.port = self.server.server_address[:2]

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            sent = {"Content-Type": "application/json"} if data is not None else {}
            connection.request(method, path, body=data, headers={**sent, **(headers or {})})
            response = connection.getresponse()
            payload = response.read()
            kind = response.getheader("Content-Type")
            assert kind == "application/json", (kind, payload[:200])
            return response.status, json.loads(payload), dict(response.getheaders())
        finally:
            connection.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serving() -> Iterator[Serving]:
    running = Serving(StubEmbedder(), StubReranker())
    yield running
    running.close()


def protocol(name: str) -> dict[str, Any]:
    return json.loads((PROTOCOLS / f"{name}.json").read_text(encoding="utf-8"))


def assert_covers(ours: Any, documented: Any, where: str = "answer") -> None:
    """Every field of the documented answer is in ours, with the same JSON type."""
    if isinstance(documented, dict):
        assert isinstance(ours, dict), where
        for key, value in documented.items():
            assert key in ours, f"{where}.{key} missing"
            assert_covers(ours[key], value, f"{where}.{key}")
    elif isinstance(documented, list):
        assert isinstance(ours, list) and bool(ours) == bool(documented), where
        if documented:
            assert_covers(ours[0], documented[0], f"{where}[0]")
    elif isinstance(documented, bool):
        assert isinstance(ours, bool), where
    elif isinstance(documented, int | float):
        assert isinstance(ours, int | float) and not isinstance(ours, bool), where
    elif documented is not None:
        assert type(ours) is type(documented), where


PATHS = {
    "openai_embeddings": "/v1/embeddings",
    "tei_embed": "/embed",
    "ollama_embed": "/api/embed",
    "tei_rerank": "/rerank",
    "cohere_rerank": "/v1/rerank",
    "jina_rerank": "/v1/rerank",
}


@pytest.mark.parametrize("name", list(PATHS))
def test_documented_requests_get_documented_answers(name: str) -> None:
    example = protocol(name)
    request = dict(example["request"])
    model = request.get("model", "stub")
    running = Serving(StubEmbedder(model), StubReranker(model))
    try:
        if name == "jina_rerank":
            request["return_documents"] = True  # Jina's default; Cohere's is false
        status, answer, _ = running.request("POST", PATHS[name], request)
    finally:
        running.close()
    assert status == 200, answer
    documented = example["answer"]
    if name == "jina_rerank":
        documented = {"results": documented["results"]}  # token usage is not counted here
    assert_covers(answer, documented)


def test_tei_embed_returns_one_unit_vector_per_input(serving: Serving) -> None:
    status, answer, _ = serving.request("POST", "/embed", {"inputs": ["a", "b"], "normalize": True})
    assert status == 200
    np.testing.assert_allclose(answer, StubEmbedder().embed(["a", "b"]), rtol=1e-6)
    status, single, _ = serving.request("POST", "/embed", {"inputs": "a"})
    assert status == 200 and len(single) == 1


def test_openai_vectors_are_exact_as_float_and_as_base64(serving: Serving) -> None:
    expected = StubEmbedder().embed(["x", "y"])
    status, answer, _ = serving.request(
        "POST", "/v1/embeddings", {"input": ["x", "y"], "model": "stub-embedder"}
    )
    assert status == 200
    assert [d["index"] for d in answer["data"]] == [0, 1]
    floats = np.asarray([d["embedding"] for d in answer["data"]], dtype=np.float32)
    assert np.array_equal(floats, expected)
    status, answer, _ = serving.request(
        "POST", "/v1/embeddings", {"input": ["x", "y"], "encoding_format": "base64"}
    )
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in answer["data"]]
    )
    assert status == 200 and np.array_equal(decoded, expected)


def test_openai_lists_the_served_models(serving: Serving) -> None:
    status, answer, _ = serving.request("GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in answer["data"]] == ["stub-embedder", "stub-reranker"]


def test_health_names_the_models(serving: Serving) -> None:
    assert serving.request("GET", "/health")[:2] == (
        200,
        {"status": "ok", "embedding": "stub-embedder", "reranker": "stub-reranker"},
    )


def test_tei_rerank_sorts_best_first_and_scores_as_asked(serving: Serving) -> None:
    body = {"query": "paid vacation days", "texts": ["office hours", "paid vacation", "days"]}
    status, ranks, _ = serving.request("POST", "/rerank", body)
    assert status == 200
    assert [r["index"] for r in ranks] == [1, 2, 0]
    assert ranks[0]["score"] == pytest.approx(1 / (1 + math.exp(-1.0)))
    status, raw, _ = serving.request(
        "POST", "/rerank", {**body, "raw_scores": True, "return_text": True}
    )
    assert [r["score"] for r in raw] == [1.0, 0.0, -1.0]
    assert raw[0]["text"] == "paid vacation"


def test_cohere_rerank_honours_top_n_and_return_documents(serving: Serving) -> None:
    body = {
        "model": "stub-reranker",
        "query": "paid vacation days",
        "documents": ["office hours", {"text": "paid vacation"}, "days"],
        "top_n": 2,
        "return_documents": True,
    }
    for path in ("/v1/rerank", "/v2/rerank"):
        status, answer, _ = serving.request("POST", path, body)
        assert status == 200
        assert [r["index"] for r in answer["results"]] == [1, 2]
        assert answer["results"][0]["document"] == {"text": "paid vacation"}
        assert (
            0
            < answer["results"][1]["relevance_score"]
            < answer["results"][0]["relevance_score"]
            < 1
        )


def test_the_served_model_answers_to_its_hub_id_only(serving: Serving) -> None:
    ok = serving.request("POST", "/api/embed", {"model": "org/stub-embedder:latest", "input": "x"})
    assert ok[0] == 200 and len(ok[1]["embeddings"]) == 1
    status, answer, _ = serving.request(
        "POST", "/api/embed", {"model": "nomic-embed-text", "input": "x"}
    )
    assert status == 404 and "stub-embedder" in answer["error"]
    status, answer, _ = serving.request("POST", "/api/embed", {"input": "x"})
    assert status == 400 and "model is required" in answer["error"]
    status, answer, _ = serving.request(
        "POST", "/v1/rerank", {"model": "rerank-v3.5", "query": "q", "documents": ["d"]}
    )
    assert status == 404 and "stub-reranker" in answer["message"]


@pytest.mark.parametrize(
    ("path", "body", "status", "said"),
    [
        ("/embed", {"inputs": []}, 422, "must not be empty"),
        ("/embed", {"inputs": [[101, 2023]]}, 422, "token ids"),
        ("/embed", {}, 422, "list of strings"),
        ("/embed", {"inputs": ["x"] * (model_server.MAX_INPUTS + 1)}, 413, "at most"),
        ("/v1/embeddings", {"input": ["x"], "encoding_format": "int8"}, 400, "encoding_format"),
        ("/v1/embeddings", {"input": ["x"], "dimensions": 3}, 400, "8 dimensions"),
        ("/v1/embeddings", {"input": 7}, 400, "list of strings"),
        ("/rerank", {"query": "q"}, 422, "texts"),
        ("/rerank", {"query": 1, "texts": ["a"]}, 422, "query must be a string"),
        ("/rerank", {"query": "q", "texts": ["a"], "raw_scores": "yes"}, 422, "true or false"),
        ("/v1/rerank", {"query": "q", "documents": [1]}, 400, "each document"),
        ("/v1/rerank", {"query": "q", "documents": ["a"], "top_n": 0}, 400, "top_n"),
        ("/v1/rerank", {"query": "q", "documents": []}, 400, "non-empty"),
    ],
)
def test_bad_requests_get_a_json_error_in_the_protocols_shape(
    serving: Serving, path: str, body: Any, status: int, said: str
) -> None:
    got, answer, _ = serving.request("POST", path, body)
    assert got == status
    text = json.dumps(answer)
    assert said in text
    if path.startswith("/v1/embeddings"):
        assert answer["error"]["type"] == "invalid_request_error"
    elif path in ("/embed", "/rerank"):
        assert answer["error_type"] == "validation"
    else:
        assert "message" in answer


def test_malformed_bodies_are_400(serving: Serving) -> None:
    assert serving.request("POST", "/embed", raw=b"{not json")[0] == 400
    assert serving.request("POST", "/embed", raw=b"[1, 2]")[0] == 400
    assert serving.request("POST", "/embed", raw=b"\xff\xfe")[0] == 400


def test_unknown_paths_and_methods(serving: Serving) -> None:
    status, answer, _ = serving.request("GET", "/nothing")
    assert status == 404 and answer["error"]["code"] == "HTTP_404"
    status, _, headers = serving.request("GET", "/embed")
    assert status == 405 and headers["Allow"] == "POST"
    assert serving.request("POST", "/health", {})[0] == 405
    status, answer, _ = serving.request("DELETE", "/embed")
    assert status == 501 and "error" in answer


def test_an_unread_body_never_becomes_the_next_request(serving: Serving) -> None:
    connection = http.client.HTTPConnection(serving.host, serving.port, timeout=10)
    try:
        json_body = {"Content-Type": "application/json"}
        for path in ("/nothing", "/health", "/embed"):
            method = "POST" if path != "/embed" else "GET"
            connection.request(method, path, body=b'{"inputs": "x"}', headers=json_body)
            assert connection.getresponse().read()
        connection.request("POST", "/embed", body=b'{"inputs": "x"}', headers=json_body)
        response = connection.getresponse()
        assert response.status == 200 and len(json.loads(response.read())) == 1
    finally:
        connection.close()


def test_a_request_past_the_size_limit_is_refused_unread(serving: Serving) -> None:
    with socket.create_connection((serving.host, serving.port), timeout=10) as sock:
        sock.sendall(
            b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {model_server.MAX_REQUEST_BYTES + 1}\r\n\r\n".encode()
        )
        reply = sock.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 413")
    assert "Connection: close" in reply


def test_a_body_without_length_is_411(serving: Serving) -> None:
    status, _, _ = serving.request(
        "POST", "/embed", raw=b"", headers={"Transfer-Encoding": "chunked"}
    )
    assert status == 411


def test_no_reranker_no_rerank() -> None:
    running = Serving(StubEmbedder())
    try:
        status, answer, _ = running.request("POST", "/rerank", {"query": "q", "texts": ["a"]})
        assert status == 404 and "no reranker" in answer["error"]
        status, answer, _ = running.request(
            "POST", "/v1/rerank", {"query": "q", "documents": ["a"]}
        )
        assert status == 404 and "no reranker" in answer["message"]
        assert running.request("GET", "/health")[1]["reranker"] is None
    finally:
        running.close()


def test_a_failing_model_is_a_json_500_without_its_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    running = Serving(Broken())
    try:
        status, answer, _ = running.request("POST", "/v1/embeddings", {"input": "x"})
    finally:
        running.close()
    assert status == 500 and answer["error"]["type"] == "server_error"
    assert "secret internal detail" not in json.dumps(answer)
    assert "secret internal detail" in capsys.readouterr().err  # the operator's log has it


def test_concurrent_requests_are_each_answered(serving: Serving) -> None:
    results: list[int] = []

    def ask(i: int) -> None:
        results.append(serving.request("POST", "/embed", {"inputs": [f"text {i}"] * 5})[0])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [200] * 8


def test_main_refuses_a_missing_model_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["models", "serve", "--reranker-path", str(tmp_path / "no-such-model"), "--port", "0"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "error:" in err and "Traceback" not in err


# -- what a web page may send ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("POST", "/embed", {"Origin": "http://evil.example"}, 403),
        ("POST", "/v1/embeddings", {"Origin": "null"}, 403),
        ("POST", "/embed", {"Content-Type": "text/plain"}, 415),
        ("POST", "/api/embed", {"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ("POST", "/v1/rerank", {"Content-Type": "multipart/form-data; boundary=x"}, 415),
        ("POST", "/embed", {"Content-Type": ""}, 415),
        ("POST", "/embed", {"Host": "evil.example:8089"}, 403),
        ("GET", "/health", {"Host": "rebound.example"}, 403),
        ("GET", "/v1/models", {"Host": "192.168.1.20:8089"}, 403),
    ],
    ids=["origin", "null-origin", "text", "form", "multipart", "no-type", "host", "get", "ip"],
)
def test_a_web_pages_request_is_refused(
    serving: Serving, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    body = {"inputs": "x", "input": "x", "model": "stub-embedder", "query": "q", "documents": ["d"]}
    stub = serving.server.app.service.embedder  # type: ignore[attr-defined]
    got, answer, sent = serving.request(
        method, path, body if method == "POST" else None, headers=headers
    )
    assert got == status, answer
    assert stub.calls == 0, "the model never ran"
    assert sent["X-Frame-Options"] == "DENY" and sent["X-Content-Type-Options"] == "nosniff"


def test_a_loopback_host_and_the_servers_own_origin_are_answered(serving: Serving) -> None:
    own = f"http://127.0.0.1:{serving.port}"
    for host in (f"127.0.0.1:{serving.port}", f"localhost:{serving.port}", f"[::1]:{serving.port}"):
        headers = {"Host": host, "Origin": f"http://{host}"}
        assert serving.request("POST", "/embed", {"inputs": "x"}, headers=headers)[0] == 200
    assert serving.request("POST", "/embed", {"inputs": "x"}, headers={"Origin": own})[0] == 200
    kind = {"Content-Type": "application/json; charset=utf-8"}
    assert serving.request("POST", "/embed", {"inputs": "x"}, headers=kind)[0] == 200


def test_a_server_bound_beyond_loopback_answers_any_host() -> None:
    """Bound to 0.0.0.0 (with the warning `models serve` prints), clients name the machine."""
    app = model_server.ModelApp(model_server.ModelService(StubEmbedder()), loopback=False)
    head = Head("GET", "/health", "HTTP/1.1", (("host", "models.internal:8089"),))
    assert app.handle(Request(head, b"", "10.0.0.2", has_length=False)).status == 200
    loopback = model_server.ModelApp(model_server.ModelService(StubEmbedder()))
    assert loopback.handle(Request(head, b"", "10.0.0.2", has_length=False)).status == 403


def test_every_answer_carries_the_headers_that_keep_a_browser_out(serving: Serving) -> None:
    answers = [
        serving.request("GET", "/health"),
        serving.request("POST", "/embed", {"inputs": ["x"]}),
        serving.request("GET", "/nothing"),
        serving.request("GET", "/embed"),
        serving.request("POST", "/embed", {"inputs": []}),
        serving.request("POST", "/embed", raw=b"", headers={"Transfer-Encoding": "chunked"}),
    ]
    for status, _, headers in answers:
        assert headers["X-Frame-Options"] == "DENY", status
        assert headers["X-Content-Type-Options"] == "nosniff", status
    assert [status for status, _, _ in answers] == [200, 200, 404, 405, 422, 411]


# -- the work one request may ask --------------------------------------------------------------


def test_a_request_past_the_token_bound_is_413_before_the_model_runs() -> None:
    counting = CountingEmbedder()
    running = Serving(counting, StubReranker())
    try:
        long_text = "x" * 512  # 512 tokens each to CountingEmbedder
        fits = model_server.MAX_REQUEST_TOKENS // 512
        status, _, _ = running.request("POST", "/embed", {"inputs": [long_text] * fits})
        assert status == 200 and counting.calls == 1
        counting.counted = 0
        many = model_server.MAX_REQUEST_CHARS // 512  # within the characters, past the tokens
        status, answer, _ = running.request("POST", "/embed", {"inputs": [long_text] * many})
        assert status == 413 and answer["error_type"] == "validation"
        assert f"more than {model_server.MAX_REQUEST_TOKENS} tokens" in answer["error"]
        assert counting.calls == 1, "the model did not run for it"
        assert counting.counted == model_server.COUNT_BATCH, "counting stopped once past"
        counting.counted = 0
        status, answer, _ = running.request(
            "POST", "/embed", {"inputs": [long_text] * model_server.MAX_INPUTS}
        )
        assert status == 413 and f"than the {model_server.MAX_REQUEST_CHARS}" in answer["error"]
        assert counting.counted == 0, "refused by its characters before any was tokenized"
        status, answer, _ = running.request(
            "POST", "/v1/embeddings", {"input": [long_text] * (fits + 1)}
        )
        assert status == 413 and "tokens" in answer["error"]["message"]
        question = "q" * 2000  # read with each passage: 70 × 2,000 characters
        documents = {"query": question, "documents": ["d"] * 70}
        status, answer, _ = running.request("POST", "/v1/rerank", documents)
        assert status == 413 and "characters" in answer["message"]
        passages = ["y" * 3000] * 3  # a reranker that cannot count: characters + 2 each
        status, answer, _ = running.request(
            "POST", "/v1/rerank", {"query": "q", "documents": passages}
        )
        assert status == 413 and "tokens" in answer["message"]
    finally:
        running.close()


def test_the_http_providers_halve_a_batch_refused_as_too_much() -> None:
    embedder, reranker = StubEmbedder(), StubReranker()
    running = Serving(embedder, reranker)
    url = f"http://127.0.0.1:{running.port}"
    texts = [f"{n} " + "z" * 3000 for n in range(8)]  # 3,004 tokens each: two per request fit
    try:
        with providers.TEIEmbedder(url, batch_size=8) as tei:
            vectors = tei.embed(texts)
        np.testing.assert_allclose(vectors, StubEmbedder().embed(texts), rtol=1e-6)
        assert embedder.calls == 4, "8 → 4 + 4 → 2 + 2 + 2 + 2: four requests reached the model"
        with providers.CohereReranker(url + "/v1", model="stub-reranker", batch_size=8) as cohere:
            scores = cohere.score("z", texts)
        expected = [1 / (1 + math.exp(-v)) for v in StubReranker().score("z", texts)]
        np.testing.assert_allclose(scores, expected, rtol=1e-6)
        with providers.OpenAIEmbedder(url + "/v1", model="stub-embedder") as openai:
            with pytest.raises(EmbeddingModelUnavailable, match="413.*tokens"):
                openai.embed(["w" * 9000])  # one text past the bound: said, not retried forever
    finally:
        running.close()
