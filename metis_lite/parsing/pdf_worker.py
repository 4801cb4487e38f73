"""PDFium in a process of its own, its memory capped: what reads a PDF's pages for pdf.py.

PDFium inflates a page's content stream whole, however large, through any chain of filters
(a 1.3 MB file holding 1 GiB of spaces, Flate-compressed then written in ASCII85, takes it
2 GB), decrypts before it inflates, and is C code reading hostile bytes. So it runs here, in a
child process whose data segment is capped (RLIMIT_DATA; PDF_MEMORY_BUDGET, or the share of it
an index run's parse worker gives its own PDFium worker: parse_pool.py): an allocation past the
cap aborts PDFium, and with it only this process; the parent reports the file as refused and
starts another. Nothing but text crosses back: the answer is JSON, never pickle.

    parent ─ 8-byte length + {"ocr": languages or "", "ocr_s": seconds} ─▶ worker (stdin)
    parent ─ 8-byte length + the PDF's bytes ─▶ worker (stdin)
    parent ◀─ 8-byte length + {"ocr_page": [page, pages]} ─ worker (stdout): OCR reads it next
    parent ◀─ 8-byte length + {"pages": [raw text of each page], "title": …, "heading": …,
                               "ocr": [pages read by OCR], "unread": n, "unread_why": …}
                              or {"refused": reason} ─ worker (stdout)

A page with no text layer, or one of almost nothing over an image that covers most of it (a
scan with a scanner's stamp), is rendered here in grey at ocr.OCR_DPI and read by Tesseract
(ocr.py), one process a page, each bounded in time and memory, all of a file's within
ocr.OCR_FILE_S; without OCR languages such a page is counted as unread, with why.

Run as `python -m metis_lite.parsing.pdf_worker [CAP_BYTES]`; it answers until its stdin closes.
"""

from __future__ import annotations

import json
import signal
import struct
import sys
from collections.abc import Callable
from typing import IO

from metis_lite.parsing.ocr import Listener
from metis_lite.parsing.scans import scanned_pages

PDF_MEMORY_BUDGET = 1024 * 1024 * 1024
"""What PDFium may use to read PDFs at one time (its workers' data segments, heap and anonymous
maps, together): 1 GiB. A process reading PDFs one at a time gives it all to its one worker;
an index run's parse workers share it (parse_pool.py), so a run's PDFium workers stay within
it however many cores the run has."""

PDF_MEMORY_MIN = 256 * 1024 * 1024
"""The least cap a PDFium worker is given, so at most PDF_MEMORY_BUDGET // PDF_MEMORY_MIN (4)
PDFs are read at once: three times what PDFium needs for any of the 309 PDFs of Debian's
texlive-latex-base-doc, read one after the other (the largest 7 MB, 1,611 pages: a peak of
82 MB)."""

LENGTH = struct.Struct(">Q")
"""Each message is prefixed by its length in bytes, 8 bytes big-endian."""

EOF_WITHIN = 1024
"""A complete PDF ends with `%%EOF` within this many trailing bytes; a truncated one does not."""


def read_pages(
    data: bytes, ocr_languages: str = "", ocr_s: float = 0.0, said: Listener | None = None
) -> dict:
    """{"pages": [each page's raw text, "" for none], "title": metadata title, "heading": the
    largest-font line of its first page with text, "ocr": the pages OCR read, "unread": pages
    with no text layer left unread, "unread_why": why} of a PDF, or {"refused": why} for one
    PDFium cannot open. Scanned pages are read by OCR in `ocr_languages` ("": none) within
    `ocr_s` seconds in all, each page told to `said(page, pages)` first."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        return {"refused": _load_error(getattr(exc, "err_code", None), str(exc), data, pdfium_c)}
    try:
        pages = [_page_text(pdf, n) for n in range(len(pdf))]
        scans = scanned_pages(pdf, pages, ocr_languages, ocr_s, said)
        first = next(
            (n for n, text in enumerate(pages) if text.strip() and n + 1 not in scans.read), None
        )
        heading = _largest_line(pdf, first) if first is not None else ""
        return {"pages": pages, "title": _title(pdf), "heading": heading, **scans.answer()}
    finally:
        pdf.close()


def _page_text(pdf, number: int) -> str:
    import pypdfium2 as pdfium

    try:
        page = pdf[number]
    except pdfium.PdfiumError:  # one damaged page does not make the others unreadable
        return ""
    try:
        textpage = page.get_textpage()
        try:
            return textpage.get_text_bounded()
        finally:
            textpage.close()
    except pdfium.PdfiumError:
        return ""
    finally:
        page.close()


HEADING_LINES_MAX = 3
"""A title set in a large font may wrap: up to this many lines of its size are read as one."""

HEADING_CHARS_READ = 20_000
"""Only the first characters of a page are looked at for its largest line (a title is at its
top; a page of 100,000 characters costs no 100,000 font look-ups)."""


def _largest_line(pdf, number: int) -> str:
    """The line of page `number` set in the largest font, if larger than the page's body text
    (the size most of its characters have), with the lines right after it in that size."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        page = pdf[number]
        textpage = page.get_textpage()
    except pdfium.PdfiumError:
        return ""
    try:
        lines: list[tuple[str, float]] = []
        chars: list[str] = []
        size = 0.0
        for index in range(min(pdfium_c.FPDFText_CountChars(textpage.raw), HEADING_CHARS_READ)):
            code = pdfium_c.FPDFText_GetUnicode(textpage.raw, index)
            if code in (10, 13):
                if "".join(chars).strip():
                    lines.append(("".join(chars), size))
                chars, size = [], 0.0
                continue
            chars.append(chr(code) if 0 < code < 0x110000 else " ")
            if not chr(code).isspace():
                size = max(size, round(pdfium_c.FPDFText_GetFontSize(textpage.raw, index), 1))
        if "".join(chars).strip():
            lines.append(("".join(chars), size))
    finally:
        textpage.close()
        page.close()
    return _largest(lines)


