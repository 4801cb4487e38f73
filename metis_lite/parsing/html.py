"""HTML (.html, .htm): the page's readable text, cut into sections at h1–h6.

html5lib parses the bytes the way a browser does (encoding from the byte-order mark or
`<meta charset>`, implied end tags, misnested markup). Page furniture — scripts, styles,
navigation, the page's header and footer, asides, forms — is left out. Block elements become
paragraphs, table rows become one line with cells joined by " | ", whitespace is collapsed
inside paragraphs (kept, line by line, inside `<pre>`).

Deeply nested markup is bounded: the tree is walked with an explicit stack (no recursion),
and the parser's stack of open elements is kept short, because html5lib's scope checks scan it
(100,000 nested `<div>`s would cost quadratic time). Past FLATTEN_DEPTH, a plain container
(`div`, `span`, `section`, …) or inline formatting (`b`, `font`, …) on top of the stack is
closed before the next element opens, just as its end tag would close it — browsers flatten
over-deep trees the same way, and every word is kept, in order. Markup that still nests past
MAX_OPEN_ELEMENTS (tables inside tables, hundreds deep) is refused.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import html5lib

from metis_lite.errors import ParseError
from metis_lite.parsing.common import collapse, document, reason
from metis_lite.records import Document, Section

FLATTEN_DEPTH = 64
"""Past this many open elements, a plain or formatting element is closed before the next opens
(real pages rarely nest past 32)."""

MAX_OPEN_ELEMENTS = 512
"""A page that nests deeper than this even after flattening is refused."""

FLATTENED = frozenset(
    "address article aside blockquote center dd details dir div dl dt fieldset figcaption "
    "figure footer header hgroup li listing main menu nav ol p pre section span summary ul".split()
)
"""Elements whose end tag, when they are the current node, only pops them off the stack."""

FORMATTING = frozenset("a b big code em font i nobr s small strike strong tt u".split())
"""Elements whose end tag, when they are the current node, pops them and forgets them as
active formatting (the adoption agency's simple case) — unclosed `<font>`s pile up so."""

SNIFF_BYTES = 4096
"""A NUL byte within this many leading bytes (and no UTF-16 byte-order mark) marks binary data."""

SKIPPED = frozenset(
    "head script style noscript template nav aside form header footer "
    "svg math iframe object embed canvas button select textarea dialog".split()
)
"""Elements whose whole content is page furniture, not the document's text."""

SECTIONING = frozenset({"article", "main", "section"})
"""A `<header>` inside one of these heads that content (keep it); elsewhere it is the page's."""

HEADINGS = {f"h{n}": n for n in range(1, 7)}

BLOCKS = frozenset(
    "address article blockquote br caption center dd details dir div dl dt fieldset "
    "figcaption figure h1 h2 h3 h4 h5 h6 hgroup hr legend li main menu ol p pre section summary "
    "table tr ul".split()
)
"""Elements that end the paragraph before them and start a new one."""

CELLS = frozenset({"td", "th"})
CELL_SEPARATOR = " | "

_BaseTreeBuilder = html5lib.getTreeBuilder("etree")
_XHTML = html5lib.constants.namespaces["html"]


class _BoundedTreeBuilder(_BaseTreeBuilder):  # type: ignore[misc,valid-type]
    """html5lib's ElementTree builder, keeping its stack of open elements short (see above).

    Every element opens through `insertElementNormal`, except one foster-parented out of a
    table, after which the current node is that element and the next one passes here.
    """

    _reconstructing = False
    """True while html5lib re-opens the formatting elements it keeps a list of: it indexes
    that list as it goes, so no entry may be removed from it then."""

    def insertElementNormal(self, token):
        self._make_room()
        return super().insertElementNormal(token)

    def reconstructActiveFormattingElements(self):
        self._reconstructing = True
        try:
            return super().reconstructActiveFormattingElements()
        finally:
            self._reconstructing = False

    def _make_room(self) -> None:
        depth = len(self.openElements)
        if depth < FLATTEN_DEPTH:
            return
        namespace, name = self.openElements[-1].nameTuple
        formatting = name in FORMATTING and not self._reconstructing
        if namespace == _XHTML and (name in FLATTENED or formatting):
            current = self.openElements.pop()
            if current in self.activeFormattingElements:
                self.activeFormattingElements.remove(current)
        elif depth >= MAX_OPEN_ELEMENTS:
            raise ParseError(f"HTML nested too deeply (over {MAX_OPEN_ELEMENTS} elements)")


def parse(data: bytes, *, name: str) -> Document:
    """Read an HTML page into sections, one per heading, each with its chain of headings.

    The title is the page's `<title>`, else its first `<h1>`, else `name`.
    """
    if not data.strip():
        raise ParseError("empty file")
    if b"\x00" in data[:SNIFF_BYTES] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ParseError("binary file, not HTML")
    parser = html5lib.HTMLParser(tree=_BoundedTreeBuilder, namespaceHTMLElements=False)
    try:
        root = parser.parse(data)
    except ParseError:
        raise
    except Exception as exc:  # a charset it cannot decode, or html5lib's own asserts failing
        raise ParseError(f"not readable as HTML ({reason(exc)})") from exc
    title_element = root.find(".//title")
    page_title = collapse("".join(title_element.itertext())) if title_element is not None else ""
    reader = _Reader()
    reader.walk(root)
    reader.end_section()
    return document(page_title or reader.first_h1 or name, "html", reader.sections)


def _tag(element: ET.Element) -> str | None:
    """The element's local name, or None for a comment or processing instruction."""
    tag = element.tag
    return tag.rpartition("}")[2].lower() if isinstance(tag, str) else None


class _Reader:
    """Turns the walk of one tree into sections; holds the paragraph being read."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.first_h1: str | None = None
        self._chain: list[tuple[int, str]] = []
        self._paragraphs: list[str] = []
        self._words: list[str] = []  # text of the paragraph being read
        self._has_words = False  # whether _words holds more than whitespace (no join per cell)
        self._rows_read: list[str] = []  # the rows of the table being read, one line each
        self._heading: tuple[int, list[str]] | None = None  # level and words of a heading
        self._pre = 0
        self._rows = 0
        self._sectioning = 0

    def walk(self, root: ET.Element) -> None:
        """Visit the tree in document order with an explicit stack, so any depth is safe."""
        stack: list[tuple[ET.Element, bool]] = [(root, False)]
        while stack:
            element, leaving = stack.pop()
            tag = _tag(element)
            if leaving:
                self._leave(tag or "")
            elif tag is not None and not self._skipped(tag):
                self._enter(tag)
                if element.text:
                    self._text(element.text)
                stack.append((element, True))
                stack.extend((child, False) for child in reversed(element))
                continue
            if element.tail:
                self._text(element.tail)

    def end_section(self) -> None:
        self._end_paragraph()
        if self._paragraphs:
            headings = tuple(text for _, text in self._chain)
            self.sections.append(Section(text="\n\n".join(self._paragraphs), headings=headings))
        self._paragraphs = []

    def _skipped(self, tag: str) -> bool:
        return tag in SKIPPED and not (tag == "header" and self._sectioning)

    def _enter(self, tag: str) -> None:
        if tag in HEADINGS and self._heading is None:
            self._end_paragraph()
            self._heading = (HEADINGS[tag], [])
        elif tag == "tr":
            self._end_row()
        elif tag in CELLS and self._rows and self._has_words:
            self._words.append(CELL_SEPARATOR)
        elif tag in BLOCKS:
            self._boundary()
        if tag == "pre":
            self._pre += 1
        elif tag == "tr":
            self._rows += 1
        elif tag in SECTIONING:
            self._sectioning += 1

    def _leave(self, tag: str) -> None:
        if tag in HEADINGS and self._heading and self._heading[0] == HEADINGS[tag]:
            level, words = self._heading
            self._heading = None
            self._open_heading(level, collapse("".join(words)))
            return
        if tag == "tr":
            self._end_row()
        elif tag in BLOCKS:
            self._boundary()
        if tag == "pre":
            self._pre -= 1
        elif tag == "tr":
            self._rows -= 1
        elif tag in SECTIONING:
            self._sectioning -= 1

    def _boundary(self) -> None:
        """A block starts or ends: a new paragraph, except inside a heading or a table row."""
        if self._heading is not None or self._rows:
            self._text(" ")
        else:
            self._end_paragraph()

    def _text(self, text: str) -> None:
        if self._heading:
            self._heading[1].append(text)
        else:
            self._words.append(text)
            self._has_words = self._has_words or bool(text.strip())

    def _open_heading(self, level: int, text: str) -> None:
        if not text:
            return
        self.end_section()
        while self._chain and self._chain[-1][0] >= level:
            self._chain.pop()
        self._chain.append((level, text))
        if level == 1 and self.first_h1 is None:
            self.first_h1 = text

    def _end_row(self) -> None:
        if row := collapse("".join(self._words)):
            self._rows_read.append(row)
        self._words = []
        self._has_words = False

    def _end_paragraph(self) -> None:
        if self._rows_read:
            self._paragraphs.append("\n".join(self._rows_read))
            self._rows_read = []
        raw = "".join(self._words)
        self._words = []
        self._has_words = False
        if self._pre:
            lines = [line.rstrip() for line in raw.split("\n")]
            blocks = "\n".join(lines).split("\n\n")
            self._paragraphs += [b.strip("\n") for b in blocks if b.strip()]
        elif text := collapse(raw):
            self._paragraphs.append(text)
