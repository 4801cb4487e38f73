"""What travels on the wire: a request's head parsed, frozen requests and responses, the limits.

Nothing here reads a socket or knows a route. `parse_head` turns the bytes of a request line
and its headers into a `Head`, or raises `HttpError` with the status HTTP's standard gives
each fault (400, 414, 431, 505); every number it checks is named once below. A request with
more than one Host is refused (400, as HTTP/1.1 requires): a check that read one of them and a
route that read another would disagree about which site was asked. `client_key` says which
client an address counts as for the server's per-client bounds. Both servers' apps (`serve`,
`models serve`) also share here what keeps a web page from using them: the Origin and
content-type checks of a write, and the headers every answer carries.
"""

from __future__ import annotations

import ipaddress
import json
import re
import sys
import traceback
import urllib.parse
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from metis_lite.errors import Forbidden, InvalidRequest, MetisError

MAX_REQUEST_LINE = 8 * 1024
"""Bytes of `METHOD /path HTTP/1.1`; longer is answered 414."""

MAX_HEADER_BYTES = 16 * 1024
"""Bytes of all header lines together; more is answered 431."""

MAX_HEADERS = 100
"""Header lines in one request; more is answered 431."""

JSON_TYPE = "application/json; charset=utf-8"

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
"""The public code of each status the HTTP layer answers by itself."""

SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
)
"""On every answer of both servers: a browser never guesses another type for it, never shows
it inside another site's page, and sends no Referer from it."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""RFC 9110's `token`: a method or a header name."""

_DIGITS = re.compile(r"[0-9]{1,18}")
"""A Content-Length: ASCII digits only (`²` is a digit to str.isdigit, not to HTTP)."""

_VERSIONS = ("HTTP/1.0", "HTTP/1.1")

IPV6_CLIENT_PREFIX = 64
"""An IPv6 client is its /64: a host is handed a whole /64 and may use any address in it, so
counting each address alone would give one host 2**64 shares."""

LOOPBACK_CLIENT = "loopback"
"""The one client every loopback address (127.0.0.0/8, ::1) counts as."""


