"""The HTTP edge attacked as a client and an attacker would, against a real `metis-lite serve`
on loopback.

Each fault is bounded in time and count: the service runs with a 2 s request deadline, so the
whole module takes seconds. What must hold: idle and slow clients take no worker (health and
search answer within 1 s meanwhile), more idle sockets than one address may hold — and a client
that reconnects each one the service closes — never keep a new client out, bad input is a 4xx
(never a 5xx), a page of another site cannot start indexing, a 20 MB body reads back as 413 with
an ordinary client, every answer carries the headers that keep a browser from framing or
sniffing it, and the service refuses to start with a busy port or a token HTTP cannot carry, in
one line.
"""

from __future__ import annotations

import json
import selectors
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES, ROOT, words_only_base
from serving import Service, serve, stop

from metis_lite.base.core import Base
from metis_lite.http.run import make_server
from metis_lite.http.server import (
    HELD_PER_CLIENT,
    MAX_CONNECTIONS_PER_CLIENT,
    Limits,
    Server,
)
from metis_lite.http.wire import LOOPBACK_CLIENT, Response, client_key
from metis_lite.settings import QUESTION_WORDS_MAX

DEADLINE_S = 2.0
"""The served request deadline (--request-timeout): slow clients are cut off after this."""

ANSWER_S = 1.0
"""What an ordinary request may take while the service is under attack."""

IDLE = 100
SLOW = 16
CLIENTS = 200
FLOOD = MAX_CONNECTIONS_PER_CLIENT + 44
"""Idle sockets from 127.0.0.1, more than one address may hold (300)."""


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("faults")
    with words_only_base(folder / "words.db", EXAMPLES) as words:
        words.index()
    with Base(folder / "team.db", create=True) as team:
        team.configure(kind="memory", embedding={"provider": "tei", "url": "http://127.0.0.1:9"})
        team.remember("Ana works on the billing service", key="ana/work")
    running = serve(
        folder,
        str(folder / "words.db"),
        str(folder / "team.db"),
        "--poll",
        "0",
        "--no-access-log",
        "--request-timeout",
        str(DEADLINE_S),
    )
    yield running
    stop(running)
    assert "Traceback" not in running.stderr.read_text()


def ordinary_requests_answer_fast(url: str) -> None:
    """Health and a keyword search, each answered 200 within ANSWER_S."""
    with httpx.Client(timeout=ANSWER_S * 4) as client:
        for _ in range(3):
            for method, path, body in (
                ("GET", "/v1/health", None),
                ("POST", "/v1/bases/words/search", {"question": "travel", "mode": "keyword"}),
            ):
                started = time.monotonic()
                response = client.request(method, url + path, json=body)
                took = time.monotonic() - started
                assert response.status_code == 200, response.text
                assert took < ANSWER_S, f"{method} {path} took {took:.2f} s"


