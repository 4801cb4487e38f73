"""HTML (.html, .htm): the page's readable text, cut into sections at h1–h6.

lexbor (through selectolax), a C parser that follows the HTML5 standard, builds the tree a
browser builds (implied end tags, misnested markup); the bytes are decoded first as a browser
decodes them (charset.py: BOM, then the page's declared charset, then UTF-8 when valid, then
Windows-1252). Page furniture — scripts, styles, navigation, the page's header and footer,
asides, forms, and elements whose ARIA role says they are one of those — is left out. Block
elements become paragraphs, table rows become one line with cells joined by " | ", whitespace
is collapsed inside paragraphs (kept, line by line, inside `<pre>`).

Deep nesting is bounded before the parse (nesting.py: a page whose tags would cost the parser
quadratic time is flattened the way browsers flatten over-deep trees, every word kept), and
the tree is walked with an explicit stack (no recursion), so any depth is safe. A page of
more than HTML_ELEMENTS_MAX elements is refused before it is parsed (common.py).
"""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser, LexborNode

from metis_lite.errors import ParseError
from metis_lite.parsing.charset import html_utf8, wide_encoding
from metis_lite.parsing.common import (
    HTML_ELEMENTS_MAX,
    check_elements,
    collapse,
    count_elements,
    document,
    reason,
)
from metis_lite.parsing.nesting import bounded
from metis_lite.records import Document, Section

SNIFF_BYTES = 4096
"""A NUL byte within this many leading bytes (and no UTF-16 or UTF-32 byte-order mark) marks
binary data."""

SKIPPED = frozenset(
    "head script style noscript template nav aside form header footer "
    "svg math iframe object embed canvas button select textarea dialog".split()
)
"""Elements whose whole content is page furniture, not the document's text."""

SKIPPED_ROLES = frozenset(
    "navigation banner contentinfo complementary search form menu menubar toolbar".split()
)
"""ARIA roles that mark an element as furniture (`<div role="navigation">` is a `<nav>`):
Sphinx, for one, marks its sidebar and its related-pages bars so."""

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

STRUCTURE = BLOCKS | CELLS | SECTIONING | {"tr", "pre"}
"""The elements whose start and end the reader acts on (headings are blocks); any other is
only looked into for its text."""

TEXT = "-text"
"""selectolax's tag of a text node (comments are "-comment", and are not read)."""


def parse(data: bytes, *, name: str) -> Document:
    """Read an HTML page into sections, one per heading, each with its chain of headings.

    The title is the page's `<title>`, else its first `<h1>`, else `name`. A page whose only
    text is in its headings gives one section per heading, so that it is found by them.
    """
    if not data.strip():
        raise ParseError("empty file")
    if b"\x00" in data[:SNIFF_BYTES] and not wide_encoding(data):
        raise ParseError("binary file, not HTML")
    try:
        page = html_utf8(data)
        check_elements(count_elements(page), HTML_ELEMENTS_MAX, "HTML")  # lexbor's tree grows
        tree = LexborHTMLParser(bounded(page))
    except ParseError:
        raise
    except Exception as exc:  # lexbor failing on input it cannot build a tree of
        raise ParseError(f"not readable as HTML ({reason(exc)})") from exc
    title_element = tree.css_first("title")
    page_title = collapse(title_element.text()) if title_element is not None else ""
    _drop_furniture_roles(tree)
    reader = PageReader()
    if tree.root is not None:
        walk(tree.root, reader)
    return reader.finish(page_title, name)


def walk(root: LexborNode, reader: PageReader) -> None:
    """Read lexbor's tree in document order, with an explicit stack: any depth is safe.

    Only the elements the reader acts on (STRUCTURE) are entered and left; the others are
    looked into for their text, or skipped whole when the reader skips them."""
    stack: list[LexborNode | str] = [root]  # a str: leave the element of that tag
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            reader.leave(item)
            continue
        node = item
        tag = node.tag
        if tag == TEXT:
            reader.text(node.text_content or "")
            continue
        if not tag or tag[0] == "-" or (tag in SKIPPED and reader.skips(tag)):
            continue
        if tag in STRUCTURE:
            reader.enter(tag)
            stack.append(tag)
        child = node.last_child
        while child is not None:
            stack.append(child)
            child = child.prev


def _drop_furniture_roles(tree: LexborHTMLParser) -> None:
    """Remove the elements whose ARIA role marks them as furniture, before the walk."""
    selector = ", ".join(f'[role~="{role}" i]' for role in sorted(SKIPPED_ROLES))
    for node in tree.css(selector):
        node.remove()  # unlinked, not freed: a match inside another match stays valid


class PageReader:
    """Turns the walk of one page's tree into sections: `enter`, `text` and `leave` in
    document order (an element `skips` is neither entered nor read), then `finish`."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.first_h1: str | None = None
        self.headings_read: list[tuple[tuple[str, ...], str]] = []  # (chain above, heading)
        self._chain: list[tuple[int, str]] = []
        self._paragraphs: list[str] = []
        self._words: list[str] = []  # text of the paragraph being read
        self._has_words = False  # whether _words holds more than whitespace (no join per cell)
        self._rows_read: list[str] = []  # the rows of the table being read, one line each
        self._heading: tuple[int, list[str]] | None = None  # level and words of a heading
        self._pre = 0
        self._rows = 0
        self._sectioning = 0

    def end_section(self) -> None:
        self._end_paragraph()
        if self._paragraphs:
            headings = tuple(text for _, text in self._chain)
            self.sections.append(Section(text="\n\n".join(self._paragraphs), headings=headings))
        self._paragraphs = []

    def finish(self, title: str, name: str) -> Document:
        """The page read: titled `title`, else by its first `<h1>`, else `name`. A page whose
        only text is in its headings gives one section per heading, its text the heading."""
        self.end_section()
        sections = self.sections or [
            Section(text=text, headings=chain) for chain, text in self.headings_read
        ]
        return document(title or self.first_h1 or name, "html", sections)

    def skips(self, tag: str) -> bool:
        return tag in SKIPPED and not (tag == "header" and self._sectioning)

    def enter(self, tag: str) -> None:
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

    def leave(self, tag: str) -> None:
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
            self.text(" ")
        else:
            self._end_paragraph()

    def text(self, text: str) -> None:
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
        self.headings_read.append((tuple(t for _, t in self._chain), text))
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
