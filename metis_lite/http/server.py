"""The one HTTP/1.1 server under `metis-lite serve` and `metis-lite models serve`.

An event loop (asyncio, standard library) owns every connection; a worker thread is taken only
by a request that has arrived whole: its head and, when it has one, its body within the limits.
So a client that connects and sends nothing, or sends a byte now and then, costs a socket and a
few hundred bytes, never a worker. What it guards against, each number named in `Limits`:

- at most `max_connections` open connections, `per_client` of them from one client. A client
  is its address normalised (`client_key`): an IPv4 address however it arrives (an
  IPv4-mapped IPv6 one is the same), an IPv6 /64 (one host holds a whole /64), and every
  loopback address as one (127.0.0.2, 127.0.0.3 … are the same machine). When a
  new connection finds either full, the oldest idle connection in its way is closed to admit
  it: idle is every connection whose request is not with a worker or being answered (one that
  sent nothing yet, a kept-alive one between requests, one whose request is still arriving),
  oldest is the one idle the longest (since it opened or got its last answer). So sockets that
  sit open, even a client that reconnects each one as it is closed, never keep a new client
  out. Only when every connection in the way is busy is the new one answered 503 at once;
- a request must arrive whole within `request_timeout_s` of its first byte's turn (408), however
  it is paced; request line 8 KiB (414), headers 16 KiB (431), body `max_body_bytes` (413);
- a fixed pool of `workers` threads and at most `queue_size` whole requests waiting for one;
  past that, 503 SERVICE_BUSY at once, the body already read so the client reads the answer;
- a refused body (413, 411, 408) is answered first and then read and dropped, up to
  DRAIN_BYTES within the request's deadline, before the connection closes: an ordinary client
  sending a 20 MB body reads its 413 rather than a reset;
- a response is written by the loop, so a client that does not read holds no worker, and a
  write that stalls past `request_timeout_s` ends the connection. Its body is written a slice
  at a time, each after the last has left for the socket, so a client that does not read holds
  one copy of its answer, never two or three; and the answers held for clients that have not
  read them yet are bounded: `max_held_bytes` in all and `held_per_client` for one client. An
  answer past either is answered 503 SERVICE_BUSY instead (and dropped), unless nothing is
  held yet (one answer always goes) or it is small (`SMALL_ANSWER_BYTES`: bounded by the
  connections already). So sockets that ask for a large document and never read cost the
  service at most those bounds, however many they are.

What a request means is the app's (`App`): the index service's routes (service_routes.py) or
the model server's (model_routes.py). The app also shapes the server's own refusals, so each
protocol's clients read errors in their own shape.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from metis_lite.http.wire import (
    MAX_HEADER_BYTES,
    MAX_REQUEST_LINE,
    Head,
    HttpError,
    Request,
    Response,
    client_key,
    log_exception,
    parse_head,
)
from metis_lite.settings import REQUEST_BODY_MAX_BYTES

WORKERS = 16
"""Requests handled at once."""

QUEUE_SIZE = 64
"""Whole requests waiting for a worker; past this they are answered 503."""

REQUEST_TIMEOUT_S = 15.0
"""A request must arrive whole within this long, and no write may stall longer."""

KEEP_ALIVE_S = 5.0
"""A kept-alive connection that starts no new request within this long is closed quietly."""

MAX_CONNECTIONS = 1024
"""Open connections in all; a new one past this closes the oldest idle one, or is answered 503
when none is idle (the module says which)."""

MAX_CONNECTIONS_PER_CLIENT = 256
"""Open connections from one client (`client_key`), as MAX_CONNECTIONS: one client (or one
attacker) cannot hold them all. Every loopback client is one client."""

MAX_HELD_BYTES = 256 * 1024 * 1024
"""Bytes of answers held for clients that have not read them yet, in all; an answer past it is
answered 503 (the module says which). Above the largest document served back (64 MiB), four
times over."""

HELD_PER_CLIENT = 64 * 1024 * 1024
"""Bytes of unread answers held for one client (`client_key`): a quarter of MAX_HELD_BYTES, so
one client that asks and never reads cannot take the whole of it."""

SMALL_ANSWER_BYTES = 64 * 1024
"""An answer this small is never refused for the bytes held: every JSON answer of the API is
(a search's, a page of facts), and the connections bound what such answers hold
(MAX_CONNECTIONS of them: 64 MiB)."""

WRITE_SLICE = 64 * 1024
"""A body is handed to the socket this much at a time, the next once the last has left."""

LISTEN_BACKLOG = 512
"""Connections the kernel holds until the loop accepts them (asyncio would set 100: a burst
past it waits a second for the client's SYN to be sent again)."""

READ_CHUNK = 64 * 1024

DRAIN_BYTES = 64 * 1024 * 1024
"""A refused body is read and dropped up to this much, so that its client reads the answer."""

REFUSAL_DRAIN_S = 1.0
"""How long a connection refused at accept (503) is read before it closes."""

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass(frozen=True)
class Limits:
    """The numbers a server is held to (see the module)."""

    workers: int = WORKERS
    queue_size: int = QUEUE_SIZE
    request_timeout_s: float = REQUEST_TIMEOUT_S
    max_body_bytes: int = REQUEST_BODY_MAX_BYTES
    keep_alive: bool = False
    keep_alive_s: float = KEEP_ALIVE_S
    max_connections: int = MAX_CONNECTIONS
    per_client: int = MAX_CONNECTIONS_PER_CLIENT
    max_held_bytes: int = MAX_HELD_BYTES
    held_per_client: int = HELD_PER_CLIENT


class App(Protocol):
    """The routes behind a server. `handle` runs on a worker thread and must not block on the
    client; `refuse` shapes the server's own answers (400, 408, 411, 413, 414, 431, 500, 503)."""

    def handle(self, request: Request) -> Response: ...

    def refuse(
        self, status: int, message: str, head: Head | None, headers: tuple[tuple[str, str], ...]
    ) -> Response: ...


@dataclass(eq=False)
class _Connection:
    """One open connection as the table sees it: busy while a worker answers its request and
    the answer is written, else idle since `idle_since` (the loop's clock). `client` is the
    peer's address as logged, `key` the client it counts as (client_key)."""

    client: str
    key: str
    task: asyncio.Task[None]
    idle_since: float
    busy: bool = False


class _Refused(Exception):
    """End the connection with this answer, then drain up to `unread` bytes of its body."""

    def __init__(
        self, response: Response, head: Head | None, unread: int | None, drain_s: float
    ) -> None:
        self.response = response
        self.head = head
        self.unread = unread
        self.drain_s = drain_s


class Server:
    """A bound server: `serve_forever()` on one thread, `shutdown()` from another, `close()`.

    Binding happens here, so a busy port is an OSError before anything else starts."""

    def __init__(
        self,
        app: App,
        address: tuple[str, int],
        *,
        limits: Limits = Limits(),
        access_log: bool = True,
    ) -> None:
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.socket = sock
        self.server_address = sock.getsockname()[:2]
        self.app = app
        self.limits = limits
        self.access_log = access_log
        self._pool = ThreadPoolExecutor(limits.workers, thread_name_prefix="http-worker")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopping = False
        self._done = threading.Event()
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self._per_client: Counter[str] = Counter()
        self._in_flight = 0
        self._held = 0
        self._held_by: Counter[str] = Counter()
        self._closers: list[Callable[[], None]] = []
        self._closed = False

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        host = str(self.server_address[0])
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    # -- running --------------------------------------------------------------------------

    def serve_forever(self, poll_interval: float | None = None, *, signals: bool = False) -> None:
        """Serve until `shutdown()` (or, with `signals`, SIGTERM or SIGINT). `poll_interval` is
        accepted for socketserver's callers and means nothing here."""
        try:
            asyncio.run(self._main(signals))
        finally:
            self._done.set()

    def shutdown(self) -> None:
        """Stop serving and wait until `serve_forever` has returned (from another thread)."""
        self._stopping = True
        loop, stop = self._loop, self._stop
        if loop is None or stop is None:
            return
        try:
            loop.call_soon_threadsafe(stop.set)
        except RuntimeError:  # the loop has already closed
            return
        self._done.wait()

    def on_close(self, closer: Callable[[], None]) -> None:
        """Call `closer` when the server closes (the service's bases, after the socket)."""
        self._closers.append(closer)

    def server_close(self) -> None:
        """Release the socket and the workers (a request still running finishes unheard),
        then what `on_close` named; only the first call does anything."""
        if self._closed:
            return
        self._closed = True
        self._stopping = True
        self.socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for closer in self._closers:
            closer()

    close = server_close

    async def _main(self, signals: bool) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stopping:
            return
        if signals and threading.current_thread() is threading.main_thread():
            for number in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(number, self._stop.set)
        server = await asyncio.start_server(
            self._connection, sock=self.socket, limit=READ_CHUNK, backlog=LISTEN_BACKLOG
        )
        try:
            await self._stop.wait()
        finally:
            server.close()
            tasks = list(self._connections)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- one connection -------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if peer else "-"
        key = client_key(client)
        task = asyncio.current_task()
        assert task is not None
        if not self._make_room(key):
            await self._refuse_at_accept(reader, writer)
            return
        connection = _Connection(client, key, task, asyncio.get_running_loop().time())
        self._connections[task] = connection
        self._per_client[key] += 1
        try:  # cancelled (closed for a newer connection, or at shutdown) while in either part
            try:
                buffer = bytearray()
                first = True
                while not self._stopping:
                    if not await self._exchange(reader, writer, connection, buffer, first=first):
                        break
                    first = False
            except _Refused as refused:
                await self._answer_and_drain(reader, writer, refused)
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._forget(task)
            writer.close()

    def _make_room(self, key: str) -> bool:
        """Whether a new connection from the client `key` may open: there is room, or the
        oldest idle connection in its way (the client's own when its share is full) was closed
        for it."""
        if self._per_client[key] >= self.limits.per_client:
            return self._close_oldest_idle(key)
        if len(self._connections) >= self.limits.max_connections:
            return self._close_oldest_idle(None)
        return True

    def _close_oldest_idle(self, key: str | None) -> bool:
        idle = [c for c in self._connections.values() if not c.busy and key in (None, c.key)]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.idle_since)
        self._forget(oldest.task)
        oldest.task.cancel()  # its own `finally` closes the socket
        return True

    def _forget(self, task: asyncio.Task[None]) -> None:
        """Take a connection out of the table (once: eviction and its own end both call this)."""
        connection = self._connections.pop(task, None)
        if connection is None:
            return
        self._per_client[connection.key] -= 1
        if not self._per_client[connection.key]:
            del self._per_client[connection.key]

    async def _exchange(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: _Connection,
        buffer: bytearray,
        *,
        first: bool,
    ) -> bool:
        """Read one request, have a worker answer it, write the answer; False: close."""
        loop = asyncio.get_running_loop()
        client = connection.client
        if not first and not buffer:
            try:
                async with asyncio.timeout(self.limits.keep_alive_s):
                    data = await reader.read(READ_CHUNK)
            except TimeoutError:
                return False
            if not data:
                return False
            buffer += data
        deadline = loop.time() + self.limits.request_timeout_s
        request = await self._read_request(reader, writer, client, buffer, deadline)
        if request is None:
            return False
        connection.busy = True
        try:
            return await self._answer(writer, connection, request)
        finally:
            connection.busy = False
            connection.idle_since = loop.time()

    async def _answer(
        self, writer: asyncio.StreamWriter, connection: _Connection, request: Request
    ) -> bool:
        """Have a worker answer a whole request and write the answer; False: close."""
        loop = asyncio.get_running_loop()
        client = connection.client
        if self._in_flight >= self.limits.workers + self.limits.queue_size:
            busy = self.app.refuse(
                503,
                "the service is busy: try again in a moment",
                request.head,
                (("Retry-After", "1"),),
            )
            await self._write(writer, busy, request.head, client, close=True)
            return False
        self._in_flight += 1
        try:
            response = await loop.run_in_executor(self._pool, self._handle, request, connection.key)
        finally:
            self._in_flight -= 1
        close = (
            not self.limits.keep_alive
            or request.head.wants_close
            or response.close
            or self._stopping
        )
        held = 0 if request.head.method == "HEAD" else len(response.body)
        if not self._may_hold(connection.key, held):
            held = 0
            response = self._too_much_held(request)
        self._held += held
        self._held_by[connection.key] += held
        try:
            await self._write(writer, response, request.head, client, close=close)
        finally:
            self._held -= held
            self._held_by[connection.key] -= held
            if self._held_by[connection.key] <= 0:
                del self._held_by[connection.key]
        return not close

    def _may_hold(self, key: str, size: int) -> bool:
        """Whether an answer of `size` bytes may be held for the client `key` until it reads
        it: small, or within both bounds, or the first held (of all, or of the client). The
        loop's own state; a worker may read it too (two integers: at worst a moment old)."""
        if size <= SMALL_ANSWER_BYTES:
            return True
        held, mine = self._held, self._held_by[key]
        over_all = held > 0 and held + size > self.limits.max_held_bytes
        over_mine = mine > 0 and mine + size > self.limits.held_per_client
        return not (over_all or over_mine)

    async def _read_request(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client: str,
        buffer: bytearray,
        deadline: float,
    ) -> Request | None:
        head: Head | None = None
        try:
            async with asyncio.timeout_at(deadline):
                end = await self._read_head(reader, buffer)
                if end is None:
                    return None  # the client closed before a whole head
                head = parse_head(bytes(buffer[:end]))
                del buffer[: end + 4]
                length = head.content_length()
                if length is not None and length > self.limits.max_body_bytes:
                    too_large = HttpError(
                        413, f"the body is over the limit of {self.limits.max_body_bytes} bytes"
                    )
                    unread = length - len(buffer)
                    raise self._refusal(too_large, head, unread, self.limits.request_timeout_s)
                if length and len(buffer) < length:
                    if "100-continue" in (head.header("expect") or "").lower():
                        writer.write(_CONTINUE)
                    while len(buffer) < length:
                        data = await reader.read(READ_CHUNK)
                        if not data:
                            return None  # the client went away mid-body
                        buffer += data
                body = bytes(buffer[: length or 0])
                del buffer[: length or 0]
        except TimeoutError:
            timed_out = HttpError(
                408, f"the request did not arrive within {self.limits.request_timeout_s:g} s"
            )
            raise self._refusal(timed_out, head, None, REFUSAL_DRAIN_S) from None
        except HttpError as exc:
            raise self._refusal(exc, head, None, REFUSAL_DRAIN_S) from None
        return Request(head, body, client, has_length=length is not None)

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader, buffer: bytearray) -> int | None:
        """Read until the blank line ending the head; its offset, or None at end of stream."""
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                return end
            if len(buffer) > MAX_REQUEST_LINE and buffer.find(b"\r\n", 0, MAX_REQUEST_LINE) < 0:
                raise HttpError(414, f"the request line is over {MAX_REQUEST_LINE} bytes")
            if len(buffer) > MAX_REQUEST_LINE + MAX_HEADER_BYTES:
                raise HttpError(431, f"headers over {MAX_HEADER_BYTES} bytes")
            data = await reader.read(READ_CHUNK)
            if not data:
                return None
            buffer += data

    def _refusal(
        self, exc: HttpError, head: Head | None, unread: int | None, drain_s: float
    ) -> _Refused:
        response = self.app.refuse(exc.status, exc.message, head, exc.headers)
        return _Refused(response, head, unread, drain_s)

    def _handle(self, request: Request, key: str) -> Response:
        """On a worker: the app's answer; an error that escapes it is a logged 500. An answer
        that could not be held now for the client `key` is dropped here, on the worker, not
        kept until the loop gets to it (the loop decides again: the bounds are its own)."""
        try:
            response = self.app.handle(request)
        except Exception as exc:
            log_exception(f"{request.method} {request.path}", exc)
            return self.app.refuse(500, "internal error", request.head, ())
        if request.method != "HEAD" and not self._may_hold(key, len(response.body)):
            return self._too_much_held(request)
        return response

    def _too_much_held(self, request: Request) -> Response:
        return self.app.refuse(
            503,
            "the service holds too many answers that their clients have not read yet: "
            "try again in a moment",
            request.head,
            (("Retry-After", "1"),),
        )

    # -- answering ------------------------------------------------------------------------

    async def _write(
        self,
        writer: asyncio.StreamWriter,
        response: Response,
        head: Head | None,
        client: str,
        *,
        close: bool,
    ) -> None:
        body = b"" if head is not None and head.method == "HEAD" else response.body
        async with asyncio.timeout(self.limits.request_timeout_s):
            head_bytes = response.encode_head(close=close)
            if len(body) <= WRITE_SLICE:  # one write, as one segment: a copy of a few bytes
                writer.write(head_bytes + body)
            else:
                writer.write(head_bytes)
                view = memoryview(body)
                for start in range(0, len(view), WRITE_SLICE):
                    writer.write(view[start : start + WRITE_SLICE])
                    await writer.drain()  # the transport holds one slice: no copy of the body
            await writer.drain()
        if self.access_log:
            method = head.method if head else "-"
            path = head.path if head else "-"
            when = time.strftime("%d/%b/%Y %H:%M:%S")
            print(
                f'{client} - - [{when}] "{method} {path}" {response.status}',
                file=sys.stderr,
                flush=True,
            )

    async def _answer_and_drain(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, refused: _Refused
    ) -> None:
        """Answer, half-close, then read and drop what the client still sends (a refused body)
        for what is left of the request's time, so that it reads the answer, not a reset."""
        client = str((writer.get_extra_info("peername") or ("-",))[0])
        try:
            await self._write(writer, refused.response, refused.head, client, close=True)
            await _drain(reader, writer, refused.unread, refused.drain_s)
        except (OSError, TimeoutError):
            pass

    async def _refuse_at_accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        busy = self.app.refuse(
            503, "too many connections: try again in a moment", None, (("Retry-After", "1"),)
        )
        try:
            async with asyncio.timeout(REFUSAL_DRAIN_S):
                writer.write(busy.encode(close=True))
                await writer.drain()
            await _drain(reader, writer, None, REFUSAL_DRAIN_S)
        except (OSError, TimeoutError):
            pass
        finally:
            writer.close()


async def _drain(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, unread: int | None, seconds: float
) -> None:
    """Half-close, then read and drop up to `unread` bytes (None: until the client closes, at
    most DRAIN_BYTES) for at most `seconds`."""
    if writer.can_write_eof():
        writer.write_eof()
    left = DRAIN_BYTES if unread is None else min(max(unread, 0), DRAIN_BYTES)
    try:
        async with asyncio.timeout(seconds):
            while left > 0:
                data = await reader.read(min(left, READ_CHUNK))
                if not data:
                    break
                left -= len(data)
    except TimeoutError:
        pass