def raw(port: int, data: bytes, *, timeout: float = 10.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                got = sock.recv(65536)
            except ConnectionResetError:
                break
            if not got:
                break
            chunks.append(got)
    return b"".join(chunks)


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def body(answer: bytes) -> dict:
    return json.loads(answer.partition(b"\r\n\r\n")[2])


# -- idle and slow clients take no worker ---------------------------------------------------


def test_a_hundred_idle_connections_do_not_stop_health_or_search(service):
    idle = [socket.create_connection(("127.0.0.1", service.port), timeout=10) for _ in range(IDLE)]
    try:
        ordinary_requests_answer_fast(service.url)
    finally:
        for sock in idle:
            sock.close()


def test_three_hundred_idle_sockets_from_one_address_do_not_stop_health_or_search(service):
    idle = []
    try:
        for _ in range(FLOOD):
            idle.append(socket.create_connection(("127.0.0.1", service.port), timeout=10))
        ordinary_requests_answer_fast(service.url)
        idle[0].settimeout(10)
        assert idle[0].recv(1) == b"", "the oldest idle socket was closed to admit a newer one"
    finally:
        for sock in idle:
            sock.close()


def test_a_client_that_reconnects_every_closed_socket_does_not_hold_the_service(service):
    """A flood of FLOOD sockets, each reconnected the moment the service closes it: every
    closed one makes room for another, so the flood churns; ordinary requests still get in."""
    stop = threading.Event()
    held = threading.Event()
    reconnects = 0

    def flood() -> None:
        nonlocal reconnects
        selector = selectors.DefaultSelector()

        def connect() -> None:
            sock = socket.create_connection(("127.0.0.1", service.port), timeout=10)
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)

        try:
            for _ in range(FLOOD):
                connect()
            held.set()
            while not stop.is_set():
                for key, _ in selector.select(timeout=0.05):
                    sock = key.fileobj
                    selector.unregister(sock)
                    sock.close()  # type: ignore[union-attr]
                    connect()
                    reconnects += 1
        finally:
            for key in list(selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            selector.close()

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    try:
        assert held.wait(30), "the flood could not open its sockets"
        with httpx.Client(timeout=30) as client:
            for _ in range(5):
                health = client.get(f"{service.url}/v1/health")
                search = client.post(
                    f"{service.url}/v1/bases/words/search",
                    json={"question": "travel", "mode": "keyword"},
                )
                assert (health.status_code, search.status_code) == (200, 200), search.text
    finally:
        stop.set()
        thread.join(30)
    assert reconnects > 0, "the flood reconnected (the service closed its oldest sockets)"


def test_slow_bodies_take_no_worker_and_are_cut_off(service):
    slow = []
    try:
        for n in range(SLOW):
            sock = socket.create_connection(("127.0.0.1", service.port), timeout=10)
            path = b"/v1/bases/team/facts" if n % 2 else b"/v1/bases/words/search"
            method = b"GET" if n % 2 else b"POST"  # GET facts once read its body twice
            sock.sendall(
                method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
            )
            slow.append(sock)
        ordinary_requests_answer_fast(service.url)
        started = time.monotonic()
        for sock in slow:
            sock.settimeout(DEADLINE_S * 3)
            answer = sock.recv(65536)
            assert status(answer) == 408 and body(answer)["error"]["code"] == "REQUEST_TIMEOUT"
        assert time.monotonic() - started < DEADLINE_S * 2
    finally:
        for sock in slow:
            sock.close()


def test_a_question_of_thousands_of_words_is_cut_with_a_warning(service):
    question = " ".join(f"word{n}" for n in range(3000)) + " travel"
    started = time.monotonic()
    answer = httpx.post(
        f"{service.url}/v1/bases/words/search",
        json={"question": question, "mode": "keyword"},
        timeout=30,
    )
    assert answer.status_code == 200
    assert time.monotonic() - started < ANSWER_S
    (cut,) = [w for w in answer.json()["warnings"] if w["code"] == "QUESTION_CUT"]
    assert str(QUESTION_WORDS_MAX) in cut["message"]


def test_two_hundred_clients_at_once_are_answered_never_reset(tmp_path):
    """With 2 workers and a queue of 2, most of 200 simultaneous searches are refused: each
    refusal is a 503 the client reads (its body was read first), never a reset."""
    with words_only_base(tmp_path / "small.db", EXAMPLES) as small:
        small.index()
    server = make_server(
        [str(tmp_path / "small.db")],
        port=0,
        environ={},
        poll_s=0,
        workers=2,
        queue_size=2,
        access_log=False,
        log=lambda line: None,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    search = search_body(
        b'{"question": "travel expenses", "mode": "keyword"}', b"/v1/bases/small/search"
    )
    start_together = threading.Barrier(CLIENTS)

    def client(_: int) -> int:
        start_together.wait(timeout=30)
        return status(raw(server.port, search, timeout=30))

    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            statuses = list(pool.map(client, range(CLIENTS)))
    finally:
        server.shutdown()
        thread.join(10)
        server.close()
    assert set(statuses) <= {200, 503} and statuses.count(200) >= 4, statuses


# -- bad input is a 4xx ---------------------------------------------------------------------


def search_body(text: bytes, path: bytes = b"/v1/bases/words/search") -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(text), text)
    )


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (b"GET /%ff HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 404),
        (b"GET /v1/bases/%ff/facts HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
        (
            "POST /v1/bases/words/search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Length: ²\r\n\r\n".encode(),
            400,
        ),
        (search_body(b'{"question": "x", "top_k": ' + b"7" * 4400 + b"}"), 400),
        (search_body(b'{"question": "x", "top_k": 1' + b"0" * 400 + b"}"), 400),
        (
            search_body(
                b'{"text": "a fact", "replaces": [' + b"1" + b"0" * 30 + b"]}",
                b"/v1/bases/team/facts",
            ),
            400,
        ),
        (
            b"GET /v1/bases/team/facts?offset="
            + b"9" * 5000
            + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            400,
        ),
        (b"GET /v1/health HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505),
        (b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n", 400),
    ],
    ids=["path", "name", "length", "digits", "exponent", "fact id", "offset", "version", "header"],
)
def test_bad_input_is_a_4xx_never_a_5xx(service, request_bytes, expected):
    answer = raw(service.port, request_bytes)
    assert status(answer) == expected, answer[:300]
    assert set(body(answer)["error"]) == {"code", "message"}


# -- another site's page cannot write -------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
        ({"Content-Type": "text/plain"}, 415),
        ({"Content-Type": "multipart/form-data; boundary=x"}, 415),
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "null", "Content-Type": "application/json"}, 403),
    ],
)
def test_a_cross_site_write_is_refused(service, headers, expected):
    response = httpx.post(f"{service.url}/v1/bases/words/index", headers=headers, content=b"")
    assert response.status_code == expected
    assert response.json()["error"]["code"] in ("UNSUPPORTED_MEDIA_TYPE", "FORBIDDEN")


