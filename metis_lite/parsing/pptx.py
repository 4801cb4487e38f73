"""PowerPoint (.pptx): one section a slide, cited by its number as a page, its title its heading.

The slides are read in the presentation's order — `p:sldIdLst` in ppt/presentation.xml, each
`r:id` found in that part's relationships — not in the order of their file names, which is
the order they were made in. A slide's number is its place in that list (hidden slides
counted, as PowerPoint numbers them), and is the section's page, so a result cites
`deck.pptx, page 7` for slide 7. Its title placeholder is its heading; every other text frame,
group and table follows in the order the slide holds them, then the speaker's notes (the
slide's notesSlide part). Slide numbers, dates and footers are left out: the same on every
slide. A slide with no text gives no section; one with only a title, a section of its title.

The title is docProps/core.xml's `dc:title` when it is a real one (titles.choose: not
"PowerPoint Presentation"), else the first slide's title, else the file's name. The zip and
its XML are read within archive.py's bounds; a deck of more than SLIDES_MAX slides is refused
before any slide is read, and an encrypted deck (an OLE file, not a zip) in archive.py.
"""

from __future__ import annotations

import posixpath
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from metis_lite.errors import ParseError
from metis_lite.parsing.archive import Archive, member_name
from metis_lite.parsing.common import collapse, document
from metis_lite.parsing.titles import choose
from metis_lite.records import Document, Section

LABEL = "PPTX"
SLIDES_MAX = 10_000
"""The most slides a deck may list: ten times the largest deck a person gives."""

CELL_SEPARATOR = " | "
DEFAULT_MAIN = "ppt/presentation.xml"

_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_DC = "{http://purl.org/dc/elements/1.1/}"

SHAPE, TABLE = _P + "sp", _A + "tbl"
TITLES = frozenset({"title", "ctrTitle"})
FURNITURE = frozenset({"sldNum", "dt", "ftr", "hdr", "sldImg"})
"""Placeholders that are the same on every slide (or the notes page's picture of the slide)."""

MAIN, SLIDE, NOTES = "/officeDocument", "/slide", "/notesSlide"
"""How relationship types end (their namespaces differ between strict and transitional)."""


@dataclass(frozen=True)
class Relationship:
    type: str
    target: str | None  # the member it names; None for a path out of the archive


def parse(data: bytes, *, name: str) -> Document:
    """Read a presentation into one section a slide, its page the slide's number."""
    with Archive(data, LABEL) as archive:
        main = next(
            (r.target for r in relationships(archive, "").values() if r.type.endswith(MAIN)),
            DEFAULT_MAIN,
        )
        if main is None or not archive.has(main):
            raise ParseError(f"not a valid {LABEL} (it has no presentation part)")
        slides = _slide_parts(archive, main)
        sections, first_title = [], None
        for number, part in enumerate(slides, 1):
            if part is None or not archive.has(part):
                continue
            title, paragraphs = _shapes(archive.xml(part))
            first_title = first_title or title
            notes = next(
                (r.target for r in relationships(archive, part).values() if r.type.endswith(NOTES)),
                None,
            )
            if notes is not None and archive.has(notes):
                paragraphs += _shapes(archive.xml(notes), titles=False)[1]
            text = "\n\n".join(paragraphs) or title
            if text:
                sections.append(Section(text=text, headings=(title,) if title else (), page=number))
        core = archive.xml("docProps/core.xml") if archive.has("docProps/core.xml") else None
    metadata = _text(core.find(_DC + "title")) if core is not None else None
    return document(choose(metadata, [first_title] if first_title else [], name), "pptx", sections)


def relationships(archive: Archive, part: str) -> dict[str, Relationship]:
    """A part's relationships by id ("" for the package's own), their targets resolved from
    the part's folder; none when it has no relationships part."""
    folder, base = posixpath.split(part)
    rels = posixpath.join(folder, "_rels", f"{base}.rels")
    if not archive.has(rels):
        return {}
    found = {}
    for element in archive.xml(rels).iter(_RELS + "Relationship"):
        if element.get("TargetMode") == "External":
            continue
        target = member_name(folder, element.get("Target", ""))
        found[element.get("Id", "")] = Relationship(element.get("Type", ""), target)
    return found


def _slide_parts(archive: Archive, main: str) -> list[str | None]:
    """The slides' parts in the presentation's order (None for an id naming no slide)."""
    listed = archive.xml(main).findall(f"{_P}sldIdLst/{_P}sldId")
    if len(listed) > SLIDES_MAX:
        raise ParseError(
            f"{LABEL} refused: {len(listed):,} slides, more than {SLIDES_MAX:,} (a slide bomb?)"
        )
    slides = {
        id_: r.target for id_, r in relationships(archive, main).items() if r.type.endswith(SLIDE)
    }
    return [slides.get(element.get(_R + "id", "")) for element in listed]


def _shapes(slide: ET.Element, *, titles: bool = True) -> tuple[str, list[str]]:
    """A slide's (or notes page's) title and its other text, a paragraph per text frame or
    table, in the order the slide holds them."""
    title, paragraphs = "", []
    for element in slide.iter():
        if element.tag == TABLE:
            if rows := _rows(element):
                paragraphs.append("\n".join(rows))
            continue
        if element.tag != SHAPE:
            continue
        placeholder = element.find(f"{_P}nvSpPr/{_P}nvPr/{_P}ph")
        kind = placeholder.get("type", "") if placeholder is not None else ""
        if kind in FURNITURE:
            continue
        body = element.find(_P + "txBody")
        lines = [line for line in map(_paragraph, _paragraphs(body)) if line]
        if titles and kind in TITLES and not title:
            title = collapse(" ".join(lines))
        elif lines:
            paragraphs.append("\n".join(lines))
    return title, paragraphs


def _paragraphs(body: ET.Element | None) -> list[ET.Element]:
    return [] if body is None else body.findall(_A + "p")


def _paragraph(paragraph: ET.Element) -> str:
    """A paragraph's runs and fields, a line break kept as one."""
    parts = []
    for element in paragraph.iter():
        if element.tag == _A + "t":
            parts.append(element.text or "")
        elif element.tag == _A + "br":
            parts.append("\n")
    return "\n".join(filter(None, (collapse(line) for line in "".join(parts).split("\n"))))


def _rows(table: ET.Element) -> list[str]:
    """One line per row, cells joined by " | "; a cell a merge covers is left out."""
    rows = []
    for row in table.findall(_A + "tr"):
        cells = [
            collapse(" ".join(map(_paragraph, _paragraphs(cell.find(_A + "txBody")))))
            for cell in row.findall(_A + "tc")
            if not (cell.get("hMerge") or cell.get("vMerge"))
        ]
        if any(cells):
            rows.append(CELL_SEPARATOR.join(cells))
    return rows


def _text(element: ET.Element | None) -> str | None:
    return "".join(element.itertext()) if element is not None else None
