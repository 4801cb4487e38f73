"""The index service's routes (`metis-lite serve`): the JSON API over a Service, and the console.

    GET    /v1/health                                  {"status", "version", "open", …}  no token
    GET    /v1/bases                                   {"bases": [status, …]}   those a token sees
    POST   /v1/bases/{name}/search                     the CLI's --json answer
    POST   /v1/search                                  several bases, merged (multi.py)
    POST   /v1/bases/{name}/index                      202 {"state": "Indexing"}; 409 BASE_BUSY
    POST   /v1/bases/{name}/facts                      201 the fact as stored
    GET    /v1/bases/{name}/facts?offset&limit&holding a page of facts
    GET    /v1/bases/{name}/sources                    {"sources": [{name, path, documents, …}]}
    DELETE /v1/bases/{name}/sources/{source}           {"source", "documents"}: what was removed
    GET    /v1/bases/{name}/documents/{source}/{path}  the document's own file (read-only)
    POST   /mcp                                        the agent tools (the MCP transport handed in)
    GET    /                                           the console (metis_lite/console/)

The contract is openapi.yaml at the repository root (docs/api.md explains it). Each route runs
on a worker with the whole request in hand: it checks the Host (without tokens, a loopback
name only), the token, the Origin of a write (a foreign one is 403), the body's type (JSON
only: 415), then parses the body into its one type (messages.py) and answers from the Service.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metis_lite import __version__
from metis_lite.errors import AccessError, BaseNotFound, Forbidden, MetisError
from metis_lite.http.messages import (
    FactBody,
    FactsQuery,
    IndexBody,
    SearchBasesBody,
    SearchBody,
    decode,
    decode_query,
)
from metis_lite.http.static import HTML_CSP, StaticFolder
from metis_lite.http.wire import (
    JSON_TYPE,
    SECURITY_HEADERS,
    Head,
    HttpError,
    Request,
    Response,
    check_json_body,
    check_same_origin,
    encode_json,
    error_body,
    segment,
)
from metis_lite.service.access import ALL_BASES, OPEN, Grant, Tokens, host_is_loopback_name, may
from metis_lite.service.bases import Service
from metis_lite.service.serialize import (
    answer_to_json,
    fact_to_json,
    facts_page_to_json,
    health_to_json,
    multi_answer_to_json,
    source_to_json,
    status_to_json,
    unavailable_to_json,
)

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"

JSON_CSP = "default-src 'none'; frame-ancestors 'none'"
DOCUMENT_CSP = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"
"""A document's HTML is shown as a page of no origin: no script, no form, no request home."""


McpFactory = Callable[[Mapping[str, Any], Callable[[], AbstractContextManager[None]]], Any]
"""Makes the MCP transport over the served bases (mcp_server.McpHttp, handed in by http/run.py,
so that the routes do not import an edge above them), with what holds a read-only service's
copies open for each tool call to its end; it raises ImportError without the SDK."""

DOCUMENTS_AT_ONCE = 4
"""Documents read back at once: each is read whole into memory (up to 64 MiB) by its worker
before the server writes it, so a flood of requests for a large one would otherwise hold a copy
per worker; one more is answered 503 at once (what the server then holds for clients that do
not read is bounded by the server itself: server.py)."""

WRITES = ("POST", "PUT", "PATCH", "DELETE")
"""Methods that change something: their Origin, when sent, must be the service's own."""


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    answer: Callable[..., Response]
    token: bool = True


def _pattern(template: str) -> re.Pattern[str]:
    """`/v1/bases/{name}/documents/{source}/{path*}` as a regex over the raw path."""
    out = re.sub(r"\{\w+\*\}", "(.+)", re.sub(r"\{\w+\}", "([^/]+)", template))
    return re.compile(out)


def json_response(
    status: int, value: object, headers: tuple[tuple[str, str], ...] = ()
) -> Response:
    return Response(status, encode_json(value), _json_headers(headers))


