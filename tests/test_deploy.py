"""docs/deploy.md's recipe, run: Debian's nginx on loopback, with examples/deploy's own
configuration (its ports and fail_timeout changed), in front of two `metis-lite serve
--read-only` readers of one published copy, under a steady load of searches with a token:

1. a new copy is published: both readers switch to it, and answers find what it added;
2. one reader is killed with `kill -9`: nginx sends its requests to the other one;
3. it is started again: nginx sends it requests again.

Not one search fails. nginx runs as the user running the test, from its own prefix in a
temporary folder (`-p`, `daemon off`, every path inside it): no root path is read or written.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, words_only_base

from metis_lite.copies.publish import publish

NGINX = shutil.which("nginx") or next(
    (p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None
)
pytestmark = pytest.mark.skipif(
    NGINX is None,
    reason="Debian's nginx is not installed (scripts/test installs it: scripts/install-system)",
)

EXAMPLE = ROOT / "examples" / "deploy" / "nginx-metis-lite.conf"
TOKEN = "deploy-test-token-0123456789abcdef"
FAIL_TIMEOUT_S = 2
"""The example's fail_timeout (10 s) made shorter, so the test waits less for a reader back."""
CLIENTS = 3
STEP_S = 20.0
"""The longest any one step may take (a switch, a restart): the whole test stays near 30 s."""

