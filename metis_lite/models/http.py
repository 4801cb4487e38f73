"""Embedding and rerank providers that call a model server over HTTP (httpx).

Five protocols, each as its documentation shows it (copies in tests/fixtures/protocols/):

    OpenAIEmbedder   POST {url}/embeddings   {model, input, encoding_format} → {data: [{index, embedding}]}
    TEIEmbedder      POST {url}/embed        {inputs, normalize, truncate}   → [[float]]
    OllamaEmbedder   POST {url}/api/embed    {model, input}                  → {embeddings: [[float]]}
    TEIReranker      POST {url}/rerank       {query, texts, raw_scores}      → [{index, score}]
    CohereReranker   POST {url}/rerank       {model, query, documents, top_n} → {results: [{index, relevance_score}]}

For OpenAI and Cohere/Jina `url` is the API base that ends in /v1 (as their clients take it);
for TEI and Ollama it is the server's root.

A url is checked when a provider is made (`check_url`: http or https, a host, a port that is a
number, no space, no user or password, no query): a url that is not one is InvalidRequest then,
never a traceback on the first call. A server that refuses a batch as too much (413: too many
texts or tokens for one request, as TEI and `metis-lite models serve` answer) gets it again as
two halves, down to one text.

Failures fall in two kinds, as `base.py` says. No usable answer — a timeout, a refused, dropped
or reset connection, any status other than 2xx (429 and 5xx most often; also 401 for a wrong key
and 404 for a wrong url), a key whose environment variable is not set — raises
`EmbeddingModelUnavailable` / `RerankerUnavailable`. A 2xx answer that cannot be used — not JSON,
the wrong shape, a wrong or inconsistent dimension, NaN or infinity, fewer or more vectors or
scores than texts, a duplicate or out-of-range index — raises `ModelAnswerInvalid`. Every message
names the url and what happened; none holds the API key.

Deadline: httpx's timeouts are per network operation, so a server that trickles a byte at a
time would never trip them. Each exchange therefore runs in a worker thread that the caller waits
for at most `timeout_s`; the worker also stops reading at the deadline. An embedder gives each
batch its own deadline (indexing sends many); a reranker gives one deadline to the whole
`score()` call, since a search waits for all of it. An index run's batch goes through
`embed_documents` instead, which gives each request a longer deadline and spreads the batch over
every server a spec names (`urls`; http_pool.py). A server that answers 503 with Retry-After (a
model server still loading its model) is asked again after that many seconds, while the
deadline allows.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

import httpx
import numpy as np

from metis_lite import settings
from metis_lite.errors import (
    EmbeddingModelUnavailable,
    InvalidRequest,
    ModelAnswerInvalid,
    ModelUnavailable,
    RerankerUnavailable,
)
from metis_lite.models.http_answers import (
    an_object,
    check_url,
    checked_indexes,
    decoded,
    field_of,
    kind_of,
    matrix_of,
    provider_name,
)
from metis_lite.models.http_pool import ServerPool

OPENAI_BATCH = 64
"""Texts per OpenAI-compatible call; OpenAI itself takes up to 2,048."""

TEI_BATCH = 32
"""Texts per TEI call: TEI refuses more than its --max-client-batch-size, 32 by default."""

OLLAMA_BATCH = 64
COHERE_BATCH = 64

MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""An answer larger than this is refused (64 texts × 4,096 dimensions as JSON is ~6 MB)."""

ERROR_SNIPPET_CHARS = 200
"""How much of a refusing server's error text a message quotes."""

