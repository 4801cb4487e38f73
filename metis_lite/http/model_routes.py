"""The model server's routes (`metis-lite models serve`): one embedding model, and a reranker,
served over the protocols each client already speaks (copies in tests/fixtures/protocols/):

    POST /embed         text-embeddings-inference  {inputs, normalize, truncate} → [[float]]
    POST /v1/embeddings OpenAI                     {input, model, encoding_format} → {data: [...]}
    GET  /v1/models     OpenAI                     the models served here
    POST /api/embed     Ollama                     {model, input} → {embeddings: [[float]]}
    POST /rerank        text-embeddings-inference  {query, texts, raw_scores} → [{index, score}]
    POST /v1/rerank     Cohere/Jina (also /v2/rerank) {model, query, documents, top_n}
                                                   → {results: [{index, relevance_score}]}
    GET  /health        {"status": "ok", ...}

Vectors are the served model's, L2-normalised (a request for unnormalised vectors gets them
normalised all the same). Rerank scores are the cross-encoder's logits when a TEI client asks
for raw_scores, else their sigmoid (as TEI and the Cohere-style servers answer). A request that
names a model must name the one served here (its name, or the last part of a hub id such as
"sentence-transformers/all-MiniLM-L6-v2"), so a base never records one model's vectors under
another's name. Every refusal, the server's own too (408, 411, 413, 503), is JSON in the
protocol's own shape with a fitting status (400, 403, 404, 405, 411, 413, 415, 422), never a
traceback; one model call runs at a time per model. The HTTP is server.py's, kept alive between
requests.

A web page must not be able to use it (a page may send requests to 127.0.0.1), so it is held to
`serve`'s checks: bound to loopback, it answers only a Host that names loopback (a page whose
own domain resolves to 127.0.0.1 sends that domain: 403); a POST from another site's page (its
Origin) is 403, and a POST body that is not `application/json` is 415 — the only kinds a page
can send without the browser asking first. Every answer carries wire.SECURITY_HEADERS.

One request may hand the tokenizer at most MAX_REQUEST_CHARS characters and ask for at most
MAX_REQUEST_TOKENS tokens of work: the texts' tokens as the model reads them (after its
truncation; a rerank counts each question-and-passage pair), counted before the model runs and
answered 413 past it, so that no request, however legal its shape, holds a model for long. The
HTTP providers (models/http.py) halve a batch that is refused so.
"""

from __future__ import annotations

import base64
import json
import math
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from metis_lite.errors import MetisError, ModelAnswerInvalid
from metis_lite.http.server import Limits
from metis_lite.http.wire import (
    SECURITY_HEADERS,
    Head,
    HttpError,
    Request,
    Response,
    check_json_body,
    check_same_origin,
)
from metis_lite.models.base import Embedder, Reranker
from metis_lite.service.access import host_is_loopback_name

MAX_REQUEST_BYTES = 2 * 1024 * 1024
"""A request body larger than this is refused with 413 before it is read: TEI's own default
limit (2 MB; MAX_REQUEST_CHARS bounds what of it is read as text)."""

MAX_INPUTS = 1024
"""Texts (or rerank documents) per request; more is refused with 413."""

MAX_REQUEST_TOKENS = 8192
"""Tokens of work one embed or rerank request may ask for (after truncation), else 413. The
embedded multilingual-e5-small takes 4.4 s of CPU for 8,192 tokens (16 texts of 512, measured
on the 2-core development machine), so no request costs more; the indexer's batch, 32 chunks of
1,200 characters (~300 tokens each), goes as two requests. Without the bound one legal request
of 1,024 long texts (524,288 tokens) held the model for six minutes."""

MAX_REQUEST_CHARS = 128 * 1024
"""Characters of text one request may hand the tokenizer (a rerank: each pair's question and
passage), else 413 before any is read. Tokenizing costs up to ~3 µs a character (one long
word, or CJK), and each text is tokenized twice (counted, then embedded): at most ~0.8 s of CPU.
It holds what the model reads many times over (16 texts of 512 tokens are ~32,000 characters of
English), and one chunk of the largest chunk size a base takes (100,000 characters)."""

COUNT_BATCH = 32
"""Texts tokenized at a time while counting, so that a request far past the bound is refused
after its first few texts, not after all of them."""

READ_TIMEOUT_S = 30.0
"""A request must arrive whole within this long (2 MB from a slow client)."""

MODEL_WORKERS = 8
"""Requests handled at once; each model still runs one call at a time (its lock)."""