MAIN = """\
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
{user}
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/temp/body;
    proxy_temp_path {prefix}/temp/proxy;
    fastcgi_temp_path {prefix}/temp/fastcgi;
    uwsgi_temp_path {prefix}/temp/uwsgi;
    scgi_temp_path {prefix}/temp/scgi;
    add_header X-Reader $upstream_addr always;  # the test's own: which reader answered
    include {prefix}/metis-lite.conf;
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def nginx_conf(prefix: Path, listen: int, readers: list[int]) -> Path:
    """examples/deploy's file with this test's ports and fail_timeout, in a main config."""
    conf = EXAMPLE.read_text(encoding="utf-8")
    servers = re.findall(r"server 127\.0\.0\.1:\d+", conf)
    assert len(servers) == len(readers), "the example names two readers"
    for old, port in zip(servers, readers, strict=True):
        conf = conf.replace(old, f"server 127.0.0.1:{port}", 1)
    conf = re.sub(r"listen 127\.0\.0\.1:\d+;", f"listen 127.0.0.1:{listen};", conf)
    conf = conf.replace("fail_timeout=10s", f"fail_timeout={FAIL_TIMEOUT_S}s")
    (prefix / "metis-lite.conf").write_text(conf, encoding="utf-8")
    (prefix / "temp").mkdir()
    user = "user root;" if os.geteuid() == 0 else ""  # workers as the test's own user
    main = prefix / "nginx.conf"
    main.write_text(MAIN.format(prefix=prefix, user=user), encoding="utf-8")
    return main


def wait_for_port(port: int, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + STEP_S * 3
    while True:
        assert process.poll() is None, f"{what} exited"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, f"{what} never listened on {port}"
            time.sleep(0.05)


def start_reader(folder: Path, port: int, dest: Path, tokens: Path) -> subprocess.Popen:
    log = (folder / f"reader-{port}.log").open("ab")
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "metis_lite", "serve", "--read-only", "--no-access-log"),
            *("--port", str(port), "--tokens", str(tokens), f"handbook={dest}"),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )
    log.close()
    wait_for_port(port, process, f"the reader on {port}")
    return process


@dataclass
class Load:
    """Searches sent through nginx, one after another on each of CLIENTS threads."""

    url: str
    answers: list[tuple[float, int, str, bool, str]] = field(default_factory=list)
    """(when it was sent, HTTP status or -1, the reader that answered, whether the new
    document came, the question)."""
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, n: int) -> None:
        question = ("marker words", "alpha words", "words here")[n % 3]
        with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            while not self.stop.is_set():
                sent = time.monotonic()
                try:
                    response = client.post(
                        f"{self.url}/v1/bases/handbook/search",
                        json={"question": question, "mode": "keyword"},
                    )
                    status, reader = response.status_code, response.headers.get("x-reader", "")
                    new = status == 200 and "later.md" in response.text
                except httpx.HTTPError:
                    status, reader, new = -1, "", False
                with self.lock:
                    self.answers.append((sent, status, reader, new, question))

    def since(self, moment: float) -> list[tuple[float, int, str, bool, str]]:
        with self.lock:
            return [a for a in self.answers if a[0] >= moment]

    def wait_for(self, check, what: str) -> None:
        deadline = time.monotonic() + STEP_S
        while not check():
            assert time.monotonic() < deadline, f"{what} did not happen within {STEP_S:g} s"
            time.sleep(0.05)


def reader_copy(port: int) -> str | None:
    health = httpx.get(
        f"http://127.0.0.1:{port}/v1/health", headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()
    return health["bases"][0]["copy"]["published_id"]


def test_nginx_in_front_of_two_readers_loses_no_search_through_a_publish_and_a_kill(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for n, text in enumerate(("alpha words here", "beta words there", "gamma marker words")):
        (src / f"d{n}.md").write_text(f"# Doc {n}\n\n{text}\n")
    live = tmp_path / "live.db"
    with words_only_base(live, src) as base:
        base.index()
    published = tmp_path / "published"
    published.mkdir()
    dest = published / "handbook.db"
    publish(live, dest)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"token": TOKEN, "bases": ["handbook"]}]}))

    ports = [free_port(), free_port()]
    listen = free_port()
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    conf = nginx_conf(prefix, listen, ports)
    readers = [start_reader(tmp_path, port, dest, tokens) for port in ports]
    nginx = subprocess.Popen(
        [str(NGINX), "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    load = Load(f"http://127.0.0.1:{listen}")
    clients = [threading.Thread(target=load.run, args=(n,)) for n in range(CLIENTS)]
    addresses = [f"127.0.0.1:{port}" for port in ports]
    try:
        wait_for_port(listen, nginx, "nginx")
        for thread in clients:
            thread.start()
        started = time.monotonic()
        load.wait_for(
            lambda: {a[2] for a in load.since(started)} >= set(addresses), "both readers answering"
        )

        # 1. A new copy: both readers switch to it between requests.
        (src / "later.md").write_text("# Later\n\nmarker words of the later copy\n")
        with words_only_base(live) as base:
            base.index()
        wanted = publish(live, dest).publication.id
        load.wait_for(lambda: all(reader_copy(p) == wanted for p in ports), "the switch")
        switched = time.monotonic()
        load.wait_for(
            lambda: {a[2] for a in load.since(switched) if a[3]} >= set(addresses),
            "answers from the new copy on both readers",
        )

        # 2. One reader killed: nginx retries its requests on the other.
        readers[0].send_signal(signal.SIGKILL)
        readers[0].wait(timeout=30)
        killed = time.monotonic()
        retried = killed + FAIL_TIMEOUT_S + 1.0  # past fail_timeout: nginx tries it again
        load.wait_for(lambda: len(load.since(retried)) >= 20, "answers after the kill")

        # 3. Back on its port: nginx sends it requests again after fail_timeout.
        readers[0] = start_reader(tmp_path, ports[0], dest, tokens)
        back = time.monotonic()
        load.wait_for(
            lambda: sum(a[2] == addresses[0] for a in load.since(back)) >= 10,
            "answers from the reader started again",
        )
        ended = time.monotonic()
    finally:
        load.stop.set()
        for thread in clients:
            thread.join(timeout=60)
        nginx.terminate()
        nginx.wait(timeout=30)
        for reader in readers:
            if reader.poll() is None:
                reader.terminate()
                reader.wait(timeout=30)

    statuses = Counter(a[1] for a in load.answers)
    assert set(statuses) == {200}, statuses  # not one search lost, through all three steps
    after_kill = load.since(killed)
    assert any(a[2] == addresses[1] for a in after_kill)
    assert not any(a[2] == addresses[0] for a in after_kill if a[0] < back)
    asked = [a for a in load.since(switched) if a[4] == "marker words"]
    assert asked and all(a[3] for a in asked)  # every search sent after the switch: new copy
    errors = (prefix / "error.log").read_text()  # nginx saw the dead reader, and retried
    assert "connect() failed (111: Connection refused)" in errors, errors[-2000:]
    assert ended - started < 4 * STEP_S
    for port in ports:
        log = (tmp_path / f"reader-{port}.log").read_text()
        assert "Traceback" not in log, log


class StubReader:
    """Answers as a reader does when its queue is full while `busy` (503 SERVICE_BUSY with
    Retry-After, the request's body read first), else 200 with the body it was sent."""

    def __init__(self) -> None:
        self.busy = False
        self.asked = 0
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                stub.asked += 1
                status, headers = 200, [("Content-Type", "text/plain")]
                if stub.busy:
                    status, headers = 503, [("Content-Type", "application/json")]
                    headers.append(("Retry-After", "1"))
                    body = b'{"error": {"code": "SERVICE_BUSY", "message": "queue full"}}'
                self.send_response(status)
                for name, value in (*headers, ("Content-Length", str(len(body)))):
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_busy_readers_503_is_asked_again_elsewhere_and_never_takes_a_reader_out(tmp_path):
    """A reader's 503 is asked once more of the next reader, without counting against
    max_fails: a busy reader stays in rotation, and when every reader is busy the client gets
    their 503 with its Retry-After — never nginx's 502 "no live upstreams" for fail_timeout."""
    readers = [StubReader(), StubReader()]
    listen = free_port()
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    conf = nginx_conf(prefix, listen, [r.port for r in readers])
    nginx = subprocess.Popen(
        [str(NGINX), "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(listen, nginx, "nginx")
        with httpx.Client(base_url=f"http://127.0.0.1:{listen}", timeout=30) as client:
            readers[0].busy = True  # one reader busy: each of its requests goes to the other
            for n in range(20):
                answer = client.post("/v1/search", content=f"question {n}".encode())
                assert (answer.status_code, answer.text) == (200, f"question {n}")
            assert readers[0].asked >= 5, readers[0].asked  # still asked: not taken out

            readers[1].busy = True  # both busy: the client hears it, and may come back
            for _ in range(6):
                answer = client.post("/v1/search", content=b"q")
                assert answer.status_code == 503, (answer.status_code, answer.text)
                assert answer.headers["Retry-After"] == "1"
                assert answer.json()["error"]["code"] == "SERVICE_BUSY"

            readers[0].busy = readers[1].busy = False  # at once, not after fail_timeout
            answer = client.post("/v1/search", content=b"back")
            assert (answer.status_code, answer.text) == (200, "back")
    finally:
        nginx.terminate()
        nginx.wait(timeout=30)
        for reader in readers:
            reader.close()
