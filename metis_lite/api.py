"""`metis-lite serve`: the index service, an HTTP API over one or several bases (and the console).

    GET  /v1/health                 {"status": "ok", "version"}          (no token needed)
    GET  /v1/bases                  {"bases": [status, …]}               the bases a token may see
    POST /v1/bases/{name}/search    {question, mode, top_k, rerank, filters} → the CLI's --json
    POST /v1/search                 the same with bases: [names] → merged, each result its base
    POST /v1/bases/{name}/index     202 {"state": "Indexing"}; 409 BASE_BUSY while it indexes
    GET  /                          the console (metis_lite/console/), no token needed

The contract is openapi.yaml at the repository root and docs/api.md. This module only
translates: JSON in (checked strictly: unknown fields, wrong types, bool for int are 400), the
library's answer out, errors as {"error": {"code", "message"}}. The limits are webserver.py's,
the bases and their indexing service.py's, the tokens access.py's.

    python -m metis_lite.api handbook.db --port 8080
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metis_lite import __version__
from metis_lite.access import (
    OPEN,
    Grant,
    Tokens,
    check_binding,
    host_is_loopback_name,
    load_tokens,
    may,
)
from metis_lite.errors import AccessError, BaseNotFound, Forbidden, InvalidRequest, MetisError
from metis_lite.records import Filters
from metis_lite.settings import KINDS, MODES, TOP_K, TOP_K_MAX
from metis_lite.webserver import (
    QUEUE_SIZE,
    REQUEST_TIMEOUT_S,
    WORKERS,
    BoundedHTTPServer,
    HttpError,
    JsonRequestHandler,
    StaticFolder,
)

if TYPE_CHECKING:  # the service (and numpy, the models…) loads when a server is made, so that
    # wiring these flags into the CLI costs `metis-lite -h` nothing
    from metis_lite.service import SearchRequest, Service

POLL_S = 30.0
"""Each base's sources are indexed again this often by default (0: only when asked)."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
CONSOLE_DIR = Path(__file__).resolve().parent / "console"

SEARCH_FIELDS = ("question", "mode", "top_k", "rerank", "filters")
FILTER_FIELDS = ("path_prefix", "kinds", "sources")
FILTER_KINDS = KINDS + ("note",)

# -- the request body -----------------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidRequest(f"the field {key!r} is given twice")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise InvalidRequest(f"{name} is not a JSON number")