RETRY_AFTER_MIN_S = 0.1
"""A 503's Retry-After shorter than this (0) is waited this long, never a busy loop."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class _Exchange:
    """What the worker thread hands back: a decoded answer or the error to raise."""

    answer: Any = None
    error: Exception | None = None
    abandoned: bool = False
    allowed: float = 0.0  # the seconds a message says the call had


class _Busy(Exception):
    """A 503 with Retry-After (a model server still loading): asked again after `wait` s."""

    def __init__(self, refusal: ModelUnavailable, wait: float) -> None:
        super().__init__(refusal.message)
        self.refusal, self.wait = refusal, wait


class _TooMuch(Exception):
    """A 413: the server takes fewer or shorter texts per request (the batch is halved)."""

    def __init__(self, refusal: ModelUnavailable) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class _HttpProvider:
    """What every provider shares: the client, the url, the key, the deadline, the batch size."""

    unavailable: type[ModelUnavailable] = ModelUnavailable
    batch_default = OPENAI_BATCH

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        api_key_env: str | None = None,
        api_key: str | None = None,
        timeout_s: float = settings.MODEL_DEADLINE_S,
        batch_size: int | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        check_url(url)
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise InvalidRequest(
                f"timeout_s must be a positive number of seconds, not {timeout_s!r}"
            )
        batch = self.batch_default if batch_size is None else batch_size
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise InvalidRequest(f"batch_size must be a positive integer, not {batch_size!r}")
        if api_key_env is not None and not _ENV_NAME.match(str(api_key_env)):
            raise InvalidRequest(
                f"api_key_env must name an environment variable, not {api_key_env!r}"
            )
        self.url = url.rstrip("/")
        self.model = model
        self.timeout_s = float(timeout_s)
        self.batch_size = batch
        self.api_key_env = api_key_env
        self._api_key = api_key if api_key is not None else _read_key(api_key_env)
        self._own_client = client is None
        self._client = client if client is not None else httpx.Client()

    def close(self) -> None:
        """Close the client if this provider made it; an injected client belongs to its owner."""
        if self._own_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r}, model={self.model!r})"

    def _post(
        self,
        path: str,
        body: dict[str, Any],
        deadline: float,
        *,
        url: str | None = None,
        allowed: float | None = None,
    ) -> Any:
        """POST JSON to url+path and return the decoded JSON answer, by `deadline` (monotonic);
        `url`: one of several servers (default: the provider's); `allowed`: the seconds an
        error says the call had (default: timeout_s). A 503 with Retry-After is asked again
        after it while the deadline allows."""
        target = (url or self.url) + path
        if self.api_key_env and not self._api_key:
            raise self.unavailable(
                f"{target}: environment variable {self.api_key_env} (api_key_env) is not set"
            )
        while True:
            remaining = deadline - time.monotonic()
            outcome = _Exchange(allowed=self.timeout_s if allowed is None else allowed)
            if remaining <= 0:
                raise self.unavailable(f"{target}: no answer within {outcome.allowed:g} s")
            worker = threading.Thread(
                target=self._exchange,
                args=(target, body, deadline, outcome),
                name="metis-model-call",
                daemon=True,
            )
            worker.start()
            worker.join(remaining)
            if worker.is_alive():
                outcome.abandoned = True
                raise self.unavailable(f"{target}: no complete answer within {outcome.allowed:g} s")
            if isinstance(outcome.error, _Busy):
                if time.monotonic() + outcome.error.wait >= deadline:
                    raise outcome.error.refusal
                time.sleep(outcome.error.wait)
                continue
            if outcome.error is not None:
                raise outcome.error
            return outcome.answer

    def _exchange(self, target: str, body: dict[str, Any], deadline: float, out: _Exchange) -> None:
        """The worker: one request, the body read with a time check, every failure classified."""
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            timeout = max(deadline - time.monotonic(), 0.001)
            with self._client.stream(
                "POST", target, json=body, headers=headers, timeout=timeout
            ) as response:
                raw = self._read(response, target, deadline, out)
                if response.status_code == 413:
                    raise _TooMuch(self.unavailable(_refusal(target, response, raw)))
                wait = _retry_after(response) if response.status_code == 503 else None
                if wait is not None:
                    raise _Busy(self.unavailable(_refusal(target, response, raw)), wait)
                if not 200 <= response.status_code < 300:
                    raise self.unavailable(_refusal(target, response, raw))
            out.answer = decoded(raw, target)
        except httpx.TimeoutException:
            out.error = self.unavailable(f"{target}: no answer within {out.allowed:g} s")
        except httpx.ConnectError as exc:
            out.error = self.unavailable(f"{target}: cannot connect ({_reason(exc)})")
        except httpx.RemoteProtocolError as exc:
            out.error = self.unavailable(f"{target}: connection dropped ({_reason(exc)})")
        except httpx.ReadError as exc:
            out.error = self.unavailable(f"{target}: connection reset ({_reason(exc)})")
        except httpx.HTTPError as exc:
            out.error = self.unavailable(f"{target}: {type(exc).__name__} ({_reason(exc)})")
        except Exception as exc:  # carried across the thread boundary, raised by the caller
            out.error = exc

    def _read(
        self, response: httpx.Response, target: str, deadline: float, out: _Exchange
    ) -> bytes:
        parts: list[bytes] = []
        size = 0
        for part in response.iter_bytes():
            if out.abandoned or time.monotonic() > deadline:
                raise self.unavailable(f"{target}: no complete answer within {out.allowed:g} s")
            size += len(part)
            if size > MAX_ANSWER_BYTES:
                raise ModelAnswerInvalid(f"{target}: answer larger than {MAX_ANSWER_BYTES} bytes")
            parts.append(part)
        return b"".join(parts)


class _HttpEmbedder(_HttpProvider):
    """Batching, validation and L2 normalisation shared by the three embedding protocols."""

    unavailable = EmbeddingModelUnavailable
    path = ""
    protocol = "http"

    def __init__(
        self,
        url: str,
        *,
        dimension: int | None = None,
        urls: Sequence[str] | None = None,
        **options: Any,
    ) -> None:
        if dimension is not None and (
            not isinstance(dimension, int) or isinstance(dimension, bool) or dimension < 1
        ):
            raise InvalidRequest(f"dimension must be a positive integer, not {dimension!r}")
        super().__init__(url, **options)
        self.expected_dimension = dimension
        self.dimension: int | None = dimension
        """The vectors' length: the expected one, else the first answer's, else None."""
        self.name = provider_name(self.protocol, self.url, self.model)
        self.urls = list(dict.fromkeys([self.url, *(check_url(u).rstrip("/") for u in urls or ())]))
        """Every server of the model, `url` first: the name stays `url`'s whichever answers."""
        self._learning = threading.Lock()  # two servers' first answers, the dimension learnt once
        self._pool = ServerPool(
            self.urls, batch=self.batch_size, timeout_s=self.timeout_s, send=self._embed_on
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 (len(texts), dimension), rows L2-normalised; one call per batch_size texts,
        each within timeout_s, on the fastest server that answers."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension or 0), dtype=np.float32)
        return self._pool.ask(texts)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """As `embed`, for an index run: spread over every server, each piece with a deadline
        that grows with its texts, the pieces' size following each server's pace."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension or 0), dtype=np.float32)
        return self._pool.spread(texts)

    def _embed_on(self, url: str, batch: list[str], deadline: float) -> np.ndarray:
        """One request to `url` by `deadline`; refused as too much (413), two halves."""
        target = url + self.path
        allowed = round(deadline - time.monotonic(), 1)
        try:
            answer = self._post(self.path, self._request(batch), deadline, url=url, allowed=allowed)
        except _TooMuch as refused:
            if len(batch) == 1:
                raise refused.refusal from None
            half = len(batch) // 2
            return np.concatenate(
                [
                    self._embed_on(url, batch[:half], deadline),
                    self._embed_on(url, batch[half:], deadline),
                ]
            )
        rows = self._rows(answer, len(batch), target)
        return self._check(rows, len(batch), target)

    def _request(self, batch: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def _rows(self, answer: Any, n: int, target: str) -> Any:
        raise NotImplementedError

    def _check(self, rows: Any, n: int, target: str) -> np.ndarray:
        """Rows → checked, normalised float32 matrix; learns the dimension from the first answer."""
        if not isinstance(rows, list):
            raise ModelAnswerInvalid(f"{target}: expected a list of vectors, got {kind_of(rows)}")
        if len(rows) != n:
            raise ModelAnswerInvalid(f"{target}: {len(rows)} vectors for {n} texts")
        matrix = matrix_of(rows, target)
        width = matrix.shape[1]
        if self.dimension is not None and width != self.dimension:
            what = "expected" if self.expected_dimension else "earlier answers had"
            raise ModelAnswerInvalid(
                f"{target}: vectors of dimension {width}, {what} {self.dimension}"
            )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not np.all(norms > 0):
            raise ModelAnswerInvalid(f"{target}: a vector of zeros cannot be normalised")
        with self._learning:
            if self.dimension is not None and width != self.dimension:
                raise ModelAnswerInvalid(
                    f"{target}: vectors of dimension {width}, other servers' had {self.dimension}"
                )
            self.dimension = width
        return (matrix / norms).astype(np.float32)


class OpenAIEmbedder(_HttpEmbedder):
    """OpenAI-compatible `POST {url}/embeddings` (vLLM, llama.cpp, Infinity, Ollama, hosted)."""

    path = "/embeddings"
    protocol = "openai"

    def __init__(self, url: str, *, model: str, **options: Any) -> None:
        super().__init__(url, model=model, **options)

    def _request(self, batch: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": batch, "encoding_format": "float"}

    def _rows(self, answer: Any, n: int, target: str) -> Any:
        data = field_of(answer, "data", list, target)
        items = [an_object(entry, target) for entry in data]
        indexes = [field_of(item, "index", int, target) for item in items]
        order = checked_indexes(indexes, n, target, "vectors")
        by_index = dict(zip(order, items, strict=True))
        return [field_of(by_index[i], "embedding", list, target) for i in range(len(items))]


class TEIEmbedder(_HttpEmbedder):
    """Hugging Face text-embeddings-inference `POST {url}/embed`."""

    path = "/embed"
    protocol = "tei"
    batch_default = TEI_BATCH

    def _request(self, batch: list[str]) -> dict[str, Any]:
        return {"inputs": batch, "normalize": True, "truncate": True}

    def _rows(self, answer: Any, n: int, target: str) -> Any:
        if not isinstance(answer, list):
            raise ModelAnswerInvalid(f"{target}: expected a list of vectors, got {kind_of(answer)}")
        return answer


class OllamaEmbedder(_HttpEmbedder):
    """Ollama's own `POST {url}/api/embed` (its OpenAI API is served by OpenAIEmbedder too)."""

    path = "/api/embed"
    protocol = "ollama"

    def __init__(self, url: str, *, model: str, **options: Any) -> None:
        super().__init__(url, model=model, **options)

    def _request(self, batch: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": batch}

    def _rows(self, answer: Any, n: int, target: str) -> Any:
        return field_of(answer, "embeddings", list, target)


class _HttpReranker(_HttpProvider):
    """Batching and index checks shared by the two rerank protocols; one deadline per score()."""

    unavailable = RerankerUnavailable
    path = "/rerank"
    protocol = "http"

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.name = provider_name(self.protocol, self.url, self.model)

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """One score per passage, in the passages' order; all batches within one timeout_s."""
        passages = list(passages)
        deadline = time.monotonic() + self.timeout_s
        scores: list[float] = []
        for start in range(0, len(passages), self.batch_size):
            batch = passages[start : start + self.batch_size]
            scores.extend(self._score_batch(question, batch, deadline))
        return scores

    def _score_batch(self, question: str, batch: list[str], deadline: float) -> list[float]:
        """One request; refused as too much (413), two halves, within the same deadline."""
        target = self.url + self.path
        try:
            answer = self._post(self.path, self._request(question, batch), deadline)
        except _TooMuch as refused:
            if len(batch) == 1:
                raise refused.refusal from None
            half = len(batch) // 2
            first = self._score_batch(question, batch[:half], deadline)
            return first + self._score_batch(question, batch[half:], deadline)
        pairs = [self._pair(entry, target) for entry in self._results(answer, target)]
        order = checked_indexes([index for index, _ in pairs], len(batch), target, "scores")
        by_index = dict(zip(order, (value for _, value in pairs), strict=True))
        return [by_index[i] for i in range(len(batch))]

    def _request(self, question: str, batch: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def _results(self, answer: Any, target: str) -> list[Any]:
        raise NotImplementedError

    score_field = "score"

    def _pair(self, entry: Any, target: str) -> tuple[int, float]:
        item = an_object(entry, target)
        value = field_of(item, self.score_field, (int, float), target)
        if not math.isfinite(value):
            raise ModelAnswerInvalid(f"{target}: a score is not a finite number")
        return field_of(item, "index", int, target), float(value)


class TEIReranker(_HttpReranker):
    """Hugging Face text-embeddings-inference `POST {url}/rerank`; scores are sigmoid'd logits."""

    protocol = "tei"
    batch_default = TEI_BATCH

    def _request(self, question: str, batch: list[str]) -> dict[str, Any]:
        return {"query": question, "texts": batch, "raw_scores": False}

    def _results(self, answer: Any, target: str) -> list[Any]:
        if not isinstance(answer, list):
            raise ModelAnswerInvalid(f"{target}: expected a list of ranks, got {kind_of(answer)}")
        return answer


class CohereReranker(_HttpReranker):
    """Cohere/Jina-style `POST {url}/rerank` (vLLM, llama.cpp, Infinity, Jina, Cohere)."""

    protocol = "cohere"
    batch_default = COHERE_BATCH
    score_field = "relevance_score"

    def __init__(self, url: str, *, model: str, **options: Any) -> None:
        super().__init__(url, model=model, **options)

    def _request(self, question: str, batch: list[str]) -> dict[str, Any]:
        return {"model": self.model, "query": question, "documents": batch, "top_n": len(batch)}

    def _results(self, answer: Any, target: str) -> list[Any]:
        return field_of(answer, "results", list, target)


def _read_key(env_name: str | None) -> str | None:
    if not env_name:
        return None
    return os.environ.get(env_name) or None


def _refusal(target: str, response: httpx.Response, raw: bytes) -> str:
    """'url: HTTP 503 Service Unavailable: <the server's own error message>'."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        detail = json.loads(text)
    except ValueError:
        detail = text
    if isinstance(detail, dict):
        inner = detail.get("error", detail.get("message", detail.get("detail", detail)))
        detail = inner.get("message", inner) if isinstance(inner, dict) else inner
    said = str(detail)[:ERROR_SNIPPET_CHARS] if detail else ""
    status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
    retry = response.headers.get("Retry-After")
    return (
        f"{target}: {status}"
        + (f": {said}" if said else "")
        + (f" (retry after {retry} s)" if retry else "")
    )


def _retry_after(response: httpx.Response) -> float | None:
    """A Retry-After given in seconds (a date is not waited for), at least RETRY_AFTER_MIN_S."""
    said = response.headers.get("Retry-After", "").strip()
    if not said.isdigit():
        return None
    return max(float(said), RETRY_AFTER_MIN_S)


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
