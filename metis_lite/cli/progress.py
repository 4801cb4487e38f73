"""`index`'s progress on stderr, readable wherever stderr goes.

On a terminal, one line redrawn in place, its bar filling with the files written (the words
pass), then, once every file is written, with the vectors:

    words   [##########..........] files 265/530 · chunks 5,960 (2,210/s) · vectors 96/5,960 (12.1/s) · ETA 8 min

Elsewhere (a log file, a CI job, a pipe) the same figures as a line of their own: the first
after FIRST_LINE_S, then every PROGRESS_INTERVAL_S however long one step takes (a large PDF, a
slow model), so a log never goes quiet for longer, and a last one when the run ends (its
figures final: a log does not end on the last interval's):

    indexing docs.db: files 265/530 · chunks 5,960 (2,210/s) · vectors 96/5,960 (12.1/s) · ETA 8 min

While a scanned PDF is read by OCR, a page at a time, the page it reads is said too (`OCR
page 37 of 2,000 of scans/book.pdf`), for OCR_SHOWN_S after it was told: a long scan is
seen going on, not stuck at one file.

The figures are the run's own (ingest.py's progress callback, pipeline.py's stages): files
done of those the sources hold, chunks written, vectors written of the chunks that wait for
one. Rates are over the run so far; the ETA is the later of the words pass's end (files left
at the rate so far) and the vectors' (chunks waiting, and those the files left will add, at
the vector rate so far), said only once both rates are known.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from metis_lite.escapes import escape_controls

PROGRESS_INTERVAL_S = 10.0
"""With stderr not a terminal, a progress line at least this often."""

FIRST_LINE_S = 1.0
"""With stderr not a terminal, the first line comes this soon (or at the interval, when it is
shorter): a run of a few seconds says it is on, one shorter says only its last line."""

REDRAW_S = 0.2
"""On a terminal, the line is drawn again at most this often as the run reports, and at
least this often while it does not (so rates and the ETA stay current)."""

BAR_WIDTH = 20
"""Characters of the bar on a terminal."""

OCR_STAGE = "ocr "
"""The stage of a page OCR reads next, the file's name after it (pipeline.Progress)."""

OCR_SHOWN_S = 10.0
"""A page OCR reads is said for this long after it was told, or until the next is (a page
takes ~1 s: docs/parsing.md): once a file's OCR ends, its last page leaves the line."""