LIMITS = Limits(
    workers=MODEL_WORKERS,
    request_timeout_s=READ_TIMEOUT_S,
    max_body_bytes=MAX_REQUEST_BYTES,
    keep_alive=True,
    keep_alive_s=READ_TIMEOUT_S,
)
"""The model server's limits: bases and their indexers reuse connections (kept alive while
idle up to READ_TIMEOUT_S, as http.server's socket timeout did before)."""

# -- error shapes, one per protocol ---------------------------------------------------------


def _tei_error(status: int, message: str) -> Any:
    kind = {413: "validation", 422: "validation", 400: "validation"}.get(status, "backend")
    return {"error": message, "error_type": kind}


def _openai_error(status: int, message: str) -> Any:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _ollama_error(status: int, message: str) -> Any:
    return {"error": message}


def _cohere_error(status: int, message: str) -> Any:
    return {"message": message}


def _metis_error(status: int, message: str) -> Any:
    return {"error": {"code": f"HTTP_{status}", "message": message}}


# -- the models behind the routes -----------------------------------------------------------


class ModelService:
    """The served models and what each protocol asks of them; no HTTP here."""

    def __init__(self, embedder: Embedder, reranker: Reranker | None = None) -> None:
        self.embedder = embedder
        self.reranker = reranker
        self._embed_lock = threading.Lock()
        self._rerank_lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        _check_work(texts, getattr(self.embedder, "token_counts", None), sum(map(len, texts)))
        with self._embed_lock:
            vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        if vectors.shape[:1] != (len(texts),) or not np.all(np.isfinite(vectors)):
            raise ModelAnswerInvalid("the model made no finite vector for every text")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    def score(self, query: str, passages: list[str]) -> list[float]:
        if self.reranker is None:
            raise HttpError(404, "no reranker is served here (start it with --reranker-path)")
        counts = getattr(self.reranker, "token_counts", None)
        chars = len(query) * len(passages) + sum(map(len, passages))
        _check_work(passages, None if counts is None else lambda part: counts(query, part), chars)
        with self._rerank_lock:
            scores = [float(value) for value in self.reranker.score(query, passages)]
        if len(scores) != len(passages) or not all(math.isfinite(value) for value in scores):
            raise ModelAnswerInvalid("the reranker made no finite score for every passage")
        return scores

    # TEI ---------------------------------------------------------------------------------

    def tei_embed(self, body: dict[str, Any]) -> Any:
        texts = _texts(body, "inputs", single=True, status=422)
        return self.embed(texts).tolist()

    def tei_rerank(self, body: dict[str, Any]) -> Any:
        query = _string(body, "query", 422)
        texts = _texts(body, "texts", single=False, status=422)
        raw = _flag(body, "raw_scores", False, 422)
        with_text = _flag(body, "return_text", False, 422)
        scores = self.score(query, texts)
        ranks = []
        for index in _by_score(scores):
            rank: dict[str, Any] = {
                "index": index,
                "score": scores[index] if raw else _sigmoid(scores[index]),
            }
            if with_text:
                rank["text"] = texts[index]
            ranks.append(rank)
        return ranks

    # OpenAI ------------------------------------------------------------------------------

    def openai_embeddings(self, body: dict[str, Any]) -> Any:
        self._check_model(body, self.embedder.name, required=False)
        texts = _texts(body, "input", single=True, status=400)
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise HttpError(400, f"encoding_format must be 'float' or 'base64', not {encoding!r}")
        vectors = self.embed(texts)
        dimensions = body.get("dimensions")
        if dimensions is not None and dimensions != vectors.shape[1]:
            raise HttpError(400, f"this model makes {vectors.shape[1]} dimensions only")
        data = [
            {"object": "embedding", "index": i, "embedding": _encoded(row, encoding)}
            for i, row in enumerate(vectors)
        ]
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return {"object": "list", "data": data, "model": self.embedder.name, "usage": usage}

    def openai_models(self, body: dict[str, Any]) -> Any:
        served = [self.embedder] + ([self.reranker] if self.reranker is not None else [])
        data = [
            {"id": model.name, "object": "model", "created": 0, "owned_by": "metis-lite"}
            for model in served
        ]
        return {"object": "list", "data": data}

    # Ollama ------------------------------------------------------------------------------

    def ollama_embed(self, body: dict[str, Any]) -> Any:
        self._check_model(body, self.embedder.name, required=True)
        texts = _texts(body, "input", single=True, status=400)
        started = time.perf_counter_ns()
        vectors = self.embed(texts)
        return {
            "model": self.embedder.name,
            "embeddings": vectors.tolist(),
            "total_duration": time.perf_counter_ns() - started,
            "load_duration": 0,
            "prompt_eval_count": 0,
        }

    # Cohere / Jina -----------------------------------------------------------------------

    def cohere_rerank(self, body: dict[str, Any]) -> Any:
        if self.reranker is None:
            raise HttpError(404, "no reranker is served here (start it with --reranker-path)")
        self._check_model(body, self.reranker.name, required=False)
        query = _string(body, "query", 400)
        documents = _documents(body)
        top_n = body.get("top_n")
        if top_n is None:
            top_n = len(documents)
        if not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1:
            raise HttpError(400, f"top_n must be a positive integer, not {top_n!r}")
        with_documents = _flag(body, "return_documents", False, 400)
        scores = self.score(query, documents)
        results = []
        for index in _by_score(scores)[:top_n]:
            result: dict[str, Any] = {"index": index, "relevance_score": _sigmoid(scores[index])}
            if with_documents:
                result["document"] = {"text": documents[index]}
            results.append(result)
        return {
            "id": str(uuid.uuid4()),
            "model": self.reranker.name,
            "results": results,
            "meta": {
                "api_version": {"version": "2", "is_experimental": False},
                "billed_units": {"search_units": 1},
            },
        }

    # -------------------------------------------------------------------------------------

    def health(self, body: dict[str, Any]) -> Any:
        reranker = self.reranker.name if self.reranker is not None else None
        return {"status": "ok", "embedding": self.embedder.name, "reranker": reranker}

    def _check_model(self, body: dict[str, Any], served: str, *, required: bool) -> None:
        requested = body.get("model")
        if requested is None or requested == "":
            if required:
                raise HttpError(400, "model is required")
            return
        if not isinstance(requested, str):
            raise HttpError(400, f"model must be a string, not {requested!r}")
        if not _same_model(requested, served):
            raise HttpError(
                404, f"model {requested!r} is not served here; this server serves {served!r}"
            )


