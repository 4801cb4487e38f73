"""A document's own file, read back for whoever follows a result's citation (the console's link).

Only what the base holds can be read: the source must be one of the base's folder sources and
the path a document the base has indexed in it. The file is opened as the indexer opens it
(files.py): a link is followed only inside the source and the opened descriptor must be a
regular file inside it, so a link swapped in after indexing cannot turn the route into a
reader of other files. Nothing is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from metis_lite.errors import DocumentNotFound
from metis_lite.store import Store
from metis_lite.store.files import Unreadable, open_inside, read_all

MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
"""The largest file served back; larger ones are refused (the reader can open it from disk)."""

MEDIA_TYPES = {
    "md": "text/plain; charset=utf-8",
    "txt": "text/plain; charset=utf-8",
    "html": "text/html",
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "epub": "application/epub+zip",
    "odt": "application/vnd.oasis.opendocument.text",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "image": "application/octet-stream",
}
"""What a browser is told each kind is. Markdown is shown as the text it is, not rendered."""

IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".webp": "image/webp",
}
"""An image's media type, by its suffix (its kind is `image` whatever its format)."""


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
    cannot be opened as the indexer opens it (files.open_inside): gone, no longer a regular
    file, or now resolving outside the source."""
    shown = f"{source}/{path}"
    row = store.db.execute(_DOCUMENT, (source, path)).fetchone()
    if row is None:
        raise DocumentNotFound(f"this base holds no document {shown}")
    folder, kind = row
    if folder is None or kind not in MEDIA_TYPES:
        raise DocumentNotFound(f"{shown} is a note of the base, not a file")
    if os.path.realpath(folder) != folder:
        raise DocumentNotFound(
            f"{shown} cannot be opened: its source folder is now a symlink, never followed"
        )
    try:
        fd, opened = open_inside(Path(folder) / path, folder)
    except Unreadable as exc:
        raise DocumentNotFound(f"{shown} cannot be opened: {exc.reason}") from None
    try:
        if opened.st_size > MAX_DOCUMENT_BYTES:
            raise DocumentNotFound(
                f"{shown} is {opened.st_size:,} bytes, over the {MAX_DOCUMENT_BYTES:,} served back"
            )
        content = read_all(fd, opened.st_size)[: opened.st_size]
    finally:
        os.close(fd)
    media_type = MEDIA_TYPES[kind]
    if kind == "image":
        media_type = IMAGE_TYPES.get(Path(path).suffix.lower(), media_type)
    return DocumentFile(source, path, kind, media_type, content)
