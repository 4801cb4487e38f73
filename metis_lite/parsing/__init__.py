"""Parsing: one parser per kind of document, each turning a file's bytes into a Document.

    parse(path) ─kind_of(path)─▶ text | markdown | html | pdf | docx | epub | odt | pptx | image
                                   .parse(data, name=stem)
                                   ─▶ Document(title, kind, sections with headings, page/line)

Whatever a file holds, `parse` returns a Document or raises ParseError with a short reason a
person can act on ("encrypted PDF …", "binary file, not text", "empty file"); no other
exception escapes for bad input, so one unreadable file never stops an indexing run.
How each kind is read, and what bounds a hostile file's cost: docs/parsing.md.

A site's pages share a title suffix (" — Python 3.11.2 documentation"): the indexer reads
each page's `<title>` from its head (`head_title`), finds the suffix most pages share
(`site_suffix`, titles.py) and `parse` cuts it (`title_suffix`).

Its face: the package itself (parse, kind_of, head_title, site_suffix), common, pdf and
pdf_worker (the parse pool runs PDFs in a process of their own), and ocr (the languages OCR
reads in, and its time, for the indexer).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from pathlib import Path

from metis_lite.errors import ParseError
from metis_lite.parsing.common import reason
from metis_lite.records import Document

KIND_BY_SUFFIX: dict[str, str] = {
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
    ".text": "txt",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".epub": "epub",
    ".odt": "odt",
    ".pptx": "pptx",
    ".png": "image",
    ".jpg": "image",
    ".jpeg": "image",
    ".tif": "image",
    ".tiff": "image",
    ".webp": "image",
}
"""The kind of a file, by its suffix (compared in lower case)."""

PARSERS: dict[str, str] = {
    "md": "markdown",
    "txt": "text",
    "html": "html",
    "pdf": "pdf",
    "docx": "docx",
    "epub": "epub",
    "odt": "odt",
    "pptx": "pptx",
    "image": "image",
}
"""The module of metis_lite.parsing that reads each kind: imported when a file of that kind is
first read, so that a search, which reads none, does not pay for importing PDFium, python-docx
and lexbor."""

__all__ = [
    "KIND_BY_SUFFIX",
    "PARSERS",
    "head_title",
    "kind_of",
    "parse",
    "parser_for",
    "site_suffix",
]


def parser_for(kind: str) -> Callable[..., Document]:
    """The parse function of a kind (a key of PARSERS): parse(data, name=stem) → Document."""
    return importlib.import_module(f"{__name__}.{PARSERS[kind]}").parse


def kind_of(path: Path) -> str | None:
    """The kind a base reads `path` as, or None when a base does not read such files."""
    return KIND_BY_SUFFIX.get(Path(path).suffix.lower())


def head_title(data: bytes) -> str:
    """An HTML page's `<title>` read from its head alone ("" when none there): html.py."""
    return importlib.import_module(f"{__name__}.html").head_title(data)


def site_suffix(titles: Iterable[str]) -> str:
    """The title suffix most of a site's pages share, or "": titles.py."""
    from metis_lite.parsing.titles import site_suffix as shared

    return shared(titles)


OCR_KINDS = frozenset({"pdf", "image"})
"""The kinds whose parser reads scanned pages by OCR, given the languages (ocr.py)."""


def parse(
    path: Path,
    *,
    kind: str | None = None,
    data: bytes | None = None,
    title_suffix: str = "",
    ocr_languages: str = "",
) -> Document:
    """Parse one file into a Document, by its kind (given, or from its suffix).

    `data` is the file's bytes when the caller has read them already (to hash and parse one
    read); otherwise the file is read here. The title falls back to the file's stem.
    `title_suffix`: its site's suffix (`site_suffix`), cut from the title when it ends so.
    `ocr_languages`: the languages scanned pages and images are read in ("": not read).
    """
    document = _parse(path, kind=kind, data=data, ocr_languages=ocr_languages)
    if title_suffix:
        from metis_lite.parsing.titles import cut_suffix

        document = dataclasses.replace(document, title=cut_suffix(document.title, title_suffix))
    return document


def _parse(path: Path, *, kind: str | None, data: bytes | None, ocr_languages: str) -> Document:
    path = Path(path)
    kind = kind or kind_of(path)
    if kind not in PARSERS:
        raise ParseError(f"not a kind a base reads ({path.suffix or 'no suffix'})")
    parser = parser_for(kind)
    if data is None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ParseError(f"cannot read the file ({exc.strerror or reason(exc)})") from exc
    try:
        if kind in OCR_KINDS:
            return parser(data, name=path.stem, ocr_languages=ocr_languages)
        return parser(data, name=path.stem)
    except ParseError:
        raise
    except RecursionError as exc:
        raise ParseError(f"unreadable {kind}: nested too deeply") from exc
    except MemoryError as exc:
        raise ParseError(f"unreadable {kind}: too large to read in memory") from exc
    except Exception as exc:  # a parser library failing on bad input: still just a bad file
        raise ParseError(f"unreadable {kind} ({type(exc).__name__}: {reason(exc)})") from exc