def test_the_services_own_page_may_write(service):
    origin = service.url
    response = httpx.post(
        f"{service.url}/v1/bases/words/search",
        json={"question": "travel", "mode": "keyword"},
        headers={"Origin": origin},
    )
    assert response.status_code == 200


# -- every answer keeps a browser from framing or sniffing it -------------------------------


def test_every_answer_carries_the_framing_and_sniffing_headers(service):
    html = next(p for p in sorted(EXAMPLES.rglob("*.htm*")))
    document = html.relative_to(EXAMPLES).as_posix()
    asked = [
        ("GET", "/v1/health", None, 200),
        ("GET", "/v1/bases", None, 200),
        ("POST", "/v1/bases/words/search", {"question": "travel", "mode": "keyword"}, 200),
        ("GET", "/v1/bases/words/documents/handbook/policies/leave.md", None, 200),
        ("GET", f"/v1/bases/words/documents/handbook/{document}", None, 200),
        ("GET", "/v1/bases/words/documents/handbook/nothing.md", None, 404),
        ("GET", "/", None, 200),
        ("GET", "/v1/nothing", None, 404),
        ("PUT", "/v1/health", None, 405),
        ("POST", "/v1/bases/words/search", {"question": 7}, 400),
    ]
    with httpx.Client(timeout=30) as client:
        for method, path, body, expected in asked:
            answer = client.request(method, service.url + path, json=body)
            assert answer.status_code == expected, (path, answer.text[:200])
            assert answer.headers["X-Frame-Options"] == "DENY", path
            assert answer.headers["X-Content-Type-Options"] == "nosniff", path
            if path.endswith(document):
                assert answer.headers["Content-Security-Policy"].startswith("sandbox")
    too_large = raw(service.port, search_body(b"x" * 70_000))
    assert status(too_large) == 413
    assert b"X-Frame-Options: DENY" in too_large and b"X-Content-Type-Options: nosniff" in too_large


# -- a large body is a 413 the client reads -------------------------------------------------


def test_a_20_mb_body_is_a_413_that_urllib_and_httpx_read(service):
    data = b"x" * (20 * 1024 * 1024)
    url = f"{service.url}/v1/bases/words/search"
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413
    assert json.loads(refused.value.read())["error"]["code"] == "PAYLOAD_TOO_LARGE"
    response = httpx.post(url, content=data, headers={"Content-Type": "application/json"})
    assert response.status_code == 413


# -- start refusals in one line -------------------------------------------------------------


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "metis_lite", "serve", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_a_busy_port_is_one_line(service, tmp_path):
    with words_only_base(tmp_path / "other.db", EXAMPLES):
        pass
    run = start(str(tmp_path / "other.db"), "--port", str(service.port), "--poll", "0")
    assert run.returncode == 1 and not run.stdout
    assert run.stderr.startswith("error: cannot listen on 127.0.0.1:")
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "token", ["tökén-with-accents-0123456789", "token-with-nbsp\u00a00123456789"]
)
def test_a_token_http_cannot_carry_is_refused_at_start(tmp_path, token):
    with words_only_base(tmp_path / "other.db", EXAMPLES):
        pass
    tokens = json.dumps({"tokens": [{"token": token, "bases": ["*"]}]})
    run = start(str(tmp_path / "other.db"), "--port", "0", env={"METIS_TOKENS": tokens})
    assert run.returncode == 2 and not run.stdout
    assert "INVALID_REQUEST" in run.stderr and "Traceback" not in run.stderr


# -- the connection caps, on the server alone -----------------------------------------------


class Echo:
    def handle(self, request):
        return Response(200, b"ok")

    def refuse(self, status, message, head, headers):
        return Response(status, message.encode(), headers)


