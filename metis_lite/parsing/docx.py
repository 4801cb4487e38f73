"""Word (.docx): sections cut at `Title` and `Heading 1`–`Heading 9` paragraphs, tables kept.

python-docx walks the body's paragraphs and tables in order (`iter_inner_content`). A table
becomes one paragraph with one line per row, its cells joined by " | ", so a row such as
"PO-2231 | Dell | 14 laptops" stays together. Headers, footers, footnotes and text boxes are
not read.

A .docx is a zip file, and python-docx inflates its parts in memory: before it opens one, the
sizes the zip declares are checked, so a small file claiming gigabytes of XML (a zip bomb) is
refused without inflating anything. zipfile never inflates a member past its declared size.
Then the elements of its XML parts are counted as they inflate, a block at a time, and a file
of more than DOCX_ELEMENTS_MAX is refused before python-docx builds its trees.
"""

from __future__ import annotations

import io
import re
import zipfile

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from metis_lite.errors import ParseError
from metis_lite.parsing.common import check_elements, collapse, document, reason
from metis_lite.parsing.titles import choose
from metis_lite.records import Document, Section

MAX_PART_BYTES = 200 * 1024 * 1024
"""The largest uncompressed part (word/document.xml above all) a DOCX may declare."""

MAX_TOTAL_BYTES = 400 * 1024 * 1024
"""The most a DOCX may declare uncompressed, all parts together."""

MAX_PARTS = 10_000
"""The most members a DOCX zip may hold."""

MAX_RATIO = 100
"""The most a part larger than RATIO_FLOOR_BYTES may inflate: Word's own XML inflates 4–15×,
a zip bomb of empty paragraphs 1,000× (a 70 KB file of 3.5 million paragraphs)."""

RATIO_FLOOR_BYTES = 1024 * 1024

DOCX_ELEMENTS_MAX = 2_000_000
"""The most elements a DOCX's XML parts may hold, counted as they inflate before python-docx
reads them: lxml's tree and python-docx's objects cost ~160 bytes an element (300,000
paragraphs of one run, 1.2 million elements, took 192 MiB and 25 s), so 2 million stay within
a parse worker's least share (PARSE_MEMORY_MIN); a Word document of 1,000 pages holds ~1 million.
Parts that inflate at most 100× (MAX_RATIO) could otherwise hold 18 million in 200 MiB."""

XML_PARTS = (".xml", ".rels")
"""The parts python-docx parses as XML (images and fonts are only carried)."""

READ_BYTES = 1024 * 1024
"""A part is inflated to be counted this many bytes at a time."""

CELL_SEPARATOR = " | "
TITLE_LEVEL = 0
"""A `Title` paragraph heads the chain, above `Heading 1`."""

_HEADING_STYLE = re.compile(r"heading\s*([1-9])", re.IGNORECASE)


def parse(data: bytes, *, name: str) -> Document:
    """Read a Word document into sections, one per heading, each with its chain of headings.

    The title is the document's core property `title` when it is a real one (titles.choose:
    not empty, a placeholder such as "Document1", a converter's label or the file's name),
    else its first `Title` paragraph, its first `Heading 1`, or its first heading at all that
    reads as a title, else `name`. Raises ParseError for files that are not a readable DOCX.
    """
    if not data.strip():
        raise ParseError("empty file")
    check_zip(data)
    try:
        word = docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx, zipfile and lxml each raise their own types
        raise ParseError(f"not a valid DOCX ({reason(exc)})") from exc
    try:
        return _read(word, name)
    except ParseError:
        raise
    except Exception as exc:  # malformed XML inside a well-formed package
        raise ParseError(f"unreadable DOCX content ({reason(exc)})") from exc