@dataclass(frozen=True)
class Route:
    """One endpoint: the service method that answers it and its protocol's error shape."""

    method: str
    answer: Callable[[ModelService, dict[str, Any]], Any]
    error: Callable[[int, str], Any]


ROUTES: dict[str, Route] = {
    "/embed": Route("POST", ModelService.tei_embed, _tei_error),
    "/rerank": Route("POST", ModelService.tei_rerank, _tei_error),
    "/v1/embeddings": Route("POST", ModelService.openai_embeddings, _openai_error),
    "/v1/models": Route("GET", ModelService.openai_models, _openai_error),
    "/api/embed": Route("POST", ModelService.ollama_embed, _ollama_error),
    "/v1/rerank": Route("POST", ModelService.cohere_rerank, _cohere_error),
    "/v2/rerank": Route("POST", ModelService.cohere_rerank, _cohere_error),
    "/health": Route("GET", ModelService.health, _metis_error),
}


# -- request fields -------------------------------------------------------------------------


def _string(body: dict[str, Any], key: str, status: int) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise HttpError(status, f"{key} must be a string")
    return value


def _flag(body: dict[str, Any], key: str, default: bool, status: int) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise HttpError(status, f"{key} must be true or false")
    return value


def _texts(body: dict[str, Any], key: str, *, single: bool, status: int) -> list[str]:
    """A non-empty list of strings (or one string where the protocol allows it)."""
    value = body.get(key)
    if single and isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise HttpError(status, f"{key} must be a list of strings")
    if not value:
        raise HttpError(status, f"{key} must not be empty")
    if len(value) > MAX_INPUTS:
        raise HttpError(413, f"at most {MAX_INPUTS} {key} per request, not {len(value)}")
    if not all(isinstance(text, str) for text in value):
        raise HttpError(status, f"{key} must be strings (token ids are not read here)")
    return value


def _documents(body: dict[str, Any]) -> list[str]:
    """Cohere/Jina documents: strings, or objects with a "text"."""
    value = body.get("documents")
    if not isinstance(value, list) or not value:
        raise HttpError(400, "documents must be a non-empty list")
    if len(value) > MAX_INPUTS:
        raise HttpError(413, f"at most {MAX_INPUTS} documents per request, not {len(value)}")
    texts = []
    for document in value:
        if isinstance(document, dict):
            document = document.get("text")
        if not isinstance(document, str):
            raise HttpError(400, 'each document must be a string or {"text": string}')
        texts.append(document)
    return texts


