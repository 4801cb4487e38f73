"""PDF (.pdf): one section per page that has a text layer, with its 1-based page number.

PDFium (Chrome's PDF engine, through pypdfium2, whose wheels ship it) reads the text of each
page and repairs what a damaged file lets it (a broken cross-reference table is rebuilt). A word
split by a hyphen at a line's end is joined again when the next line goes on in lower case
("configu-\\nração" → "configuração"); a hyphen before a capital or a digit is kept
("PO-\\n2231"). A page without a text layer (a scan) is skipped.

PDFium inflates a page's content stream whole, however large: a 1 MB file holding a stream of
1 GB of spaces takes it 2 GB of memory. Before PDFium opens a file, each Flate stream in it is
inflated here, in steps, without keeping what comes out, and a file with a stream past
MAX_STREAM_BYTES (or all streams past MAX_INFLATED_BYTES) is refused as a PDF bomb. The
streams of an encrypted PDF cannot be checked so (they inflate only once decrypted).

PDFium is not thread-safe: one lock serializes every call into it in this process (the service
indexes several bases, and reads a cited page back, on threads of its own); each object is
closed before the lock is let go, so none is left to a garbage collector on another thread.
"""

from __future__ import annotations

import re
import threading
import zlib

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from metis_lite.errors import ParseError
from metis_lite.parsing.common import collapse, document, reason
from metis_lite.records import Document, Section

HEADER_WITHIN = 1024
"""A PDF's `%PDF-` header must begin within this many leading bytes (as readers allow)."""

EOF_WITHIN = 1024
"""A complete PDF ends with `%%EOF` within this many trailing bytes; a truncated one does not."""

MAX_STREAM_BYTES = 128 * 1024 * 1024
"""The most one stream of a PDF may inflate to. The largest in the 309 PDFs of Debian's
texlive-latex-base-doc inflates to 2.4 MB; a page drawn in detail may hold tens of MB."""

MAX_INFLATED_BYTES = 1024 * 1024 * 1024
"""The most all streams of a PDF may inflate to together (those 309 PDFs: 266 MB in all)."""

INFLATE_STEP_BYTES = 4 * 1024 * 1024
"""A stream is inflated 4 MiB at a time, each step forgotten before the next."""

LINE_END_HYPHENS = ("\x02", "\ufffe")
"""What PDFium puts for a hyphen it found at the end of a line, the line break removed."""

_PDFIUM = threading.Lock()
"""Held around every use of PDFium (see the module)."""

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
    check_streams(data)
    with _PDFIUM:
        pages, title = _read(data)
    if not pages:
        raise ParseError("PDF has no pages")
    sections = [Section(text=text, page=n) for n, text in enumerate(pages, start=1) if text]
    if not sections:
        pages_read = f"{len(pages)} page" + ("s" if len(pages) > 1 else "")
        raise ParseError(f"no text layer on any page ({pages_read}; a scan?)")
    first_line = sections[0].text.split("\n", 1)[0]
    return document(title or first_line or name, "pdf", sections)


def check_streams(data: bytes) -> None:
    """Refuse a PDF one of whose Flate streams inflates past MAX_STREAM_BYTES, or all of
    whose streams inflate past MAX_INFLATED_BYTES (see the module)."""
    view = memoryview(data)
    total = 0
    at = 0
    while (keyword := data.find(b"stream", at)) != -1:
        at = keyword + len(b"stream")
        if data[keyword - 3 : keyword] == b"end":
            continue
        start = at + (2 if data[at : at + 2] == b"\r\n" else 1)
        end = data.find(b"endstream", start)
        end = len(data) if end == -1 else end
        if _zlib_header(data[start : start + 2]):
            total += _inflated_size(view[start:end])
            if total > MAX_INFLATED_BYTES:
                limit = MAX_INFLATED_BYTES // 2**20
                raise ParseError(f"PDF bomb (its streams inflate past {limit:,} MiB)")
        at = max(at, end)


def _zlib_header(head: bytes) -> bool:
    return len(head) == 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0


def _inflated_size(stream: memoryview) -> int:
    """How much one zlib stream inflates to, up to just past MAX_STREAM_BYTES (then refused);
    a damaged stream counts for what inflated before the damage."""
    inflater = zlib.decompressobj()
    size = 0
    pending: bytes | memoryview = stream
    try:
        while True:
            out = inflater.decompress(pending, INFLATE_STEP_BYTES)
            size += len(out)
            if size > MAX_STREAM_BYTES:
                limit = MAX_STREAM_BYTES // 2**20
                raise ParseError(f"PDF bomb (a stream inflates past {limit:,} MiB)")
            pending = inflater.unconsumed_tail
            if inflater.eof or not out:
                return size
    except zlib.error:
        return size


def _read(data: bytes) -> tuple[list[str], str]:
    """Each page's cleaned text ("" for a page without text, or one PDFium cannot read) and
    the metadata title. Called with the lock held."""
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        raise _load_error(exc, data) from exc
    try:
        texts = [_page_text(pdf, n) for n in range(len(pdf))]
        return texts, _metadata_title(pdf)
    finally:
        pdf.close()


def _page_text(pdf: pdfium.PdfDocument, number: int) -> str:
    try:
        page = pdf[number]
    except pdfium.PdfiumError:  # one damaged page does not make the others unreadable
        return ""
    try:
        textpage = page.get_textpage()
        try:
            return page_text(textpage.get_text_bounded())
        finally:
            textpage.close()
    except pdfium.PdfiumError:
        return ""
    finally:
        page.close()


def _load_error(exc: pdfium.PdfiumError, data: bytes) -> ParseError:
    code = getattr(exc, "err_code", None)
    if code == pdfium_c.FPDF_ERR_PASSWORD:
        return ParseError("encrypted PDF (a password is needed to read it)")
    if code == pdfium_c.FPDF_ERR_SECURITY:
        return ParseError("encrypted PDF (an encryption PDFium does not read)")
    if b"%%EOF" not in data[-EOF_WITHIN:]:
        return ParseError("not a valid PDF (truncated: no %%EOF at its end)")
    message = reason(exc).removeprefix("Failed to load document ").strip("().")
    return ParseError(f"not a valid PDF ({message})")


def page_text(raw: str) -> str:
    """A page's text, cleaned: hyphenation joined, spaces collapsed, paragraphs kept apart."""
    raw = raw.replace("\r\n", "\n").replace("\r", "\n")
    for hyphen in LINE_END_HYPHENS:
        raw = raw.replace(hyphen, "-\n")
    text = _HYPHENATED.sub(_join_hyphenated, raw)
    lines = [line.strip() for line in _SPACES.sub(" ", text).split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def _join_hyphenated(match: re.Match[str]) -> str:
    before, after = match[1], match[2]
    return before + after if before.isalpha() and after.islower() else match[0]


def _metadata_title(pdf: pdfium.PdfDocument) -> str:
    try:
        title = pdf.get_metadata_value("Title")
    except Exception:  # a damaged Info dictionary only costs the title
        return ""
    return collapse(title) if title else ""
