"""A document's passage by address, `metis://BASE/SOURCE/PATH#line=N` or `#page=N`, for agents.

A search result's citation names its base, source, document and line or page; its address
reads the passage back. Only what the base holds can be read: the document is opened through
`documents.read_document` (a file the base indexed, still inside its source's folder), so an
address cannot reach any other file. Nothing is written.

- md and txt: the file's lines around line N (the line a chunk starts on), or the whole text;
- pdf: the text of page N as the base read it (its chunks), or of every page;
- html and docx: the text as the base read it (their citations have no page or line).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from metis_lite.base.core import Base
from metis_lite.errors import DocumentNotFound, InvalidRequest
from metis_lite.parsing.common import decode_text
from metis_lite.records import Citation, Filters
from metis_lite.store.document_file import read_document

SCHEME = "metis"
TEMPLATE = "metis://{base}/{source}/{+path}"
"""The resource template (RFC 6570) agents are shown; a fragment `#line=N` or `#page=N` may follow."""

LINES_BEFORE = 5
"""Lines shown above the cited line: the heading or sentence that leads into the passage."""

LINES_AFTER = 40
"""Lines shown from the cited line on: a chunk of 1,200 characters is some 15 to 30 lines."""

MAX_CHARS = 200_000
"""A whole document is cut after this many characters (about 50,000 tokens); `truncated` says so."""

TEXT_KINDS = {"md": "text/markdown", "txt": "text/plain"}
"""Kinds read from the file itself, line by line; the others are read as the base parsed them."""


@dataclass(frozen=True)
class Address:
    """A parsed `metis://` address."""

    base: str
    source: str
    path: str
    line: int | None = None
    page: int | None = None


@dataclass(frozen=True)
class Passage:
    text: str
    mime_type: str
    first_line: int | None = None  # md and txt: the lines shown, 1-based, inclusive
    last_line: int | None = None
    page: int | None = None
    truncated: bool = False


def address_of(base: str, citation: Citation) -> str | None:
    """The address of a result's passage; None for a base's notes (facts have no file)."""
    if citation.kind == "note":
        return None
    path = urllib.parse.quote(f"{citation.source}/{citation.document}", safe="/")
    fragment = (
        f"#page={citation.page}"
        if citation.page
        else f"#line={citation.line}"
        if citation.line
        else ""
    )
    return f"{SCHEME}://{base}/{path}{fragment}"


def parse_address(uri: str) -> Address:
    """INVALID_REQUEST unless `uri` is `metis://BASE/SOURCE/PATH` with an optional fragment."""
    parts = urllib.parse.urlsplit(uri)
    source, _, path = urllib.parse.unquote(parts.path).lstrip("/").partition("/")
    if parts.scheme != SCHEME or not parts.netloc or not source or not path or parts.query:
        raise InvalidRequest(f"not a passage address: {uri!r} (metis://BASE/SOURCE/PATH#line=N)")
    line = page = None
    if parts.fragment:
        name, _, value = parts.fragment.partition("=")
        if name not in ("line", "page") or not value.isdigit() or int(value) < 1:
            raise InvalidRequest("a passage address ends with #line=N or #page=N (N from 1)")
        line, page = (int(value), None) if name == "line" else (None, int(value))
    return Address(parts.netloc, source, path, line=line, page=page)


def read_passage(base: Base, address: Address) -> Passage:
    """The passage `address` names, from `base` (the base it names, already found)."""
    with base.reading() as store:
        document = read_document(store, address.source, address.path)
    if document.kind in TEXT_KINDS:
        if address.page is not None:
            raise InvalidRequest(f"{document.kind} documents have lines, not pages: use #line=N")
        return _lines(decode_text(document.content), document.kind, address.line)
    if address.line is not None:
        raise InvalidRequest(f"{document.kind} documents have no lines: use #page=N for a pdf")
    return _parsed(base, address)


def _lines(text: str, kind: str, line: int | None) -> Passage:
    lines = text.split("\n")
    if line is None:
        first, last = 1, len(lines)
    elif line > len(lines):
        raise DocumentNotFound(f"the document has {len(lines)} lines, not {line}")
    else:
        first, last = max(1, line - LINES_BEFORE), min(len(lines), line + LINES_AFTER - 1)
    shown = "\n".join(lines[first - 1 : last])
    return Passage(
        shown[:MAX_CHARS],
        TEXT_KINDS[kind],
        first_line=first,
        last_line=last,
        truncated=len(shown) > MAX_CHARS,
    )


def _parsed(base: Base, address: Address) -> Passage:
    """The document's text as the base read it: its chunks in order, of one page if asked."""
    with base.reading() as store:
        ids = store.filtered_chunk_ids(
            Filters(path_prefix=address.path, sources=(address.source,))
        ).tolist()
        chunks = [
            row
            for row in store.chunk_rows(ids).values()
            if row.document == address.path and address.page in (None, row.page)
        ]
    if not chunks:
        where = f" has no page {address.page}" if address.page else " has no text in the base"
        raise DocumentNotFound(f"{address.source}/{address.path}{where}")
    text = "\n\n".join(row.text for row in sorted(chunks, key=lambda row: row.id))
    return Passage(
        text[:MAX_CHARS], "text/plain", page=address.page, truncated=len(text) > MAX_CHARS
    )