def _check_work(
    texts: Sequence[str], token_counts: Callable[[Sequence[str]], list[int]] | None, chars: int
) -> None:
    """413 when the request holds more than MAX_REQUEST_CHARS characters to tokenize, or when
    the texts' tokens, as the model reads them, add up past MAX_REQUEST_TOKENS: counted
    COUNT_BATCH texts at a time, stopping as soon as the sum is past. A model that cannot count
    is charged each text's characters and two (a token covers a character at least; the two are
    the model's own markers)."""
    if chars > MAX_REQUEST_CHARS:
        raise HttpError(
            413,
            f"this request holds {chars} characters of text to read, more than the"
            f" {MAX_REQUEST_CHARS} one request may (the model reads only a text's first tokens):"
            " send fewer or shorter texts per request",
        )
    total = 0
    for start in range(0, len(texts), COUNT_BATCH):
        part = texts[start : start + COUNT_BATCH]
        counts = token_counts(part) if token_counts else [len(text) + 2 for text in part]
        total += sum(counts)
        if total > MAX_REQUEST_TOKENS:
            read = start + len(part)
            raise HttpError(
                413,
                f"this request asks for more than {MAX_REQUEST_TOKENS} tokens of work (its first"
                f" {read} of {len(texts)} texts hold {total} as the model reads them): send fewer"
                " or shorter texts per request",
            )


def _same_model(requested: str, served: str) -> bool:
    """'all-MiniLM-L6-v2' is served for 'sentence-transformers/all-MiniLM-L6-v2' too."""

    def forms(name: str) -> set[str]:
        name = name.strip().lower().removesuffix(":latest")
        return {name, name.rsplit("/", 1)[-1]}

    return bool(forms(requested) & forms(served))


def _by_score(scores: Sequence[float]) -> list[int]:
    """Indexes from the best score down; ties keep the passages' order."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])


def _sigmoid(value: float) -> float:
    if value >= 0:
        return 1.0 / (1.0 + math.exp(-value))
    z = math.exp(value)
    return z / (1.0 + z)


def _encoded(row: np.ndarray, encoding: str) -> Any:
    if encoding == "base64":
        return base64.b64encode(row.astype("<f4").tobytes()).decode("ascii")
    return row.tolist()


LOADING_RETRY_S = "1"
"""Retry-After of the 503 every request gets while the model loads (seconds)."""


class ModelApp:
    """The routes over a ModelService (set later by `models serve`, which binds the port first
    and answers 503 with Retry-After until the model is loaded).

    `loopback`: the server listens on loopback only, so a request must name it by a loopback
    Host (what a page that rebinds its own domain to 127.0.0.1 cannot send)."""

    def __init__(self, service: ModelService | None, *, loopback: bool = True) -> None:
        self.service = service
        self.loopback = loopback

    def handle(self, request: Request) -> Response:
        path = request.path.rstrip("/") or "/"
        route = ROUTES.get(path)
        shape = route.error if route is not None else _metis_error
        if self.loopback and not host_is_loopback_name(request.header("host")):
            return _json(403, shape(403, "this server answers only requests to a loopback name"))
        if route is None:
            return _json(404, _metis_error(404, f"no such endpoint: {path}"))
        if request.method not in ("GET", "POST"):
            return _json(501, route.error(501, f"{request.method} is not spoken here"))
        if route.method != request.method:
            shaped = route.error(405, f"{path} takes {route.method}")
            return _json(405, shaped, (("Allow", route.method),))
        if self.service is None:  # bound, the model still loading: a client waits, not fails
            said = route.error(503, "the model is loading: try again in a moment")
            return _json(503, said, (("Retry-After", LOADING_RETRY_S),))
        try:
            if request.method == "POST":
                check_same_origin(request)
                check_json_body(request)
            body = _body(request) if request.method == "POST" else {}
            answer = route.answer(self.service, body)
        except MetisError as exc:  # HttpError (a bad request) among them
            return _json(exc.status, route.error(exc.status, exc.message))
        except Exception:  # the client gets a JSON 500; the operator gets the traceback
            traceback.print_exc(file=sys.stderr)
            return _json(500, route.error(500, "internal error (see the model server's log)"))
        return _json(200, answer)

    def refuse(
        self, status: int, message: str, head: Head | None, headers: tuple[tuple[str, str], ...]
    ) -> Response:
        route = ROUTES.get((head.path.rstrip("/") or "/") if head else "")
        shaped = route.error(status, message) if route else _metis_error(status, message)
        return _json(status, shaped, headers)


def _json(status: int, answer: Any, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    try:
        data = json.dumps(answer, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate sent back (return_text): escape it instead
        data = json.dumps(answer, allow_nan=False).encode("utf-8")
    return Response(
        status, data, (("Content-Type", "application/json"), *SECURITY_HEADERS, *headers)
    )


def _body(request: Request) -> dict[str, Any]:
    if not request.has_length:
        raise HttpError(411, "a request body needs a Content-Length")
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise HttpError(400, f"the body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a JSON object")
    return body
