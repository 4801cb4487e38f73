"""`models serve`: one process serves an embedding model (and a reranker) to many bases.

Standard library only (`http.server.ThreadingHTTPServer`), loopback by default. The protocols,
as each is documented (copies in tests/fixtures/protocols/):

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
another's name. Bad requests get a JSON error in the protocol's own shape with a fitting status
(400, 404, 405, 411, 413, 422), never a traceback; one model call runs at a time per model.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from metis_lite import settings
from metis_lite.errors import MetisError, ModelAnswerInvalid
from metis_lite.models.base import Embedder, Reranker

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8089

MAX_REQUEST_BYTES = 8 * 1024 * 1024
"""A request body larger than this is refused with 413 before it is read."""

MAX_INPUTS = 1024
"""Texts (or rerank documents) per request; more is refused with 413."""

READ_TIMEOUT_S = 30.0
"""A client that stops sending in the middle of a request is dropped after this long."""

LOOPBACK = ("127.0.0.1", "::1", "localhost")


class BadRequest(Exception):
    """A request this server will not answer: its HTTP status and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


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
        with self._embed_lock:
            vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        if vectors.shape[:1] != (len(texts),) or not np.all(np.isfinite(vectors)):
            raise ModelAnswerInvalid("the model made no finite vector for every text")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)

    def score(self, query: str, passages: list[str]) -> list[float]:
        if self.reranker is None:
            raise BadRequest(404, "no reranker is served here (start it with --reranker-path)")
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
            raise BadRequest(400, f"encoding_format must be 'float' or 'base64', not {encoding!r}")
        vectors = self.embed(texts)
        dimensions = body.get("dimensions")
        if dimensions is not None and dimensions != vectors.shape[1]:
            raise BadRequest(400, f"this model makes {vectors.shape[1]} dimensions only")
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
            raise BadRequest(404, "no reranker is served here (start it with --reranker-path)")
        self._check_model(body, self.reranker.name, required=False)
        query = _string(body, "query", 400)
        documents = _documents(body)
        top_n = body.get("top_n")
        if top_n is None:
            top_n = len(documents)
        if not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1:
            raise BadRequest(400, f"top_n must be a positive integer, not {top_n!r}")
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
                raise BadRequest(400, "model is required")
            return
        if not isinstance(requested, str):
            raise BadRequest(400, f"model must be a string, not {requested!r}")
        if not _same_model(requested, served):
            raise BadRequest(
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


# -- HTTP -----------------------------------------------------------------------------------


class ModelServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that holds a ModelService; `url` is where it listens.

    `service` may be set after binding (main() takes the port before loading the models), but
    before serving."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], service: ModelService | None, *, verbose: bool
    ) -> None:
        self.service = service
        self.verbose = verbose
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "metis-lite-models"
    timeout = READ_TIMEOUT_S
    server: ModelServer

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        self._body_read = False
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        route = ROUTES.get(path)
        if route is None:
            self._send(404, _metis_error(404, f"no such endpoint: {path}"))
            return
        if route.method != method:
            self._send(405, route.error(405, f"{path} takes {route.method}"), allow=route.method)
            return
        try:
            body = self._body() if method == "POST" else {}
            answer = route.answer(self.server.service, body)
        except BadRequest as exc:
            self._send(exc.status, route.error(exc.status, exc.message))
            return
        except MetisError as exc:
            self._send(exc.status, route.error(exc.status, exc.message))
            return
        except Exception:  # the client gets a JSON 500; the operator gets the traceback
            traceback.print_exc(file=sys.stderr)
            self._send(500, route.error(500, "internal error (see the model server's log)"))
            return
        self._send(200, answer)

    def _body(self) -> dict[str, Any]:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise BadRequest(411, "send the body with a Content-Length (chunked is not read)")
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            raise BadRequest(411, "a request body needs a Content-Length")
        try:
            length = int(length_header)
        except ValueError:
            self.close_connection = True
            raise BadRequest(400, f"bad Content-Length {length_header!r}") from None
        if length < 0 or length > MAX_REQUEST_BYTES:
            self.close_connection = True
            raise BadRequest(413, f"request larger than {MAX_REQUEST_BYTES} bytes")
        raw = self.rfile.read(length)
        if len(raw) < length:
            self.close_connection = True
            raise BadRequest(400, "the request body ended early")
        self._body_read = True
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(400, f"the body is not valid JSON ({exc})") from None
        if not isinstance(body, dict):
            raise BadRequest(400, "the body must be a JSON object")
        return body

    def _send(self, status: int, answer: Any, *, allow: str | None = None) -> None:
        data = json.dumps(answer, ensure_ascii=False, allow_nan=False).encode("utf-8")
        if not getattr(self, "_body_read", False) and self._has_body():
            self.close_connection = True  # an unread body must not be taken for the next request
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if allow:
            self.send_header("Allow", allow)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _has_body(self) -> bool:
        headers = getattr(self, "headers", None)
        if headers is None:
            return False
        return headers.get("Content-Length", "0") not in ("", "0") or "Transfer-Encoding" in headers

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (a malformed request line, an unknown method) as JSON."""
        self.close_connection = True
        try:
            self._send(code, _metis_error(code, message or self.responses.get(code, ("",))[0]))
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")


# -- request fields -------------------------------------------------------------------------


def _string(body: dict[str, Any], key: str, status: int) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise BadRequest(status, f"{key} must be a string")
    return value


def _flag(body: dict[str, Any], key: str, default: bool, status: int) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(status, f"{key} must be true or false")
    return value


def _texts(body: dict[str, Any], key: str, *, single: bool, status: int) -> list[str]:
    """A non-empty list of strings (or one string where the protocol allows it)."""
    value = body.get(key)
    if single and isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise BadRequest(status, f"{key} must be a list of strings")
    if not value:
        raise BadRequest(status, f"{key} must not be empty")
    if len(value) > MAX_INPUTS:
        raise BadRequest(413, f"at most {MAX_INPUTS} {key} per request, not {len(value)}")
    if not all(isinstance(text, str) for text in value):
        raise BadRequest(status, f"{key} must be strings (token ids are not read here)")
    return value


def _documents(body: dict[str, Any]) -> list[str]:
    """Cohere/Jina documents: strings, or objects with a "text"."""
    value = body.get("documents")
    if not isinstance(value, list) or not value:
        raise BadRequest(400, "documents must be a non-empty list")
    if len(value) > MAX_INPUTS:
        raise BadRequest(413, f"at most {MAX_INPUTS} documents per request, not {len(value)}")
    texts = []
    for document in value:
        if isinstance(document, dict):
            document = document.get("text")
        if not isinstance(document, str):
            raise BadRequest(400, 'each document must be a string or {"text": string}')
        texts.append(document)
    return texts


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


# -- entry points ---------------------------------------------------------------------------


def make_server(
    embedder: Embedder,
    reranker: Reranker | None = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    verbose: bool = False,
) -> ModelServer:
    """A bound, not yet serving, server (port 0 picks a free port: see `.url`)."""
    return ModelServer((host, port), ModelService(embedder, reranker), verbose=verbose)


def serve_models(
    embedder: Embedder,
    reranker: Reranker | None = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    verbose: bool = False,
) -> None:
    """Serve until interrupted; prints one line with the url (and the port chosen for port 0)."""
    _run(make_server(embedder, reranker, host=host, port=port, verbose=verbose))


def _run(server: ModelServer) -> None:
    host = server.server_address[0]
    if host not in LOOPBACK:
        print(
            f"warning: serving on {host}, not loopback: whoever reaches it can use the models",
            file=sys.stderr,
        )
    service = server.service
    served = service.embedder.name
    if service.reranker is not None:
        served += f" and reranker {service.reranker.name}"
    print(f"metis-lite models: serving {served} on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m metis_lite.models.server [--embedding-model NAME | --embedding-path PATH]
    --reranker-path DIR --port N` (default: the embedded default model, multilingual-e5-small).

    The port is taken before the models load, so a busy port is said at once."""
    parser = argparse.ArgumentParser(
        prog="python -m metis_lite.models.server",
        description="Serve the embedded model (and a cross-encoder) over the TEI, OpenAI, "
        "Ollama and Cohere/Jina protocols.",
        epilog="example: python -m metis_lite.models.server --port 8089",
    )
    parser.add_argument(
        "--embedding-model",
        choices=settings.EMBEDDED_MODELS,
        help=f"a shipped model by name (default {settings.EMBEDDED_MODEL})",
    )
    parser.add_argument(
        "--embedding-path",
        help="a local model folder or e5-small-q4.bin (instead of --embedding-model)",
    )
    parser.add_argument("--reranker-path", help="local cross-encoder folder (default: none)")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"default {DEFAULT_HOST}")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 picks one"
    )
    parser.add_argument("--verbose", action="store_true", help="log every request on stderr")
    args = parser.parse_args(argv)

    from metis_lite.models import registry

    try:
        server = ModelServer((args.host, args.port), None, verbose=args.verbose)
    except OSError as exc:
        print(
            f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    try:
        shipped = args.embedding_model or (None if args.embedding_path else settings.EMBEDDED_MODEL)
        embedder = registry.embedder_from_spec(
            {"provider": "embedded", "path": args.embedding_path, "model": shipped}
        )
        reranker = (
            registry.reranker_from_spec({"provider": "embedded", "path": args.reranker_path})
            if args.reranker_path
            else None
        )
    except (MetisError, OSError) as exc:
        server.server_close()
        said = f"{exc.code}: {exc.message}" if isinstance(exc, MetisError) else str(exc)
        print(f"error: cannot load the model: {said}", file=sys.stderr)
        return 1
    server.service = ModelService(embedder, reranker)
    signal.signal(signal.SIGTERM, _interrupt)
    _run(server)
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
