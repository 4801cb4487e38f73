"""PDF (.pdf): one section per page that has a text layer, with its 1-based page number.

PDFium (Chrome's PDF engine, through pypdfium2, whose wheels ship it) reads the text of each
page and repairs what a damaged file lets it (a broken cross-reference table is rebuilt). A word
split by a hyphen at a line's end is joined again when the next line goes on in lower case
("configu-\\nração" → "configuração"); a hyphen before a capital or a digit is kept
("PO-\\n2231"). A page without a text layer (a scan) is read by OCR when languages are given
(scans.py, in the worker), its section marked `ocr`; else it is skipped, and counted unread.

PDFium runs in a worker process of its own, its memory capped (pdf_worker.py): a PDF bomb, or
a file that crashes PDFium, costs that process, never the indexer or the service, and is
refused with its reason. One worker serves a process, one PDF at a time (PDFium is not
thread-safe either): the service's threads, which index several bases and read cited pages
back, take turns; it is started when a PDF is first read and again after it died. Its cap is
the whole PDF_MEMORY_BUDGET, or the share of it an index run gives each parse worker
(`set_memory_cap`, parse_pool.py).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from metis_lite.errors import ParseError
from metis_lite.parsing import ocr, titles
from metis_lite.parsing.common import document
from metis_lite.parsing.pdf_worker import (
    PDF_MEMORY_BUDGET,
    read_answer,
    read_message,
    write_message,
)
from metis_lite.records import Document, Section

HEADER_WITHIN = 1024
"""A PDF's `%PDF-` header must begin within this many leading bytes (as readers allow)."""

PDF_DEADLINE_S = 300.0
"""The longest one PDF may take PDFium; then the worker is stopped and the file refused. The
1,611 pages of LaTeX's source3.pdf take ~6 s on a busy 2-core machine."""

MAX_ANSWER_BYTES = 512 * 1024 * 1024
"""The most text the worker may send back for one PDF; a longer answer counts as its death."""

LINE_END_HYPHENS = ("\x02", "\ufffe")
"""What PDFium puts for a hyphen it found at the end of a line, the line break removed."""

_HYPHENATED = re.compile(r"(\w)-[ \t]*\n[ \t]*(\w)")
_SPACES = re.compile(r"[ \t\u00a0]+")
_BLANK_RUNS = re.compile(r"\n{3,}")


def parse(data: bytes, *, name: str, ocr_languages: str = "") -> Document:
    """Read a PDF's pages; the title is its metadata title when a real one, else the largest
    line of its first page, else its first line, each when it reads as a title, else `name`
    (titles.py). Scanned pages are read by OCR in `ocr_languages` ("": not read).

    Raises ParseError for what cannot be read: not a PDF, damaged beyond repair, encrypted
    with a password, more than PDFium may use to read it, or no text layer on any page.
    """
    if not data.strip():
        raise ParseError("empty file")
    if b"%PDF-" not in data[:HEADER_WITHIN]:
        raise ParseError("not a PDF (no %PDF- header)")
    answer = _WORKER.read(data, ocr_languages)
    if "refused" in answer:
        raise ParseError(str(answer["refused"]))
    pages = [page_text(raw) for raw in answer["pages"]]
    if not pages:
        raise ParseError("PDF has no pages")
    read = set(answer["ocr"])
    sections = [
        Section(text=text, page=n, ocr=n in read) for n, text in enumerate(pages, start=1) if text
    ]
    if not sections:
        pages_read = f"{len(pages)} page" + ("s" if len(pages) > 1 else "")
        why = answer["unread_why"]
        code, _, hint = why.partition(": ") if why.startswith(ocr.NO_TEXT_LAYER) else ("", "", "")
        prefix = f"{code}: " if code else ""
        raise ParseError(
            f"{prefix}no text layer on any page ({pages_read}; a scan?)"
            + (f"; {hint}" if hint else f"; OCR: {why}" if why else "")
        )
    first_line = sections[0].text.split("\n", 1)[0]
    title = titles.choose(answer["title"], (answer["heading"], first_line), name)
    found = document(title, "pdf", sections)
    unread = answer["unread"]
    return dataclasses.replace(found, unread_pages=unread, unread_why=answer["unread_why"])


