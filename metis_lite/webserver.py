"""The HTTP mechanics of the index service: a bounded server, JSON answers, the console's files.

Nothing here knows about bases. What it guards against, so that a slow or hostile client
cannot take the service down:

- a fixed pool of worker threads and a bounded queue of accepted connections; when the queue
  is full a connection is answered 503 at once, on the accepting thread;
- one request per connection (`Connection: close`): no client holds a worker between requests;
- a request line of at most 8 KiB (414), headers of at most 16 KiB (431), a body of at most
  64 KiB (413, refused before it is read);
- a socket timeout and a deadline for receiving the whole request (408): a client that sends
  its headers a byte at a time is cut off when the deadline passes, whatever its pace.

Privacy: the request log names the method, the path without its query and the status; an
unexpected error is logged as its type and stack only, never its message (which may quote the
request), so a question never reaches the logs.
"""

from __future__ import annotations

import http.client
import json
import queue
import socket
import socketserver
import sys
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from metis_lite.errors import MetisError

MAX_REQUEST_LINE = 8 * 1024
"""Bytes of `METHOD /path HTTP/1.1`; longer is answered 414."""

MAX_HEADER_BYTES = 16 * 1024
"""Bytes of all header lines together; more is answered 431."""

MAX_BODY_BYTES = 64 * 1024
"""A request body larger than this is answered 413 without being read."""

REQUEST_TIMEOUT_S = 15.0
"""A request must arrive whole within this long (and no read or write may stall longer)."""

WORKERS = 16
"""Requests handled at once."""

QUEUE_SIZE = 64
"""Accepted connections that wait for a worker; past this they are answered 503."""

LISTEN_BACKLOG = 128

REAPER_TICK_S = 0.25
"""How often the deadline of requests still being received is checked."""

DRAIN_BYTES = 256 * 1024
DRAIN_S = 0.5
"""After refusing a body unread, read (and drop) this much for this long before closing, so
the client sees the answer rather than a connection reset."""

STATUS_CODES = {
    400: "INVALID_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "REQUEST_TIMEOUT",
    411: "INVALID_REQUEST",
    413: "PAYLOAD_TOO_LARGE",
    414: "URI_TOO_LONG",
    415: "UNSUPPORTED_MEDIA_TYPE",
    431: "HEADERS_TOO_LARGE",
    500: "INTERNAL_ERROR",
    501: "METHOD_NOT_ALLOWED",
    503: "SERVICE_BUSY",
    505: "HTTP_VERSION_NOT_SUPPORTED",
}
"""The public code of each status this module answers by itself."""

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}
"""The console's files by extension; a file of any other kind is not served."""

JSON_TYPE = "application/json; charset=utf-8"
HTML_CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
JSON_CSP = "default-src 'none'; frame-ancestors 'none'"
SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
)


