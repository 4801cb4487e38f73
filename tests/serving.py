"""The index service as a real process on 127.0.0.1 (`metis-lite serve BASE… --port 0`, which
prints `serving http://127.0.0.1:PORT` first), for the API, fault, load and fuzz tests; and the
same server in this process (`served`), for tests that look inside it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT

STARTUP_S = 60


@dataclass
class Service:
    process: subprocess.Popen[bytes]
    url: str
    stdout: Path
    stderr: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def output(self) -> str:
        """All the service printed so far, stdout then stderr."""
        return self.stdout.read_text("utf-8", "replace") + self.stderr.read_text("utf-8", "replace")

    def peak_rss_bytes(self) -> int:
        """The process's peak resident memory so far (VmHWM)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc")


def serve(folder: Path, *args: str, env: dict[str, str] | None = None) -> Service:
    out, err = folder / "service.out", folder / "service.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "metis_lite", "serve", *args, "--port", "0"],
            stdout=stdout,
            stderr=stderr,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        first, newline, _ = out.read_text("utf-8").partition("\n")
        if newline:
            return Service(process, first.removeprefix("serving "), out, err)
        if process.poll() is not None:
            raise AssertionError(f"the service exited: {err.read_text()}")
        time.sleep(0.05)
    process.kill()
    process.wait()
    raise AssertionError("the service did not start")


def stop(service: Service) -> None:
    service.process.terminate()
    try:
        service.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        service.process.kill()
        service.process.wait()


@contextmanager
def served(paths: list[str], **options) -> Iterator:
    """make_server over `paths` on a free port of 127.0.0.1, serving from a thread of this
    process until the block ends (no polling, no access log unless `options` say otherwise)."""
    from metis_lite.http.run import make_server

    options.setdefault("poll_s", 0)
    options.setdefault("access_log", False)
    options.setdefault("log", lambda line: None)
    server = make_server(paths, port=0, environ={}, **options)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join()
        server.close()
