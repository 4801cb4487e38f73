"""How many parse workers a run starts: none for a little to parse, else one per changed file
up to the cores asked for; what a kind costs to parse, measured."""

from __future__ import annotations

from collections.abc import Iterable

POOL_MIN_SECONDS = 1.0
"""A run starts worker processes only for two or more new or changed files (by size and time)
that this process would take at least this long to parse, chunk and find the words of
(PARSE_BYTES_PER_S): a worker costs ~0.3 s of a core to start (Python and the parsers
imported), so below this one process is as fast or faster (a few documents changed since the
last run, the service's periodic passes)."""

PARSE_BYTES_PER_S = {
    "html": 24e6,
    "txt": 25e6,
    "md": 10e6,
    "pdf": 3e6,
    "docx": 2e6,
    "epub": 2e6,
    "odt": 2e6,
    "pptx": 2e6,
    "image": 0.2e6,
}
"""Bytes of a kind one core parses, chunks and finds the words of in a second, measured with
parse_pool.parse_chunks (CPU time) on Python's HTML documentation and its reST sources, this
repository's Markdown, texlive's PDFs (PDFium: docs/parsing.md) and the example handbook's
.docx (EPUB, ODT and PPTX, zips of XML like it, are counted as DOCX), a scanned page's PNG
(OCR: 0.8 s for 125 KB); only the order of magnitude matters here."""


def pool_size(changed: Iterable[tuple[int, str]], workers: int) -> int:
    """Worker processes for a run whose new or changed files have these (size, kind): as many
    as asked, no more than the files, and none (1: the indexer's own process) for less than
    POOL_MIN_SECONDS of parsing (PARSE_BYTES_PER_S)."""
    files, seconds = 0, 0.0
    for size, kind in changed:
        files += 1
        seconds += size / PARSE_BYTES_PER_S[kind]
    if files < 2 or seconds < POOL_MIN_SECONDS:
        return 1
    return min(workers, files)