def _largest(lines: list[tuple[str, float]]) -> str:
    if not lines:
        return ""
    weight: dict[float, int] = {}
    for text, size in lines:
        weight[size] = weight.get(size, 0) + len(text)
    body = max(weight, key=lambda s: (weight[s], -s))
    top = max(size for _, size in lines)
    if top <= body:
        return ""
    start = next(n for n, (_, size) in enumerate(lines) if size == top)
    kept = [lines[start][0]]
    for text, size in lines[start + 1 : start + HEADING_LINES_MAX]:
        if size != top:
            break
        kept.append(text)
    return " ".join(" ".join(kept).split())


def _title(pdf) -> str:
    try:
        return pdf.get_metadata_value("Title") or ""
    except Exception:  # noqa: BLE001 - a damaged Info dictionary only costs the title
        return ""


def _load_error(code: int | None, message: str, data: bytes, pdfium_c) -> str:
    if code == pdfium_c.FPDF_ERR_PASSWORD:
        return "encrypted PDF (a password is needed to read it)"
    if code == pdfium_c.FPDF_ERR_SECURITY:
        return "encrypted PDF (an encryption PDFium does not read)"
    if b"%%EOF" not in data[-EOF_WITHIN:]:
        return "not a valid PDF (truncated: no %%EOF at its end)"
    detail = message.removeprefix("Failed to load document ").strip("().")
    return f"not a valid PDF ({detail[:120]})"


PAGE_KEY = "ocr_page"
"""The one key of a page message (see the module): an answer never has it."""


def page_message(page: int, pages: int) -> bytes:
    """A page OCR reads next, as this worker tells it before its answer."""
    return json.dumps({PAGE_KEY: [page, pages]}).encode()


def read_answer(read: Callable[[], bytes | None], said: Listener) -> bytes | None:
    """The worker's answer (`read` reads its next message; None: it ended), each page message
    before it handed to `said(page, pages)`."""
    prefix = b'{"' + PAGE_KEY.encode() + b'"'
    while (message := read()) is not None and message.startswith(prefix):
        page, pages = json.loads(message)[PAGE_KEY]
        said(int(page), int(pages))
    return message


def write_message(stream: IO[bytes], payload: bytes) -> None:
    stream.write(LENGTH.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def read_message(stream: IO[bytes], *, limit: int | None = None) -> bytes | None:
    """One message, or None when the stream ended (between messages or inside one) or the
    message says it is longer than `limit` bytes."""
    head = stream.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    (size,) = LENGTH.unpack(head)
    if limit is not None and size > limit:
        return None
    payload = stream.read(size)
    return payload if len(payload) == size else None


def cap_memory(limit: int) -> None:
    """Cap this process's data segment; where the OS has no such limit, run uncapped."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    except (ImportError, AttributeError, ValueError, OSError):
        pass


def main() -> int:
    # Ctrl-C reaches the whole process group: the indexer ends this worker (its stdin ends),
    # which must not print a traceback of its own meanwhile.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else PDF_MEMORY_BUDGET
    cap_memory(limit)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer

    def said(page: int, pages: int) -> None:
        write_message(answers, page_message(page, pages))

    while (options := read_message(requests)) is not None:
        if (data := read_message(requests)) is None:
            break
        ocr = json.loads(options)
        try:
            answer = read_pages(data, ocr["ocr"], ocr["ocr_s"], said)
        except MemoryError:  # Python's share of the cap ran out (PDFium's own aborts instead)
            answer = {"refused": f"it needs more than {limit >> 20:,} MiB of memory"}
        except Exception as exc:  # noqa: BLE001 - pypdfium2 failing on bad input: a bad file
            answer = {"refused": f"unreadable pdf ({type(exc).__name__}: {str(exc)[:120]})"}
        write_message(answers, json.dumps(answer).encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
