"""The pages OCR reads, from the parse workers to the run's progress (`OCR page 37 of 2,000
of scans/book.pdf`: cli/progress.py).

A file parsed in a worker process (parse_pool.py) tells each page OCR is about to read
(parsing/ocr.py: `told`) on the worker's answer pipe, as a message of its own before the
file's answer: ("page", (page, pages)), pickled as answers are. The indexer's thread that
waits for the answer hands each on to the pool's `on_page(name, page, pages)` (`answer_of`); a
file parsed in the indexer itself tells it there directly (`heard`). So the one channel from
the workers to the indexer carries it, and a worker killed meanwhile loses nothing more than
its file.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from metis_lite.parsing import ocr

OnPage = Callable[[str, int, int], None]
"""on_page(name, page, pages): OCR reads page `page` of `pages` of the file `name`."""

PAGE = "page"
"""The status of a page message on a worker's answer pipe (an answer's is another)."""

OCR_STAGE = "ocr "
"""The progress stage of a page OCR reads, the file's name after it."""


def told_to(progress: Callable[[str, int, int], None] | None) -> OnPage | None:
    """An on_page that tells a run's progress each page, as the stage "ocr NAME" (pipeline.py)."""
    if progress is None:
        return None
    return lambda name, page, pages: progress(OCR_STAGE + name, page, pages)


def heard(name: str, on_page: OnPage | None) -> AbstractContextManager[None]:
    """While parsing the file `name` in this thread, its pages told to `on_page`."""
    return ocr.told(None if on_page is None else partial(on_page, name))


def sending(results: Connection) -> AbstractContextManager[None]:
    """In a worker: while parsing, each page told on the answer pipe `results`."""

    def send(page: int, pages: int) -> None:
        results.send_bytes(pickle.dumps((PAGE, (page, pages))))

    return ocr.told(send)


def answer_of(results: Connection, name: str, on_page: OnPage | None) -> tuple[str, Any]:
    """A worker's (status, value) for the file `name`, each page message before it handed
    to `on_page`."""
    while True:
        status, value = pickle.loads(results.recv_bytes())
        if status != PAGE:
            return status, value
        if on_page is not None:
            page, pages = value
            on_page(name, page, pages)