class Gate(Echo):
    """Holds every request on its worker until `opened` is set: its connections stay busy."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.entered = threading.Semaphore(0)

    def handle(self, request):
        self.entered.release()
        self.opened.wait(30)
        return Response(200, b"ok")


@contextmanager
def running(app, limits: Limits) -> Iterator[Server]:
    server = Server(app, ("127.0.0.1", 0), limits=limits, access_log=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(5)
        server.close()


def test_a_full_share_closes_its_oldest_idle_connection_for_a_new_one():
    with running(Echo(), Limits(per_client=3)) as server:
        held = []
        try:
            for _ in range(3):
                held.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
                time.sleep(0.05)  # so that their ages differ
            time.sleep(0.2)
            assert status(raw(server.port, b"GET / HTTP/1.1\r\n\r\n")) == 200
            held[0].settimeout(5)
            assert held[0].recv(1) == b"", "the oldest idle connection was closed"
            for sock in held[1:]:
                sock.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    sock.recv(1)  # still open: one closed was room enough
        finally:
            for sock in held:
                sock.close()


def test_a_full_share_of_busy_connections_answers_503_and_keeps_them():
    gate = Gate()
    with running(gate, Limits(per_client=3, workers=4)) as server:
        busy = []
        try:
            for _ in range(3):
                sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
                busy.append(sock)
            for _ in range(3):
                assert gate.entered.acquire(timeout=10), "each request reached a worker"
            refused = raw(server.port, b"GET / HTTP/1.1\r\n\r\n")
            assert status(refused) == 503 and b"Retry-After: 1" in refused
            gate.opened.set()
            for sock in busy:
                assert status(sock.recv(65536)) == 200
        finally:
            gate.opened.set()
            for sock in busy:
                sock.close()


# -- slow readers, and who counts as one client ---------------------------------------------

DOCUMENT_BYTES = 6_600_000
"""A document asked for by sockets that never read it (the size of the report's repro)."""

NON_READERS = MAX_CONNECTIONS_PER_CLIENT
"""Sockets that ask for it and never read: as many as one client may open."""

RSS_GROWTH_MAX = 300 * 1024 * 1024
"""What the service's peak memory may grow by while they hold their answers: the unread answers
one client may hold (64 MiB), one more, the few documents read at once, and the allocator's
slack (measured: 135 MiB). Before the bounds, 256 such sockets took the service from 50 MB to
2.8 GB."""


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def non_reader(port: int, address: str, request: bytes) -> socket.socket:
    """A socket from `address` (any 127.x.y.z reaches loopback) that sends `request` and never
    reads: its receive buffer is made small, so the answer stays in the service."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.bind((address, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(request)
    return sock


def test_sockets_that_ask_for_a_large_document_and_never_read_leave_memory_bounded(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    big = docs / "big.txt"
    big.write_text("a small document to index\n")
    with words_only_base(tmp_path / "docs.db", docs) as base:
        base.index()
        (source,) = [s.name for s in base.sources()]
    with big.open("w") as grown:  # served as it is on disk now: no need to index 6.6 MB
        grown.write(("w" * 99 + "\n") * (DOCUMENT_BYTES // 100))
    running = serve(
        tmp_path, str(tmp_path / "docs.db"), "--no-access-log", "--request-timeout", "60"
    )
    path = f"/v1/bases/docs/documents/{source}/big.txt"
    ask = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    sockets: list[socket.socket] = []
    try:
        pid = running.process.pid
        with httpx.Client(timeout=30) as client:  # the document is served whole to a reader
            assert len(client.get(running.url + path).content) == big.stat().st_size
        before = rss_bytes(pid)
        for n in range(NON_READERS):  # from 127.0.0.2, .3, … .9: one client all the same
            sockets.append(non_reader(running.port, f"127.0.0.{2 + n % 8}", ask))
        waiting = selectors.DefaultSelector()
        for sock in sockets:
            waiting.register(sock, selectors.EVENT_READ)
        answered = 0
        deadline = time.monotonic() + 60
        while answered < len(sockets) and time.monotonic() < deadline:
            for key, _ in waiting.select(timeout=1):  # its answer has begun: it was answered
                waiting.unregister(key.fileobj)
                answered += 1
        waiting.close()
        assert answered == len(sockets), f"{answered} of {len(sockets)} were answered"
        held = rss_bytes(pid)
        peak = rss_bytes(pid, "VmHWM")
        with httpx.Client(timeout=ANSWER_S * 4) as client:  # a reader is answered meanwhile
            assert client.get(running.url + "/v1/health").status_code == 200
            searched = client.post(
                running.url + "/v1/bases/docs/search", json={"question": "a", "mode": "keyword"}
            )
            assert searched.status_code == 200, searched.text
        firsts = [sock.recv(64) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
        stop(running)
    statuses = Counter(status(first) for first in firsts)
    assert set(statuses) == {200, 503}, statuses  # some answers held, the rest refused
    assert statuses[200] * DOCUMENT_BYTES <= HELD_PER_CLIENT + DOCUMENT_BYTES, statuses
    assert peak - before < RSS_GROWTH_MAX, f"{before >> 20} MiB, then a peak of {peak >> 20}"
    assert held - before < RSS_GROWTH_MAX, f"{before >> 20} MiB, then {held >> 20}"
    assert "Traceback" not in running.output()


def test_a_client_is_its_address_normalised():
    assert client_key("::ffff:10.1.2.3") == client_key("10.1.2.3") == "10.1.2.3"
    loopback = {client_key(a) for a in ("127.0.0.1", "127.0.0.2", "127.9.9.9", "::1")}
    assert loopback == {client_key("::ffff:127.0.0.1")} == {LOOPBACK_CLIENT}
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff:1") != client_key("2001:db9::1")
    assert client_key("10.1.2.3") != client_key("10.1.2.4")


class Large(Echo):
    """Answers `/small` with two bytes, anything else with a body of `size` bytes."""

    def __init__(self, size: int) -> None:
        self.size = size

    def handle(self, request):
        return Response(200, b"ok" if request.path == "/small" else b"x" * self.size)


LARGE = 16 * 1024 * 1024
"""An answer larger than what the kernel takes off a socket that is not read (4 MiB here)."""


@pytest.mark.parametrize(
    "limits",
    [
        Limits(max_held_bytes=40 * 1024 * 1024, held_per_client=1 << 40),
        Limits(held_per_client=40 * 1024 * 1024),
    ],
    ids=["in all", "one client"],
)
def test_unread_answers_past_the_bound_are_503_and_the_bound_frees_as_they_are_read(limits):
    with running(Large(LARGE), limits) as server:
        ask = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        held = [non_reader(server.port, f"127.0.0.{2 + n}", ask) for n in range(2)]
        try:
            time.sleep(0.5)  # both answers are written as far as the sockets take them
            refused = raw(server.port, ask)  # 16 MiB more would pass 40
            assert status(refused) == 503 and b"Retry-After: 1" in refused
            small = raw(server.port, b"GET /small HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert status(small) == 200 and small.endswith(b"ok")  # small: never refused
            for sock in held:  # read: the bound is free again
                got = bytearray()
                while len(got) < LARGE:
                    chunk = sock.recv(1 << 20)
                    assert chunk, "the held answer was written whole"
                    got += chunk
                assert status(bytes(got[:64])) == 200
            answer = raw(server.port, ask)
            assert status(answer) == 200 and len(answer) > LARGE
        finally:
            for sock in held:
                sock.close()


def test_a_full_service_closes_its_oldest_idle_connection_for_a_new_one():
    with running(Echo(), Limits(max_connections=3, per_client=100)) as server:
        held = []
        try:
            for _ in range(3):  # within one client's share: the service's is what is full
                held.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
                time.sleep(0.05)
            time.sleep(0.2)
            assert status(raw(server.port, b"GET / HTTP/1.1\r\n\r\n")) == 200
            held[0].settimeout(5)
            assert held[0].recv(1) == b"", "the oldest idle connection was closed"
            held[1].settimeout(0.3)
            with pytest.raises(TimeoutError):
                held[1].recv(1)
        finally:
            for sock in held:
                sock.close()


# -- one Host ---------------------------------------------------------------------------


TWO_HOSTS = b"GET %s HTTP/1.1\r\nHost: evil.example\r\nHost: 127.0.0.1\r\n\r\n"


def test_a_request_with_two_host_headers_is_400_for_the_service(service):
    answer = raw(service.port, TWO_HOSTS % b"/v1/health")
    assert status(answer) == 400 and body(answer)["error"]["code"] == "INVALID_REQUEST"
    assert status(raw(service.port, b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")) == 200


def test_a_request_with_two_host_headers_is_400_for_the_model_server():
    from word_models import WordsEmbedder

    from metis_lite.http.model_routes import LIMITS, ModelApp, ModelService

    app = ModelApp(ModelService(WordsEmbedder()))
    with running(app, LIMITS) as server:
        answer = raw(server.port, TWO_HOSTS % b"/health")
        one = raw(
            server.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
    assert status(answer) == 400, answer[:300]
    assert status(one) == 200, one[:300]