def json_body(raw: bytes) -> Any:
    """The body as JSON: UTF-8, no NaN or Infinity, no key given twice; an empty body is 400."""
    if not raw.strip():
        raise InvalidRequest("the request needs a JSON body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest("the body must be JSON in UTF-8") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc.msg} at {exc.pos}") from None
    except RecursionError:
        raise InvalidRequest("the body is nested too deeply") from None


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(f"{field} must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(f"{field} is not valid Unicode (a lone surrogate)") from None
    return value


def _texts(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise InvalidRequest(f"{field} must be a list of strings")
    return tuple(_text(item, f"each of {field}") for item in value)


def _known(value: Any, allowed: Sequence[str], what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{what} must be a JSON object")
    unknown = [key for key in value if key not in allowed]
    if unknown:
        raise InvalidRequest(
            f"unknown field {unknown[0]!r} in {what}: the fields are {', '.join(allowed)}"
        )
    return value


def parse_filters(value: Any) -> Filters:
    data = _known(value, FILTER_FIELDS, "filters")
    kinds = _texts(data.get("kinds", []), "filters.kinds")
    for kind in kinds:
        if kind not in FILTER_KINDS:
            raise InvalidRequest(f"unknown kind {kind!r}: kinds are {', '.join(FILTER_KINDS)}")
    return Filters(
        path_prefix=_text(data["path_prefix"], "filters.path_prefix")
        if "path_prefix" in data
        else None,
        kinds=kinds,
        sources=_texts(data.get("sources", []), "filters.sources"),
    )


def parse_search(raw: bytes, *, many: bool) -> SearchRequest:
    """A search body, checked field by field (see openapi.yaml, SearchRequest)."""
    from metis_lite.service import SearchRequest

    allowed = SEARCH_FIELDS + (("bases",) if many else ())
    data = _known(json_body(raw), allowed, "the body")
    if "question" not in data:
        raise InvalidRequest("question is required")
    mode = _text(data.get("mode", "hybrid"), "mode")
    if mode not in MODES:
        raise InvalidRequest(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
    top_k = data.get("top_k", TOP_K)
    if isinstance(top_k, float) and top_k.is_integer():
        top_k = int(top_k)  # JSON has one number type: 5.0 is the integer 5 (as JSON Schema says)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= TOP_K_MAX:
        raise InvalidRequest(f"top_k must be a whole number from 1 to {TOP_K_MAX}")
    rerank = data.get("rerank", True)
    if not isinstance(rerank, bool):
        raise InvalidRequest("rerank must be true or false")
    bases: tuple[str, ...] = ()
    if many:
        if "bases" not in data:
            raise InvalidRequest("bases is required: the names of the bases to ask")
        bases = _texts(data["bases"], "bases")
        if not bases:
            raise InvalidRequest("bases must name at least one base")
        if len(set(bases)) != len(bases):
            raise InvalidRequest("bases names a base twice")
    return SearchRequest(
        question=_text(data["question"], "question"),
        mode=mode,
        top_k=top_k,
        rerank=rerank,
        filters=parse_filters(data.get("filters", {})),
        bases=bases,
    )


FACT_FIELDS = ("text", "stated_at", "subject", "key", "replaces")


def parse_fact(raw: bytes) -> dict[str, Any]:
    """A fact's body: {text, stated_at?, subject?, key?, replaces?: [id]} (memory.add_fact checks
    the values; here only the shape)."""
    body = _known(json_body(raw), FACT_FIELDS, "the body")
    if "text" not in body:
        raise InvalidRequest("a fact needs its text")
    fields: dict[str, Any] = {"text": _text(body["text"], "text")}
    for name in ("stated_at", "subject", "key"):
        if body.get(name) is not None:
            fields[name] = _text(body[name], name)
    replaces = body.get("replaces", [])
    if not isinstance(replaces, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in replaces
    ):
        raise InvalidRequest("replaces must be a list of fact ids")
    fields["replaces"] = tuple(replaces)
    return fields


def parse_fact_page(query: str) -> tuple[int, int, bool | None]:
    """?offset=0&limit=50&holding=true|false from a GET of facts."""
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    unknown = [k for k in params if k not in ("offset", "limit", "holding")]
    if unknown:
        raise InvalidRequest(f"unknown parameter {unknown[0]!r}: offset, limit, holding")
    try:
        offset = int(params.get("offset", ["0"])[-1])
        limit = int(params.get("limit", ["50"])[-1])
    except ValueError:
        raise InvalidRequest("offset and limit must be whole numbers") from None
    holding = {"true": True, "false": False, None: None}.get(
        params.get("holding", [None])[-1], "bad"
    )
    if holding == "bad":
        raise InvalidRequest("holding must be true or false")
    return offset, limit, holding  # type: ignore[return-value]


def parse_index(raw: bytes) -> None:
    """The index request takes no options: an empty body or {}."""
    if raw.strip():
        _known(json_body(raw), (), "the body")


# -- routes ---------------------------------------------------------------------------------


class ServiceHandler(JsonRequestHandler):
    """The API's routes over a Service, each checked for its token."""

    disable_nagle_algorithm = True
    server: ServiceServer

    ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = (
        ("GET", re.compile(r"/v1/health"), "health"),
        ("GET", re.compile(r"/v1/bases"), "list_bases"),
        ("POST", re.compile(r"/v1/search"), "search_many"),
        ("POST", re.compile(r"/v1/bases/([^/]+)/search"), "search_base"),
        ("POST", re.compile(r"/v1/bases/([^/]+)/index"), "index_base"),
        ("POST", re.compile(r"/v1/bases/([^/]+)/facts"), "add_fact"),
        ("GET", re.compile(r"/v1/bases/([^/]+)/facts"), "list_facts"),
    )

    def route(self) -> None:
        if not self.server.tokens.configured and not host_is_loopback_name(
            self.headers.get("Host")
        ):
            raise Forbidden("without tokens this service answers only requests to a loopback name")
        path = self.url_path
        allowed_methods = []
        for method, pattern, name in self.ROUTES:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if method != self.command:
                allowed_methods.append(method)
                continue
            grant = OPEN if name == "health" else self._grant()
            if method == "GET":
                self.read_body()  # read (and drop) a body sent anyway, so closing resets nothing
            getattr(self, name)(grant, *(_segment(part) for part in match.groups()))
            return
        if allowed_methods:
            raise HttpError(
                405,
                f"{path} answers {', '.join(allowed_methods)} only",
                headers=(("Allow", ", ".join(allowed_methods)),),
            )
        if path == "/v1" or path.startswith("/v1/"):
            raise HttpError(404, f"no endpoint at {path}")
        self._console(path)

    def _grant(self) -> Grant:
        try:
            return self.server.tokens.check(self.headers.get("Authorization"))
        except AccessError as exc:
            raise HttpError(
                401, exc.message, headers=(("WWW-Authenticate", 'Bearer realm="metis-lite"'),)
            ) from None

    def _json_post(self) -> bytes:
        """The body of a POST, which must be sent as JSON: a web page of another site cannot
        send that without the browser asking first (CORS), and this service never agrees."""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        length = (self.headers.get("Content-Length") or "0").strip()
        has_body = length != "0" or "Transfer-Encoding" in self.headers
        if has_body and content_type != "application/json":
            self.unread_body = True
            raise HttpError(415, "send the body as Content-Type: application/json")
        return self.read_body()

    def _named_base(self, grant: Grant, name: str) -> str:
        """A base the token may use: FORBIDDEN for another's (whether or not it exists)."""
        may(grant, name)
        if name not in self.server.service.bases:
            raise BaseNotFound(f"no base named {name!r} is served here")
        return name

    # -- endpoints ------------------------------------------------------------------------

    def health(self, grant: Grant) -> None:
        self.send_json(200, {"status": "ok", "version": __version__})

    def list_bases(self, grant: Grant) -> None:
        service = self.server.service
        visible = [name for name in service.names if grant.allows(name)]
        self.send_json(200, {"bases": [service.status(name) for name in visible]})

    def search_base(self, grant: Grant, name: str) -> None:
        self._named_base(grant, name)
        request = parse_search(self._json_post(), many=False)
        self.send_json(200, self.server.service.search(name, request))

    def search_many(self, grant: Grant) -> None:
        request = parse_search(self._json_post(), many=True)
        for name in request.bases:
            self._named_base(grant, name)
        self.send_json(200, self.server.service.search_many(request))

    def index_base(self, grant: Grant, name: str) -> None:
        self._named_base(grant, name)
        parse_index(self._json_post())
        self.server.service.index_now(name)
        self.send_json(202, {"state": "Indexing"})

    def add_fact(self, grant: Grant, name: str) -> None:
        self._named_base(grant, name)
        fields = parse_fact(self._json_post())
        fact = self.server.service.base(name).remember(**fields)
        from metis_lite.memory import fact_json

        self.send_json(201, fact_json(fact))

    def list_facts(self, grant: Grant, name: str) -> None:
        self._named_base(grant, name)
        self.read_body()
        offset, limit, holding = parse_fact_page(urllib.parse.urlsplit(self.path).query)
        facts, total = self.server.service.base(name).facts(
            offset=offset, limit=limit, holding=holding
        )
        from metis_lite.memory import fact_json

        self.send_json(
            200,
            {
                "facts": [fact_json(f) for f in facts],
                "total": total,
                "offset": offset,
                "limit": limit,
            },
        )

    def _console(self, path: str) -> None:
        found = self.server.console.find(path) if self.command in ("GET", "HEAD") else None
        if found is None:
            if self.command not in ("GET", "HEAD") and self.server.console.find(path):
                raise HttpError(405, f"{path} answers GET only", headers=(("Allow", "GET"),))
            raise HttpError(404, f"nothing at {path}")
        if self.command == "HEAD":
            raise HttpError(405, f"{path} answers GET only", headers=(("Allow", "GET"),))
        self.read_body()
        self.send_file(*found)


def _segment(part: str) -> str:
    from urllib.parse import unquote

    return unquote(part)


class ServiceServer(BoundedHTTPServer):
    """The listening service: its Service, its tokens, its console folder."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        service: Service,
        tokens: Tokens,
        console_dir: Path = CONSOLE_DIR,
        **limits: Any,
    ) -> None:
        self.service = service
        self.tokens = tokens
        self.console = StaticFolder(console_dir)
        super().__init__(address, ServiceHandler, **limits)

    @property
    def url(self) -> str:
        host = self.server_address[0]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop listening, stop the indexers, close the bases (search counts are written)."""
        self.server_close()
        self.service.close()


# -- starting -------------------------------------------------------------------------------


def make_server(
    paths: Sequence[str],
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    tokens_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    poll_s: float = POLL_S,
    workers: int = WORKERS,
    queue_size: int = QUEUE_SIZE,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    access_log: bool = True,
    console_dir: Path = CONSOLE_DIR,
    log: Callable[[str], None] | None = None,
) -> ServiceServer:
    """Open the bases, check the access rules, bind (port 0: any free port) and start the
    indexers; the caller runs `serve_forever()` and finally `close()`."""
    tokens = load_tokens(tokens_file, os.environ if environ is None else environ)
    check_binding(host, tokens)
    for label, value, low in (
        ("--poll", poll_s, 0),
        ("--workers", workers, 1),
        ("--queue", queue_size, 1),
        ("--request-timeout", request_timeout_s, 0.1),
    ):
        if value < low:
            raise InvalidRequest(f"{label} must be at least {low}")
    from metis_lite.service import Service, log_stderr, open_bases

    log = log or log_stderr
    bases = open_bases(paths)
    service = Service(bases, poll_s=poll_s, log=log)
    served = set(bases)
    for n, grant in enumerate(tokens.grants, start=1):
        unknown = sorted(grant.bases - served - {"*"})
        if unknown:
            log(f"warning: token {n} names bases this service does not serve: {', '.join(unknown)}")
    try:
        server = ServiceServer(
            (host, port),
            service=service,
            tokens=tokens,
            console_dir=console_dir,
            workers=workers,
            queue_size=queue_size,
            request_timeout_s=request_timeout_s,
            access_log=access_log,
        )
    except BaseException:
        service.close()
        raise
    service.start()
    return server


def serve(
    paths: Sequence[str],
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    tokens_file: str | None = None,
    poll_s: float = POLL_S,
    **options: Any,
) -> None:
    """Serve until interrupted (Ctrl-C or SIGTERM); the first line on stdout is the URL."""
    server = make_server(
        paths, host=host, port=port, tokens_file=tokens_file, poll_s=poll_s, **options
    )
    print(f"serving {server.url}", flush=True)
    for name, base in server.service.bases.items():
        print(f"  {name}: {base.path}", flush=True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `metis-lite serve` (the CLI wires them with this and run_from_args)."""
    parser.add_argument(
        "bases", nargs="+", metavar="BASE", help="a base file to serve, or NAME=PATH to name it"
    )
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help="address to listen on (default %(default)s)"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (0: any free one)")
    parser.add_argument(
        "--tokens",
        metavar="FILE",
        help='access tokens: {"tokens": [{"token": "…", "bases": ["NAME" or "*"]}]} '
        "(or the METIS_TOKENS environment variable; needed off loopback)",
    )
    parser.add_argument(
        "--poll",
        type=float,
        default=POLL_S,
        metavar="SECONDS",
        help="index each base's sources again this often (0: only when asked; default %(default)g)",
    )
    parser.add_argument("--workers", type=int, default=WORKERS, help="requests answered at once")
    parser.add_argument(
        "--queue", type=int, default=QUEUE_SIZE, help="connections waiting for a worker, then 503"
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=REQUEST_TIMEOUT_S,
        metavar="SECONDS",
        help="a request must arrive whole within this long (default %(default)g)",
    )
    parser.add_argument(
        "--no-access-log",
        action="store_true",
        help="do not log each request (method, path, status)",
    )


def run_from_args(args: argparse.Namespace) -> int:
    """Run `serve` from parsed flags; 0 when stopped, 2 for a bad request, 1 for other errors."""
    try:
        serve(
            args.bases,
            host=args.host,
            port=args.port,
            tokens_file=args.tokens,
            poll_s=args.poll,
            workers=args.workers,
            queue_size=args.queue,
            request_timeout_s=args.request_timeout,
            access_log=not args.no_access_log,
        )
    except InvalidRequest as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except MetisError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="metis-lite serve",
        description="Serve bases over HTTP: search, status, indexing, and the console.",
        epilog="example:\n  metis-lite serve handbook.db --port 8080",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