class HttpError(MetisError):
    """An answer of the HTTP layer itself: unknown path, wrong method, body too large…"""

    def __init__(
        self, status: int, message: str, *, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = STATUS_CODES.get(status, f"HTTP_{status}")
        self.headers = headers


@dataclass(frozen=True)
class Head:
    """A request line and its headers, checked; names lower-cased, values as sent (latin-1)."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def header(self, name: str) -> str | None:
        """The last value of a header (None when absent)."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name]

    @property
    def path(self) -> str:
        """The target's path, still percent-encoded (routes split it before decoding)."""
        return urllib.parse.urlsplit(self.target).path

    @property
    def query(self) -> str:
        return urllib.parse.urlsplit(self.target).query

    def content_length(self) -> int | None:
        """The body's length; None without one. 411 for a chunked body, 400 for a bad length."""
        if self.all("transfer-encoding"):
            raise HttpError(411, "send the body with a Content-Length (not chunked)")
        lengths = self.all("content-length")
        if not lengths:
            return None
        if len(lengths) > 1 or not _DIGITS.fullmatch(lengths[0].strip()):
            raise HttpError(400, "Content-Length must be one whole number")
        return int(lengths[0].strip())

    @property
    def wants_close(self) -> bool:
        connection = (self.header("connection") or "").lower()
        return self.version == "HTTP/1.0" or "close" in connection


@dataclass(frozen=True)
class Request:
    """A whole request as a worker gets it: head, body (read within the limits) and client."""

    head: Head
    body: bytes
    client: str
    has_length: bool = True

    @property
    def method(self) -> str:
        return self.head.method

    @property
    def path(self) -> str:
        return self.head.path

    def header(self, name: str) -> str | None:
        return self.head.header(name)


@dataclass(frozen=True)
class Response:
    """What a route answers; the server adds Content-Length and Connection."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False

    def encode(self, *, close: bool, head_only: bool = False) -> bytes:
        head = self.encode_head(close=close)
        return head if head_only else head + self.body

    def encode_head(self, *, close: bool) -> bytes:
        """The status line and headers alone: the server writes the body after them in slices,
        never a second copy of it joined to its head."""
        phrase = _phrase(self.status)
        lines = [f"HTTP/1.1 {self.status} {phrase}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        lines.append(f"Content-Length: {len(self.body)}")
        lines.append("Connection: close" if close else "Connection: keep-alive")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def parse_head(data: bytes) -> Head:
    """The request line and headers (CRLF-separated, without the final blank line)."""
    text = data.decode("latin-1")
    line, _, rest = text.partition("\r\n")
    if len(line) > MAX_REQUEST_LINE:
        raise HttpError(414, f"the request line is over {MAX_REQUEST_LINE} bytes")
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        raise HttpError(400, "a request line is METHOD /path HTTP/1.1")
    method, target, version = parts
    if not version.startswith("HTTP/"):
        raise HttpError(400, "a request line is METHOD /path HTTP/1.1")
    if version not in _VERSIONS:
        raise HttpError(505, f"{version[:16]} is not spoken here: use HTTP/1.1")
    if not target.startswith("/") or any(c <= " " or c == "\x7f" for c in target):
        raise HttpError(400, "the request target must be a path starting with /")
    if len(text) - len(line) > MAX_HEADER_BYTES:
        raise HttpError(431, f"headers over {MAX_HEADER_BYTES} bytes")
    headers = []
    for raw in rest.split("\r\n") if rest else ():
        name, colon, value = raw.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise HttpError(400, "a header line is Name: value")
        headers.append((name.lower(), value.strip(" \t")))
    if len(headers) > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} header lines")
    if sum(1 for name, _ in headers if name == "host") > 1:
        raise HttpError(400, "a request carries one Host header, not several")
    return Head(method, target, version, tuple(headers))


def check_same_origin(request: Request) -> None:
    """A request sent by a page of another site is refused (FORBIDDEN): its Origin names that
    site. Clients that are not browsers send no Origin."""
    origin = request.header("origin")
    if origin is None:
        return
    host = request.header("host") or ""
    if origin.lower() not in (f"http://{host}".lower(), f"https://{host}".lower()):
        raise Forbidden("a request from another site's page is refused")


def check_json_body(request: Request) -> None:
    """A write's body, when it has one or says its type, must be JSON (else 415): a form or a
    text body is what another site's page can send without the browser asking (CORS) first."""
    content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
    if (content_type or request.body) and content_type != "application/json":
        raise HttpError(415, "send the body as Content-Type: application/json")


def segment(part: str) -> str:
    """One percent-encoded part of a path, decoded: UTF-8 or 400 (`/%ff` is not a name)."""
    try:
        return urllib.parse.unquote(part, errors="strict")
    except UnicodeDecodeError:
        raise InvalidRequest("the path is not percent-encoded UTF-8") from None


def encode_json(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate quoted from a request: escape it instead
        return json.dumps(value).encode("utf-8")


def error_body(status: int, message: str, code: str | None = None) -> bytes:
    code = code or STATUS_CODES.get(status, f"HTTP_{status}")
    return encode_json({"error": {"code": code, "message": message}})


def log_exception(context: str, exc: BaseException) -> None:
    """Log an unexpected error as its types and stack, never its message: it may quote the
    request (a question, a token)."""
    lines = [f"{context}: {type(exc).__name__} (message withheld: it may quote the request)"]
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


def client_key(address: str) -> str:
    """The client an address counts as for the per-client caps (the module says why): an
    IPv4-mapped IPv6 address as its IPv4 address, any loopback address as LOOPBACK_CLIENT, an
    IPv6 address as its /IPV6_CLIENT_PREFIX network; what is no IP address, as it is."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # a zone (fe80::1%eth0) aside
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return LOOPBACK_CLIENT
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, IPV6_CLIENT_PREFIX), strict=False))
    return str(ip)
