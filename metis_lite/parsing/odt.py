"""OpenDocument text (.odt): sections cut at `text:h` headings by their outline level.

content.xml holds the body: headings (`text:h`, with `text:outline-level`), paragraphs
(`text:p`), lists of them and tables, in order. A table becomes one paragraph with one line per
row, its cells joined by " | ", as in a Word file. Left out: footnotes and endnotes, comments,
tracked changes (deleted text lives there), and the generated indexes (a table of contents
repeats the headings). The title is meta.xml's `dc:title` when it is a real one
(titles.choose), else the first heading, else the file's name.

The zip and its XML are read within archive.py's bounds; a file whose manifest says its parts
are encrypted (saved with a password) is refused as such.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from metis_lite.errors import ParseError
from metis_lite.parsing.archive import END, START, Archive, descend
from metis_lite.parsing.common import collapse, document
from metis_lite.parsing.titles import choose
from metis_lite.records import Document, Section

LABEL = "ODT"
CELL_SEPARATOR = " | "
LEVEL_MAX = 10
"""The deepest outline level ODF defines; a heading claiming more is read at this level."""

_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
_MANIFEST = "{urn:oasis:names:tc:opendocument:xmlns:manifest:1.0}"
_DC = "{http://purl.org/dc/elements/1.1/}"

HEADING, PARAGRAPH = _TEXT + "h", _TEXT + "p"
ROW, CELL, TABLE = _TABLE + "table-row", _TABLE + "table-cell", _TABLE + "table"
SPACES = frozenset({_TEXT + "s", _TEXT + "tab"})
LINE_BREAK = _TEXT + "line-break"

SKIPPED = frozenset(
    _TEXT + tag
    for tag in (
        "note tracked-changes table-of-content alphabetical-index illustration-index "
        "table-index object-index user-index bibliography sequence-decls variable-decls "
        "user-field-decls"
    ).split()
) | {_OFFICE + "annotation", _OFFICE + "forms", _TABLE + "covered-table-cell"}
"""What is not the document's own running text: notes, comments, deleted text, generated
indexes, declarations, and the cells a merged cell covers."""


def parse(data: bytes, *, name: str) -> Document:
    """Read an OpenDocument text into sections, one per heading, with its chain of headings."""
    with Archive(data, LABEL) as archive:
        _refuse_encrypted(archive)
        content = archive.xml("content.xml")
        metadata = _meta_title(archive.xml("meta.xml")) if archive.has("meta.xml") else None
    body = content.find(_OFFICE + "body")
    reader = _Reader()
    reader.read(content if body is None else body)
    return reader.finish(metadata, name)


def _refuse_encrypted(archive: Archive) -> None:
    """An ODF file saved with a password keeps its manifest in the clear, and says there
    which parts are encrypted (`manifest:encryption-data`)."""
    if not archive.has("META-INF/manifest.xml"):
        return
    manifest = archive.xml("META-INF/manifest.xml")
    if manifest.find(f".//{_MANIFEST}encryption-data") is not None:
        raise ParseError(f"encrypted {LABEL}: a password is needed to read it")


def _meta_title(meta: ET.Element) -> str | None:
    title = meta.find(f".//{_DC}title")
    return "".join(title.itertext()) if title is not None else None


class _Reader:
    """The body's events (archive.descend) turned into sections: paragraphs and headings,
    with rows of tables made lines; text boxes and a cell's paragraphs join their paragraph
    or cell."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.headings_read: list[tuple[tuple[str, ...], str]] = []
        self._chain: list[tuple[int, str]] = []
        self._paragraphs: list[str] = []
        self._words: list[str] = []
        self._level: int | None = None  # the level of the heading being read
        self._depth = 0  # paragraphs and headings open (a text box's nest in its paragraph's)
        self._rows = self._cells = 0
        self._row_cells: list[str] = []
        self._table_rows: list[str] = []

    def read(self, body: ET.Element) -> None:
        for event, element in descend(body, SKIPPED):
            if event == START:
                self._enter(element)
                self._words.append(element.text or "")
            else:
                if event == END:
                    self._leave(element)
                self._words.append(element.tail or "")

    def finish(self, metadata: str | None, name: str) -> Document:
        self._end_section()
        sections = self.sections or [
            Section(text=text, headings=chain) for chain, text in self.headings_read
        ]
        first = [text for _, text in self.headings_read[:1]]
        return document(choose(metadata, first, name), "odt", sections)

    def _enter(self, element: ET.Element) -> None:
        tag = element.tag
        if tag in SPACES or (self._depth and tag in (ROW, CELL)):  # a table in a text box
            self._words.append(" ")
        elif tag == LINE_BREAK:
            self._words.append("\n")
        elif tag == ROW:
            if not self._rows:
                self._row_cells = []
            self._rows += 1
        elif tag == CELL:
            if not self._cells:
                self._words = []
            self._words.append(" ")
            self._cells += 1
        elif tag in (HEADING, PARAGRAPH):
            if self._cells or self._depth:
                self._words.append(" ")
            else:
                self._words = []
                self._level = _level(element) if tag == HEADING else None
            self._depth += 0 if self._cells else 1

    def _leave(self, element: ET.Element) -> None:
        tag = element.tag
        if self._depth and tag in (ROW, CELL, TABLE):
            self._words.append(" ")
        elif tag == CELL:
            self._cells -= 1
            if not self._cells:
                self._row_cells.append(collapse("".join(self._words)))
                self._words = []
        elif tag == ROW:
            self._rows -= 1
            if not self._rows and any(self._row_cells):
                self._table_rows.append(CELL_SEPARATOR.join(self._row_cells))
        elif tag == TABLE and not self._rows and self._table_rows:
            self._paragraphs.append("\n".join(self._table_rows))
            self._table_rows = []
        elif tag in (HEADING, PARAGRAPH) and not self._cells:
            self._depth -= 1
            if self._depth:
                self._words.append(" ")
                return
            text = _lines("".join(self._words))
            self._words = []
            if self._level is not None:
                self._open_heading(self._level, collapse(text))
            elif text:
                self._paragraphs.append(text)

    def _open_heading(self, level: int, text: str) -> None:
        if not text:
            return
        self._end_section()
        while self._chain and self._chain[-1][0] >= level:
            self._chain.pop()
        self.headings_read.append((tuple(t for _, t in self._chain), text))
        self._chain.append((level, text))

    def _end_section(self) -> None:
        if self._paragraphs:
            headings = tuple(text for _, text in self._chain)
            self.sections.append(Section(text="\n\n".join(self._paragraphs), headings=headings))
        self._paragraphs = []


def _level(heading: ET.Element) -> int:
    """A heading's outline level, 1 when it names none or nonsense."""
    value = heading.get(_TEXT + "outline-level", "1").strip()
    return min(int(value), LEVEL_MAX) if value.isdigit() and int(value) > 0 else 1


def _lines(raw: str) -> str:
    """A paragraph's text, whitespace collapsed within each of its (broken) lines."""
    lines = (collapse(line) for line in raw.split("\n"))
    return "\n".join(line for line in lines if line)
