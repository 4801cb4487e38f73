"""A stand-in HTTP server on a free loopback port, for tests that play a model server or a
relay: `Loopback(Handler)` serves on a thread at `.url` until `.close()`.

Handlers subclass `Quiet`, which keeps http.server's access log out of the test's output."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Quiet(BaseHTTPRequestHandler):
    """A request handler that logs nothing."""

    def log_message(self, *args: object) -> None:
        pass


class Loopback:
    """`handler` served on 127.0.0.1, a port of the system's choosing, each request on its
    own thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