class HttpError(MetisError):
    """An answer of the HTTP layer itself (unknown path, wrong method, body too large…)."""

    def __init__(
        self, status: int, message: str, *, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = STATUS_CODES.get(status, f"HTTP_{status}")
        self.headers = headers


class _Expired(Exception):
    """The request's deadline passed; the reaper has answered 408 and closed it."""


def error_json(status: int, message: str) -> bytes:
    code = STATUS_CODES.get(status, f"HTTP_{status}")
    return json.dumps({"error": {"code": code, "message": message}}).encode("utf-8")


def encode_json(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate quoted from a request: escape it instead
        return json.dumps(value).encode("utf-8")


def canned_response(status: int, message: str, *, extra: str = "") -> bytes:
    """A whole response written straight to a socket (busy, timed out), outside any handler."""
    body = error_json(status, message)
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        f"Content-Type: {JSON_TYPE}\r\nContent-Length: {len(body)}\r\n"
        f"X-Content-Type-Options: nosniff\r\nConnection: close\r\n{extra}\r\n"
    )
    return head.encode("ascii") + body


def log_exception(context: str, exc: BaseException, *, with_message: bool = False) -> None:
    """Log an unexpected error as its types and stack, without messages (they may quote the
    request: a question, a token) unless `with_message` (no request involved: indexing)."""
    lines = [
        f"{context}: {type(exc).__name__}: {exc}"
        if with_message
        else f"{context}: {type(exc).__name__} (message withheld: it may quote the request)"
    ]
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current is not exc:
            lines.append(f"  caused by {type(current).__name__}")
        for frame in traceback.extract_tb(current.__traceback__):
            lines.append(f'    File "{frame.filename}", line {frame.lineno}, in {frame.name}')
        current = current.__cause__ or current.__context__
    print("\n".join(lines), file=sys.stderr, flush=True)


class _HeaderBudget:
    """Stands in for the request's stream while http.server reads the headers: past the
    budget, raises LineTooLong, which http.server answers 431."""

    def __init__(self, stream: Any, budget: int) -> None:
        self.stream = stream
        self.left = budget

    def readline(self, limit: int = -1) -> bytes:
        want = self.left + 1 if limit < 0 else min(limit, self.left + 1)
        line = self.stream.readline(want)
        self.left -= len(line)
        if self.left < 0:
            raise http.client.LineTooLong(f"headers over {MAX_HEADER_BYTES} bytes")
        return line


class StaticFolder:
    """Files of one folder served read-only: no listing, nothing outside it, known kinds only."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def find(self, url_path: str) -> tuple[bytes, str] | None:
        path = urllib.parse.unquote(url_path, errors="strict")
        if path == "/":
            path = "/index.html"
        parts = path[1:].split("/")
        if any(not p or p.startswith(".") or "\\" in p or "\x00" in p or ":" in p for p in parts):
            return None
        target = self.root.joinpath(*parts)
        content_type = CONTENT_TYPES.get(target.suffix.lower())
        try:
            resolved = target.resolve()
            if content_type is None or not resolved.is_relative_to(self.root):
                return None
            if not resolved.is_file():
                return None
            return resolved.read_bytes(), content_type
        except (OSError, ValueError):
            return None


class BoundedHTTPServer(socketserver.TCPServer):
    """A TCP server with a fixed pool of worker threads and a bounded queue (see module)."""

    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        workers: int = WORKERS,
        queue_size: int = QUEUE_SIZE,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        access_log: bool = True,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.request_timeout_s = request_timeout_s
        self.access_log = access_log
        self._queue: queue.Queue[tuple[socket.socket, Any] | None] = queue.Queue(queue_size)
        self._receiving: dict[socket.socket, float] = {}
        self._expired: set[socket.socket] = set()
        self._deadline_lock = threading.Lock()
        self._stopping = threading.Event()
        super().__init__(address, handler)
        self._threads = [
            threading.Thread(target=self._work, name=f"http-worker-{n}", daemon=True)
            for n in range(workers)
        ]
        self._threads.append(threading.Thread(target=self._reap, name="http-reaper", daemon=True))
        for thread in self._threads:
            thread.start()

    @property
    def port(self) -> int:
        return self.server_address[1]

    # -- accepting ------------------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        """On the accepting thread: queue the connection for a worker, or refuse it at once."""
        try:
            self._queue.put_nowait((request, client_address))
        except queue.Full:
            self._refuse(request)

    def _refuse(self, sock: socket.socket) -> None:
        try:
            sock.setblocking(False)
            try:
                sock.recv(DRAIN_BYTES)
            except (BlockingIOError, OSError):
                pass
            sock.settimeout(1.0)
            sock.sendall(
                canned_response(
                    503, "the service is busy: try again in a moment", extra="Retry-After: 1\r\n"
                )
            )
        except OSError:
            pass
        self.shutdown_request(sock)

    # -- working --------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            sock, address = item
            handler = None
            with self._deadline_lock:
                self._receiving[sock] = time.monotonic() + self.request_timeout_s
            try:
                handler = self.RequestHandlerClass(sock, address, self)
            except Exception as exc:
                if not isinstance(exc, OSError):
                    log_exception("http worker", exc)
            finally:
                self.forget(sock)
                if handler is not None and getattr(handler, "unread_body", False):
                    _drain(sock)
                self.shutdown_request(sock)

    def claim(self, sock: socket.socket) -> bool:
        """The request has arrived: stop its deadline. False when the reaper got there first."""
        with self._deadline_lock:
            self._receiving.pop(sock, None)
            return sock not in self._expired

    def forget(self, sock: socket.socket) -> None:
        with self._deadline_lock:
            self._receiving.pop(sock, None)
            self._expired.discard(sock)

    def _reap(self) -> None:
        """Answer 408 to requests still arriving past their deadline and end them. The I/O is
        done under the lock a worker takes (`forget`) before it closes a socket, so it never
        touches a closed socket, nor one whose descriptor a new connection reuses."""
        while not self._stopping.wait(REAPER_TICK_S):
            now = time.monotonic()
            with self._deadline_lock:
                late = [s for s, deadline in self._receiving.items() if deadline <= now]
                for sock in late:
                    del self._receiving[sock]
                    self._expired.add(sock)
                    try:
                        sock.send(self.timeout_response(), socket.MSG_DONTWAIT)
                    except OSError:
                        pass
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def timeout_response(self) -> bytes:
        return canned_response(
            408, f"the request did not arrive within {self.request_timeout_s:g} s"
        )

    # -- closing --------------------------------------------------------------------------

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if exc is not None and not isinstance(exc, OSError):
            log_exception("http server", exc)

    def server_close(self) -> None:
        super().server_close()
        self._stopping.set()
        workers = [t for t in self._threads if t.name.startswith("http-worker")]
        for _ in workers:
            try:
                self._queue.put(None, timeout=1.0)
            except queue.Full:
                break


def _drain(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(DRAIN_S)
        deadline = time.monotonic() + DRAIN_S
        left = DRAIN_BYTES
        while left > 0 and time.monotonic() < deadline:
            data = sock.recv(min(left, 65536))
            if not data:
                break
            left -= len(data)
    except OSError:
        pass


class JsonRequestHandler(BaseHTTPRequestHandler):
    """One request per connection, limits enforced, every answer JSON (or a console file).

    Subclasses implement `route()` and answer with `send_json`, `send_file` or by raising a
    MetisError (answered with its status and code).
    """

    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.0"  # never answer without a status line (HTTP/0.9)
    server_version = "metis-lite"
    sys_version = ""

    def version_string(self) -> str:
        return self.server_version

    server: BoundedHTTPServer
    unread_body = False
    answering = False

    def setup(self) -> None:
        self.timeout = self.server.request_timeout_s
        super().setup()

    def handle(self) -> None:
        self.close_connection = True
        try:
            self.handle_one_request()
        except TimeoutError:  # a read or a write stalled for request_timeout_s
            if not self.answering and self.server.claim(self.connection):
                try:
                    self.connection.sendall(self.server.timeout_response())
                except OSError:
                    pass
        except _Expired:
            pass
        except OSError:  # the client went away
            pass

    def handle_one_request(self) -> None:
        self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
        if not self.raw_requestline:
            return
        if len(self.raw_requestline) > MAX_REQUEST_LINE:
            self.requestline = self.request_version = self.command = ""
            self.path = ""
            self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
            return
        stream, self.rfile = self.rfile, _HeaderBudget(self.rfile, MAX_HEADER_BYTES)
        try:
            parsed = self.parse_request()
        finally:
            self.rfile = stream
        self.close_connection = True
        if not parsed:
            return
        try:
            self.route()
        except MetisError as exc:
            self.send_json(exc.status, exc.to_json(), headers=getattr(exc, "headers", ()))
        except (_Expired, OSError):
            raise
        except Exception as exc:
            log_exception(f"{self.command} {self.url_path}", exc)
            self.send_json(500, {"error": {"code": "INTERNAL_ERROR", "message": "internal error"}})
        self.wfile.flush()

    def route(self) -> None:
        raise NotImplementedError

    @property
    def url_path(self) -> str:
        return urllib.parse.urlsplit(getattr(self, "path", "") or "").path

    # -- reading --------------------------------------------------------------------------

    def read_body(self) -> bytes:
        """The request's body (at most MAX_BODY_BYTES); b'' when it has none."""
        if self.headers.get("Transfer-Encoding"):
            self.unread_body = True
            raise HttpError(411, "send the body with a Content-Length (not chunked)")
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            self._claim()
            return b""
        length_text = length_header.strip()
        if not length_text.isdigit() or len(self.headers.get_all("Content-Length", [])) > 1:
            self.unread_body = True
            raise HttpError(400, "Content-Length must be one whole number")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            self.unread_body = True
            raise HttpError(413, f"the body is over the limit of {MAX_BODY_BYTES} bytes")
        body = self.rfile.read(length)
        self._claim()
        if len(body) < length:
            raise HttpError(400, "the body ended before its Content-Length")
        return body

    def _claim(self) -> None:
        if not self.server.claim(self.connection):
            raise _Expired

    # -- answering ------------------------------------------------------------------------

    def send_json(
        self, status: int, value: Any, *, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        headers = (
            ("Content-Type", JSON_TYPE),
            ("Cache-Control", "no-store"),
            ("Content-Security-Policy", JSON_CSP),
            *headers,
        )
        self.send_bytes(status, encode_json(value), headers)

    def send_file(self, body: bytes, content_type: str) -> None:
        headers: tuple[tuple[str, str], ...] = (
            ("Content-Type", content_type),
            ("Cache-Control", "no-cache"),
        )
        if content_type.startswith("text/html"):
            headers += (("Content-Security-Policy", HTML_CSP),)
        self.send_bytes(200, body, headers)

    def send_bytes(self, status: int, body: bytes, headers: tuple[tuple[str, str], ...]) -> None:
        self._claim()
        self.answering = True
        self.send_response(status)
        for name, value in (*headers, *SECURITY_HEADERS):
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (bad request line, headers too large) in the API's shape."""
        if code == HTTPStatus.NOT_IMPLEMENTED:
            code = HTTPStatus.METHOD_NOT_ALLOWED
        text = message or HTTPStatus(code).phrase
        self.send_json(
            code, {"error": {"code": STATUS_CODES.get(code, f"HTTP_{code}"), "message": text}}
        )

    # -- logging --------------------------------------------------------------------------

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Method, path without its query, status: never a body, never a query string."""
        if self.server.access_log:
            status = code.value if isinstance(code, HTTPStatus) else code
            self.log_message('"%s %s" %s', self.command or "-", self.url_path or "-", status)

    def log_error(self, format: str, *args: Any) -> None:
        """http.server's own error lines are replaced by the request log's status."""


Route = Callable[[JsonRequestHandler], None]