class IndexProgress:
    """The progress callback of one index run (`progress(stage, done, total)`) and what shows
    it: `start` before the run, `stop` after it (a terminal's line then ends)."""

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        interval_s: float = PROGRESS_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self._clock = clock
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.interval_s = REDRAW_S if self.terminal else interval_s
        self._lock = threading.Lock()
        self._drawing = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = clock()
        self._drawn = 0.0
        self._width = 0
        self.files = (0, 0)
        self.chunks = 0
        self.vectors: tuple[int, int] | None = None  # (written, written + waiting) when told
        self._chunks_at_vectors = 0  # chunks written when the vectors were last told
        self._files_told = False
        self.ocr: tuple[str, int, int, float] | None = None  # (file, page, pages, told at)

    def __call__(self, stage: str, done: int, total: int) -> None:
        with self._lock:
            if stage == "files":
                self.files = (done, total)
                self._files_told = True
            elif stage == "chunks":
                self.chunks = done
            elif stage == "vectors":
                self.vectors = (done, total)
                self._chunks_at_vectors = self.chunks
            elif stage.startswith(OCR_STAGE):
                self.ocr = (stage[len(OCR_STAGE) :], done, total, self._clock())
        if self.terminal and self._files_told and self._clock() - self._drawn >= REDRAW_S:
            self._draw()

    def start(self) -> IndexProgress:
        self._started = self._clock()
        self._thread = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the progress: a terminal's line drawn a last time and ended; elsewhere a last
        line, the run's final figures."""
        self._stopped.set()
        started, self._thread = self._thread, None
        if started is not None:
            started.join()
        if not self.terminal:
            if started is not None:
                self._write_line()
        elif self._drawn:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> IndexProgress:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def line(self) -> str:
        """The figures as one line of text (the bar not included)."""
        now = self._clock()
        with self._lock:
            (files_done, files_total), chunks = self.files, self.chunks
            vectors = self._vectors_now()
            ocr = self.ocr
        elapsed = max(now - self._started, 1e-6)
        parts = [f"files {files_done:,}/{files_total:,}"]
        words_left = files_total - files_done
        chunk_part = f"chunks {chunks:,}"
        if words_left > 0 and chunks:
            chunk_part += f" ({chunks / elapsed:,.0f}/s)"
        parts.append(chunk_part)
        words_eta = elapsed * words_left / files_done if words_left > 0 and files_done else None
        eta = words_eta
        if vectors is not None:
            written, of = vectors
            waiting = of - written
            vector_part = f"vectors {written:,}/{of:,}"
            if written:
                rate = written / elapsed
                vector_part += f" ({rate:,.1f}/s)"
                coming = chunks * words_left / files_done if files_done and words_left else 0
                vectors_eta = (waiting + coming) / rate
                eta = vectors_eta if eta is None else max(eta, vectors_eta)
            elif waiting:
                eta = None  # the vectors' pace is not known yet
            parts.append(vector_part)
        if eta is not None and eta >= 1:
            parts.append(f"ETA {_duration(eta)}")
        elif eta is None and words_eta is not None and words_eta >= 1:
            parts.append(f"words done in {_duration(words_eta)}")
        if ocr is not None and now - ocr[3] < OCR_SHOWN_S:
            parts.append(f"OCR page {ocr[1]:,} of {ocr[2]:,} of {ocr[0]}")
        return " · ".join(parts)

    def _vectors_now(self) -> tuple[int, int] | None:
        """(vectors written, of how many): as last told, and the chunks written since then,
        which wait too. Called with the lock held."""
        if self.vectors is None:
            return None
        written, total = self.vectors
        return written, total + max(0, self.chunks - self._chunks_at_vectors)

    def _tick(self) -> None:
        wait = self.interval_s if self.terminal else min(FIRST_LINE_S, self.interval_s)
        while not self._stopped.wait(wait):
            wait = self.interval_s
            if self.terminal:
                if self._files_told:
                    self._draw()
            else:
                self._write_line()

    def _write_line(self) -> None:
        self.stream.write(escape_controls(f"indexing {self.label}: {self.line()}") + "\n")
        self.stream.flush()

    def _draw(self) -> None:
        """The terminal's line, drawn again in place (cut to the terminal's width: a line
        that wrapped could not be drawn again)."""
        with self._drawing:
            self._draw_now()

    def _draw_now(self) -> None:
        with self._lock:
            done, total = self.files
            vectors = self._vectors_now()
        stage = "words"
        if done >= total and vectors is not None:  # every file written: the vectors' turn
            stage, (done, total) = "vectors", vectors
        filled = min(BAR_WIDTH, BAR_WIDTH * done // total) if total else BAR_WIDTH
        bar = f"{stage:<7} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}]"
        text = escape_controls(f"{bar} {self.line()}")
        columns = self._columns()
        if columns is not None:  # one short of the width: the cursor stays on the line
            text = text[: columns - 1]
        self._drawn = self._clock()
        self.stream.write("\r" + text + " " * max(0, self._width - len(text)))
        self._width = len(text)
        self.stream.flush()

    def _columns(self) -> int | None:
        """The width of the terminal the line is drawn on (stderr's, not stdout's); None when
        it does not say (0 columns: a pseudo-terminal no one sized, as `script` makes), and
        the line is then drawn whole."""
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            columns = shutil.get_terminal_size((0, 0)).columns
        return columns if columns > 0 else None


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
