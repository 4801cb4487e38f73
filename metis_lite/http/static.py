"""The console's files, served read-only from one folder: no listing, nothing outside it, known
kinds only, each with the headers that keep a browser from guessing or framing it."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

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

HTML_CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"


class StaticFolder:
    """Files of one folder: `find` gives a file's bytes and type, or None."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def find(self, url_path: str) -> tuple[bytes, str] | None:
        try:
            path = urllib.parse.unquote(url_path, errors="strict")
        except UnicodeDecodeError:
            return None
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
