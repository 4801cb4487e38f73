"""PDF (.pdf): one section per page that has a text layer, with its 1-based page number.

pypdf reads the text of each page. A word split by a hyphen at a line's end is joined again
when the next line goes on in lower case ("configu-\\nração" → "configuração"); a hyphen before
a capital or a digit is kept ("PO-\\n2231"). A page without a text layer (a scan) is skipped.
"""

from __future__ import annotations

import io
import re

from pypdf import PdfReader
from pypdf.errors import DependencyError

from metis_lite.errors import ParseError
from metis_lite.parsing.common import collapse, document, reason
from metis_lite.records import Document, Section

HEADER_WITHIN = 1024
"""A PDF's `%PDF-` header must begin within this many leading bytes (as readers allow)."""

EOF_WITHIN = 1024
"""A complete PDF ends with `%%EOF` within this many trailing bytes; a truncated one does not."""

_HYPHENATED = re.compile(r"(\w)-[ \t]*\n[ \t]*(\w)")
_SPACES = re.compile(r"[ \t\u00a0]+")
_BLANK_RUNS = re.compile(r"\n{3,}")


def parse(data: bytes, *, name: str) -> Document:
    """Read a PDF's pages; the title is its metadata title, else its first line, else `name`.

    Raises ParseError for what cannot be read: not a PDF, damaged beyond repair, encrypted
    with a password, or no text layer on any page.
    """
    if not data.strip():
        raise ParseError("empty file")
    if b"%PDF-" not in data[:HEADER_WITHIN]:
        raise ParseError("not a PDF (no %PDF- header)")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            _decrypt(reader)
        pages = list(reader.pages)
    except ParseError:
        raise
    except Exception as exc:  # pypdf raises many types for damaged files
        if b"%%EOF" not in data[-EOF_WITHIN:]:
            raise ParseError("not a valid PDF (truncated: no %%EOF at its end)") from exc
        raise ParseError(f"not a valid PDF ({reason(exc)})") from exc
    if not pages:
        raise ParseError("PDF has no pages")
    sections = []
    for number, page in enumerate(pages, start=1):
        try:
            text = page_text(page.extract_text())
        except Exception:  # one damaged page does not make the others unreadable
            continue
        if text:
            sections.append(Section(text=text, page=number))
    if not sections:
        pages_read = f"{len(pages)} page" + ("s" if len(pages) > 1 else "")
        raise ParseError(f"no text layer on any page ({pages_read}; a scan?)")
    first_line = sections[0].text.split("\n", 1)[0]
    return document(_metadata_title(reader) or first_line or name, "pdf", sections)


def _decrypt(reader: PdfReader) -> None:
    """Open an encrypted PDF that needs no password to be read (only an owner password)."""
    try:
        opened = reader.decrypt("")
    except DependencyError as exc:  # AES needs the `cryptography` package
        raise ParseError(f"encrypted PDF ({reason(exc)})") from exc
    if not opened:
        raise ParseError("encrypted PDF (a password is needed to read it)")


def page_text(raw: str) -> str:
    """A page's text, cleaned: hyphenation joined, spaces collapsed, paragraphs kept apart."""
    text = _HYPHENATED.sub(_join_hyphenated, raw.replace("\r\n", "\n").replace("\r", "\n"))
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def _join_hyphenated(match: re.Match[str]) -> str:
    before, after = match[1], match[2]
    return before + after if before.isalpha() and after.islower() else match[0]


def _metadata_title(reader: PdfReader) -> str:
    try:
        title = reader.metadata.title if reader.metadata else None
    except Exception:  # a damaged Info dictionary only costs the title
        return ""
    return collapse(str(title)) if title else ""