def check_zip(data: bytes) -> None:
    """Refuse what is not a zip, or declares more than the limits, before anything inflates."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            members = package.infolist()
    except Exception as exc:  # BadZipFile, and OSError/ValueError for damaged directories
        raise ParseError("not a valid DOCX (zip error)") from exc
    if len(members) > MAX_PARTS:
        raise ParseError(f"not a valid DOCX ({len(members)} parts in the zip)")
    for member in members:
        if member.file_size > MAX_PART_BYTES:
            raise ParseError(
                f"DOCX refused: {member.filename} declares {member.file_size / 2**20:,.0f} MiB "
                "uncompressed (a zip bomb?)"
            )
    for member in members:
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > RATIO_FLOOR_BYTES and ratio > MAX_RATIO:
            raise ParseError(
                f"DOCX refused: {member.filename} inflates {ratio:,.0f}× to "
                f"{member.file_size / 2**20:,.0f} MiB (a zip bomb?)"
            )
    total = sum(member.file_size for member in members)
    if total > MAX_TOTAL_BYTES:
        raise ParseError(
            f"DOCX refused: declares {total / 2**20:,.0f} MiB uncompressed (a zip bomb?)"
        )
    check_elements_inflated(data, [m for m in members if m.filename.lower().endswith(XML_PARTS)])


def check_elements_inflated(data: bytes, parts: list[zipfile.ZipInfo]) -> None:
    """Refuse a DOCX whose XML parts hold more than DOCX_ELEMENTS_MAX elements, counted as
    they inflate, a block at a time (common.count_elements, an end tag split between two
    blocks counted once), before python-docx builds a tree of any."""
    opened = closed = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            for part in parts:
                with package.open(part) as stream:
                    last = b""
                    while block := stream.read(READ_BYTES):
                        opened += block.count(b"<")
                        closed += (last + block).count(b"</")
                        last = block[-1:]
    except Exception as exc:  # BadZipFile (a bad CRC), zlib.error, EOFError: damaged data
        raise ParseError(f"not a valid DOCX ({reason(exc)})") from exc
    check_elements(opened - closed, DOCX_ELEMENTS_MAX, "DOCX")


def _read(word: docx.document.Document, name: str) -> Document:
    sections: list[Section] = []
    chain: list[tuple[int, str]] = []
    paragraphs: list[str] = []
    first: dict[int, str] = {}  # the first Title (0), Heading 1 (1), … texts
    # Heading levels by style id: python-docx scans every style of the file for each lookup.
    levels: dict[str | None, int | None] = {}

    def close() -> None:
        if paragraphs:
            headings = tuple(text for _, text in chain)
            sections.append(Section(text="\n\n".join(paragraphs), headings=headings))
        paragraphs.clear()

    for block in word.iter_inner_content():
        if isinstance(block, Table):
            if rows := _table_rows(block):
                paragraphs.append("\n".join(rows))
            continue
        text = _paragraph_text(block)
        if not text:
            continue
        style_id = block._p.style
        if style_id not in levels:
            levels[style_id] = _heading_level(block)
        level = levels[style_id]
        if level is None:
            paragraphs.append(text)
            continue
        close()
        while chain and chain[-1][0] >= level:
            chain.pop()
        chain.append((level, text))
        first.setdefault(level, text)
    close()
    shown = [first[level] for level in (TITLE_LEVEL, 1) if level in first]
    shown += [text for level, text in first.items() if level > 1]  # in the order first met
    return document(choose(word.core_properties.title, shown, name), "docx", sections)


def _paragraph_text(paragraph: Paragraph) -> str:
    """The paragraph's text, whitespace collapsed within each of its (soft-broken) lines."""
    lines = (collapse(line) for line in paragraph.text.split("\n"))
    return "\n".join(line for line in lines if line)


def _heading_level(paragraph: Paragraph) -> int | None:
    """0 for `Title`, n for `Heading n`, None for body text (a missing style is body text)."""
    style = paragraph.style
    style_name = (style.name or "") if style is not None else ""
    if style_name.strip().lower() == "title":
        return TITLE_LEVEL
    found = _HEADING_STYLE.fullmatch(style_name.strip())
    return int(found[1]) if found else None


def _table_rows(table: Table) -> list[str]:
    """One line per row, cells joined by " | "; a merged cell counts once."""
    rows = []
    for row in table.rows:
        cells, previous = [], None
        for cell in row.cells:
            if cell._tc is previous:  # a horizontally merged cell repeats itself
                continue
            previous = cell._tc
            cells.append(collapse(cell.text))
        if any(cells):
            rows.append(CELL_SEPARATOR.join(cells))
    return rows