class ServiceApp:
    """The routes of the index service over a Service, each checked for its token."""

    def __init__(
        self,
        service: Service,
        tokens: Tokens,
        *,
        console_dir: Path = CONSOLE_DIR,
        mcp: McpFactory | None = None,
    ) -> None:
        self.service = service
        self.tokens = tokens
        self.console = StaticFolder(console_dir)
        self._mcp_factory = mcp
        self._mcp: Any = None
        self._mcp_lock = threading.Lock()
        self._documents = threading.BoundedSemaphore(DOCUMENTS_AT_ONCE)
        self.routes = tuple(
            Route(method, _pattern(template), getattr(self, name), token)
            for method, template, name, token in (
                ("GET", "/v1/health", "health", False),
                ("GET", "/v1/bases", "list_bases", True),
                ("POST", "/v1/search", "search_many", True),
                ("POST", "/v1/bases/{name}/search", "search_base", True),
                ("POST", "/v1/bases/{name}/index", "index_base", True),
                ("POST", "/v1/bases/{name}/facts", "add_fact", True),
                ("GET", "/v1/bases/{name}/facts", "list_facts", True),
                ("GET", "/v1/bases/{name}/sources", "list_sources", True),
                ("DELETE", "/v1/bases/{name}/sources/{source}", "remove_source", True),
                ("GET", "/v1/bases/{name}/documents/{source}/{path*}", "document", True),
                ("POST", "/mcp", "mcp", True),
                ("GET", "/mcp", "mcp", True),
                ("DELETE", "/mcp", "mcp", True),
            )
        )

    def close(self) -> None:
        """Stop the MCP transport, when a request started it (the bases are the Service's)."""
        with self._mcp_lock:
            if self._mcp is not None:
                self._mcp.close()
                self._mcp = None

    # -- the App protocol -----------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        try:
            with self.service.request():  # a read-only service's copies stay open meanwhile
                return self._route(request)
        except MetisError as exc:
            headers = getattr(exc, "headers", ())
            if isinstance(exc, AccessError) and not isinstance(exc, Forbidden):
                headers = (("WWW-Authenticate", 'Bearer realm="metis-lite"'),)
            body = error_body(exc.status, exc.message, exc.code)
            return Response(exc.status, body, _json_headers(headers))

    def refuse(
        self, status: int, message: str, head: Head | None, headers: tuple[tuple[str, str], ...]
    ) -> Response:
        status = 405 if status == 501 else status
        return Response(status, error_body(status, message), _json_headers(headers))

    # -- routing --------------------------------------------------------------------------

    def _route(self, request: Request) -> Response:
        if not self.tokens.configured and not host_is_loopback_name(request.header("host")):
            raise Forbidden("without tokens this service answers only requests to a loopback name")
        path = request.path
        allowed = []
        for route in self.routes:
            match = route.pattern.fullmatch(path)
            if match is None:
                continue
            if route.method != request.method:
                allowed.append(route.method)
                continue
            grant = self._grant(request) if route.token else OPEN
            if request.method in WRITES:
                check_same_origin(request)
                check_json_body(request)
            return route.answer(request, grant, *(segment(part) for part in match.groups()))
        if allowed:
            raise HttpError(
                405,
                f"{path} answers {', '.join(allowed)} only",
                headers=(("Allow", ", ".join(allowed)),),
            )
        if path == "/v1" or path.startswith("/v1/"):
            raise HttpError(404, f"no endpoint at {path}")
        return self._console(request)

    def _grant(self, request: Request) -> Grant:
        return self.tokens.check(request.header("authorization"))

    def _base(self, grant: Grant, name: str) -> str:
        """A base the token may use: FORBIDDEN for another's (whether or not it exists)."""
        may(grant, name)
        if name not in self.service.names:
            raise BaseNotFound(f"no base named {name!r} is served here")
        return name

    # -- endpoints ------------------------------------------------------------------------

    def health(self, request: Request, grant: Grant) -> Response:
        """Whether every base is open and serves the file at its path: `ok`, else `degraded`.
        A base that is not open is answered 503 by a read-only service, so that a load
        balancer sends its requests to another reader (a writable one answers 200, the others
        being served); a reader that keeps its copy because the file at the path is gone or is
        no published copy answers 200 (it still answers, and every reader would refuse the
        same file: 503 would leave none) and says why under each base's `replacement`. Which
        file each base serves is said to a request with a token (or to any, where no tokens
        are configured), of the bases the token may see."""
        health = self.service.health(self.service.names)
        opened = sum(1 for base in health if base.open)
        ok = opened == len(health)
        current = ok and all(base.replacement is None for base in health)
        body: dict[str, Any] = {
            "status": "ok" if current else "degraded",
            "version": __version__,
            "read_only": self.service.read_only,
            "open": opened,
            "unavailable": len(health) - opened,
        }
        if not self.tokens.configured or request.header("authorization") is not None:
            seen = self._grant(request)  # a token sent must be a good one (401)
            body["bases"] = [health_to_json(base) for base in health if seen.allows(base.name)]
        return json_response(200 if ok or not self.service.read_only else 503, body)

    def list_bases(self, request: Request, grant: Grant) -> Response:
        visible = [name for name in self.service.names if grant.allows(name)]
        statuses, unavailable = self.service.statuses(visible)
        body: dict[str, Any] = {"bases": [status_to_json(status) for status in statuses]}
        if unavailable:  # a damaged base is named with its error; the others answer as ever
            body["unavailable"] = [unavailable_to_json(name, exc) for name, exc in unavailable]
        return json_response(200, body)

    def search_base(self, request: Request, grant: Grant, name: str) -> Response:
        self._base(grant, name)
        body = decode(request.body, SearchBody)
        return json_response(200, answer_to_json(self.service.search(name, body.request())))

    def search_many(self, request: Request, grant: Grant) -> Response:
        body = decode(request.body, SearchBasesBody)
        for name in body.bases:
            self._base(grant, name)
        answer = self.service.search_many(body.request())
        return json_response(200, multi_answer_to_json(answer))

    def index_base(self, request: Request, grant: Grant, name: str) -> Response:
        self._base(grant, name)
        decode(request.body, IndexBody, empty_ok=True)
        self.service.index_now(name)
        return json_response(202, {"state": "Indexing"})

    def add_fact(self, request: Request, grant: Grant, name: str) -> Response:
        self._base(grant, name)
        body = decode(request.body, FactBody)
        fact = self.service.base(name).remember(**body.fields())
        return json_response(201, fact_to_json(fact))

    def list_facts(self, request: Request, grant: Grant, name: str) -> Response:
        self._base(grant, name)
        page = decode_query(request.head.query, FactsQuery)
        facts, total = self.service.base(name).facts(
            offset=page.offset, limit=page.limit, holding=page.holds
        )
        page_json = facts_page_to_json(facts, total=total, offset=page.offset, limit=page.limit)
        return json_response(200, page_json)

    def list_sources(self, request: Request, grant: Grant, name: str) -> Response:
        self._base(grant, name)
        sources = self.service.base(name).sources()
        return json_response(200, {"sources": [source_to_json(s) for s in sources]})

    def remove_source(self, request: Request, grant: Grant, name: str, source: str) -> Response:
        self._base(grant, name)
        removed = self.service.base(name).remove_source(source)
        return json_response(200, {"source": source, "documents": removed})

    def document(
        self, request: Request, grant: Grant, name: str, source: str, path: str
    ) -> Response:
        from metis_lite.store.document_file import read_document

        self._base(grant, name)
        if not self._documents.acquire(blocking=False):
            raise HttpError(
                503,
                f"{DOCUMENTS_AT_ONCE} documents are being read back: try again in a moment",
                headers=(("Retry-After", "1"),),
            )
        try:
            with self.service.base(name).reading() as store:
                found = read_document(store, source, path)
        finally:
            self._documents.release()
        headers: tuple[tuple[str, str], ...] = (
            ("Content-Type", found.media_type),
            ("Cache-Control", "no-cache"),
            *SECURITY_HEADERS,
        )
        if found.media_type.startswith("text/html"):
            headers += (("Content-Security-Policy", DOCUMENT_CSP),)
        return Response(200, found.content, headers)

    def mcp(self, request: Request, grant: Grant) -> Response:
        """The agent tools over MCP's streamable HTTP, behind this service's checks (Host,
        token, Origin, JSON): a token's tools see only its bases."""
        bridge = self._mcp_bridge()
        allowed = None if ALL_BASES in grant.bases else frozenset(grant.bases)
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in request.head.headers]
        status, headers, body = bridge.handle(
            request.method, raw, request.body, allowed_bases=allowed
        )
        kept = tuple(
            (k, v) for k, v in headers if k.lower() not in ("content-length", "connection")
        )
        return Response(status, body, (*kept, *SECURITY_HEADERS))

    def _mcp_bridge(self) -> Any:
        """The MCP transport the factory makes, started by the first request to /mcp (the SDK
        is an extra, and heavy); without a factory, or without the SDK, /mcp is not here."""
        with self._mcp_lock:
            if self._mcp is None:
                if self._mcp_factory is None:
                    raise HttpError(404, "this service does not answer MCP")
                try:
                    self._mcp = self._mcp_factory(self.service.bases, self.service.request)
                except ImportError:
                    raise HttpError(
                        404, "/mcp needs the MCP extra: pip install 'metis-lite[mcp]'"
                    ) from None
            return self._mcp

    def _console(self, request: Request) -> Response:
        method, path = request.method, request.path
        found = self.console.find(path) if method == "GET" else None
        if found is None:
            if method != "GET" and self.console.find(path):
                raise HttpError(405, f"{path} answers GET only", headers=(("Allow", "GET"),))
            raise HttpError(404, f"nothing at {path}")
        body, content_type = found
        headers: tuple[tuple[str, str], ...] = (
            ("Content-Type", content_type),
            ("Cache-Control", "no-cache"),
            *SECURITY_HEADERS,
        )
        if content_type.startswith("text/html"):
            headers += (("Content-Security-Policy", HTML_CSP),)
        return Response(200, body, headers)


def _json_headers(extra: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return (
        ("Content-Type", JSON_TYPE),
        ("Cache-Control", "no-store"),
        ("Content-Security-Policy", JSON_CSP),
        *SECURITY_HEADERS,
        *extra,
    )
