"""Embedding a run's batches over one model server and over two side by side: stand-in TEI
servers on loopback that take a fixed time per text, so the ratio measures the spreading
(models/http_pool.py), not a model.

    python3 benchmarks/bench_servers.py            # prints one server's and two servers' time
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metis_lite.models.http import TEIEmbedder  # noqa: E402
from metis_lite.settings import EMBED_BATCH  # noqa: E402

PER_TEXT_S = 0.02
"""Each stand-in's pace: 50 texts a second, one request at a time (multilingual-e5-small on a
few CPU cores)."""

BATCHES = 20
"""Batches of EMBED_BATCH texts per measurement, as an index run hands them over."""


def stand_in() -> ThreadingHTTPServer:
    lock = threading.Lock()  # one request at a time: a server of fixed speed

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            texts = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"]
            with lock:
                time.sleep(PER_TEXT_S * len(texts))
            data = json.dumps([[1.0, float(len(t)), 0.5] for t in texts]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def seconds(urls: list[str]) -> float:
    texts = [f"passage {i} " * 40 for i in range(EMBED_BATCH)]
    with TEIEmbedder(urls[0], urls=urls[1:]) as embedder:
        embedder.embed_documents(texts)  # connections opened, batch sizes settled
        started = time.perf_counter()
        for _ in range(BATCHES):
            embedder.embed_documents(texts)
        return time.perf_counter() - started


def main() -> None:
    servers = [stand_in(), stand_in()]
    urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
    one, two = seconds(urls[:1]), seconds(urls)
    texts = BATCHES * EMBED_BATCH
    print(f"one server:  {one:.2f} s for {texts} texts ({texts / one:.0f} texts/s)")
    print(f"two servers: {two:.2f} s for {texts} texts ({texts / two:.0f} texts/s)")
    print(f"ratio: {one / two:.2f}x")
    for server in servers:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