def _checked(answer: object) -> dict:
    """The worker's answer as pdf.parse reads it, whatever the worker sent: text only, each
    string valid Unicode (a lone surrogate, which no store can write, becomes "?")."""
    if isinstance(answer, dict) and isinstance(answer.get("refused"), str):
        return {"refused": answer["refused"]}
    pages = answer.get("pages") if isinstance(answer, dict) else None
    title = answer.get("title") if isinstance(answer, dict) else None
    heading = answer.get("heading", "") if isinstance(answer, dict) else None
    if not isinstance(pages, list) or not isinstance(title, str) or not isinstance(heading, str):
        raise ParseError("PDFium's worker answered something other than the text of a PDF")
    valid = [_valid(page) if isinstance(page, str) else "" for page in pages]
    assert isinstance(answer, dict)  # pages is a list: answer was a dict
    read, unread, why = answer.get("ocr"), answer.get("unread"), answer.get("unread_why")
    scans = {
        "ocr": [n for n in read if isinstance(n, int)] if isinstance(read, list) else [],
        "unread": unread if isinstance(unread, int) else 0,
        "unread_why": _valid(why) if isinstance(why, str) else "",
    }
    return {"pages": valid, "title": _valid(title), "heading": _valid(heading), **scans}


def _valid(text: str) -> str:
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


class _Worker:
    """The process that runs PDFium for this one (see the module), and the lock that gives it
    one PDF at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self.memory = PDF_MEMORY_BUDGET
        """The data segment the worker is capped at (bytes)."""

    def read(self, data: bytes, ocr_languages: str = "") -> dict:
        """The worker's answer for one PDF, its scanned pages read by OCR in `ocr_languages`
        ("": none); ParseError when it died or ran out of time."""
        ocr_s = ocr.OCR_FILE_S if ocr_languages else 0.0
        options = json.dumps({"ocr": ocr_languages, "ocr_s": ocr_s}).encode()
        with self._lock:
            process = self._running()
            assert process.stdin is not None and process.stdout is not None
            expired = threading.Event()

            def expire() -> None:
                expired.set()
                process.kill()

            timer = threading.Timer(PDF_DEADLINE_S + ocr_s, expire)
            timer.start()
            try:
                write_message(process.stdin, options)
                write_message(process.stdin, data)
                stdout = process.stdout
                answer = read_answer(lambda: read_message(stdout, limit=MAX_ANSWER_BYTES), ocr.tell)
            except OSError:  # the worker died while it was sent the file
                answer = None
            finally:
                timer.cancel()
            if answer is None:
                raise self._died(
                    process, timed_out=expired.is_set(), seconds=PDF_DEADLINE_S + ocr_s
                )
        return _checked(json.loads(answer))

    def cap(self, limit: int) -> None:
        """Cap the worker's data segment at `limit` bytes, from its next start."""
        with self._lock:
            self.memory = limit

    def close(self) -> None:
        with self._lock:
            if self._process is not None:
                self._stop(self._process)
                self._process = None

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            package_root = str(Path(__file__).resolve().parents[2])
            path = os.environ.get("PYTHONPATH")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, path]))}
            self._process = subprocess.Popen(
                [sys.executable, "-m", "metis_lite.parsing.pdf_worker", str(self.memory)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
        return self._process

    def _died(
        self, process: subprocess.Popen[bytes], *, timed_out: bool, seconds: float
    ) -> ParseError:
        self._stop(process)
        self._process = None
        if timed_out:
            return ParseError(f"PDFium took longer than {seconds:.0f} s to read it")
        limit = self.memory // 2**20
        code = process.returncode
        how = f"signal {-code}" if code and code < 0 else f"exit {code}"
        return ParseError(
            f"PDFium stopped reading it ({how}): it needs more than {limit:,} MiB of memory "
            "(a PDF bomb?), or it crashed on it"
        )

    @staticmethod
    def _stop(process: subprocess.Popen[bytes]) -> None:
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_WORKER = _Worker()
"""This process's PDFium worker: a resource held for the process's life, closed at exit."""

atexit.register(_WORKER.close)


def set_memory_cap(limit: int) -> None:
    """Cap this process's PDFium worker at `limit` bytes from its next start (an index run's
    parse worker, given its share of PDF_MEMORY_BUDGET, calls it before reading any PDF)."""
    _WORKER.cap(limit)


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
