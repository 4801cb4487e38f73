"""A document's own file, read back for whoever follows a result's citation (the console's link).

Only what the base holds can be read: the source must be one of the base's folder sources and
the path a document the base has indexed in it. The file is opened without following a final
symlink and its real path must still lie inside the source's real folder, so a link swapped in
after indexing cannot turn the route into a reader of other files. Nothing is written.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from metis_lite.errors import DocumentNotFound
from metis_lite.store import Store

MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
"""The largest file served back; larger ones are refused (the reader can open it from disk)."""

MEDIA_TYPES = {
    "md": "text/plain; charset=utf-8",
    "txt": "text/plain; charset=utf-8",
    "html": "text/html",
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
}
"""What a browser is told each kind is. Markdown is shown as the text it is, not rendered."""


@dataclass(frozen=True)
class DocumentFile:
    source: str
    path: str  # inside its source, '/'-separated, as citations give it
    kind: str
    media_type: str
    content: bytes


_DOCUMENT = """
SELECT s.path, d.kind FROM documents d JOIN sources s ON s.id = d.source_id
WHERE s.name = ? AND d.path = ?
"""


def read_document(store: Store, source: str, path: str) -> DocumentFile:
    """The bytes of the document `path` of `source`, as they are on disk now.

    DocumentNotFound when the base holds no such document, it is a note (no file), or its file
    is gone, is no longer a regular file, or now resolves outside the source."""
    shown = f"{source}/{path}"
    row = store.db.execute(_DOCUMENT, (source, path)).fetchone()
    if row is None:
        raise DocumentNotFound(f"this base holds no document {shown}")
    folder, kind = row
    if folder is None or kind not in MEDIA_TYPES:
        raise DocumentNotFound(f"{shown} is a note of the base, not a file")
    root = Path(folder)
    content = _read_inside(root, root / path, shown)
    return DocumentFile(source, path, kind, MEDIA_TYPES[kind], content)


def _read_inside(root: Path, file: Path, shown: str) -> bytes:
    try:
        fd = os.open(
            file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        )
    except OSError as exc:
        raise DocumentNotFound(f"{shown} cannot be opened: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DocumentNotFound(f"{shown} is not a regular file any more")
        if not _real_path(fd, file).is_relative_to(root.resolve()):
            raise DocumentNotFound(f"{shown} now leads outside its source")
        if info.st_size > MAX_DOCUMENT_BYTES:
            raise DocumentNotFound(
                f"{shown} is {info.st_size:,} bytes, over the {MAX_DOCUMENT_BYTES:,} served back"
            )
        with os.fdopen(fd, "rb", closefd=True) as handle:
            fd = -1
            return handle.read(MAX_DOCUMENT_BYTES + 1)[:MAX_DOCUMENT_BYTES]
    finally:
        if fd >= 0:
            os.close(fd)


def _real_path(fd: int, file: Path) -> Path:
    """Where the opened descriptor really is (Linux names it in /proc), not what its name says."""
    proc = Path(f"/proc/self/fd/{fd}")
    return Path(os.readlink(proc)) if proc.is_symlink() else file.resolve()
