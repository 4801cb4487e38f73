"""HTML (.html, .htm): the page's readable text, cut into sections at h1–h6.

lexbor (through selectolax), a C parser that follows the HTML5 standard, builds the tree a
browser builds (implied end tags, misnested markup); the bytes are decoded first as a browser
decodes them (charset.py: BOM, then the page's declared charset, then UTF-8 when valid, then
Windows-1252).

A page is read without its site: what a documentation generator repeats on every page is left
out. When the page has a `<main>` (or an element of ARIA role main) only that is read, and
within it (or the page) its one `<article>` when it has exactly one; a region with no text
(an empty `<main>`) gives way to the whole page. Furniture — scripts, styles, navigation,
the page's header and footer, asides, forms, breadcrumbs, the bars of generators that mark
them by class alone (DocBook's, Texinfo's, Doxygen's), and elements whose ARIA role says they
are one of those — is left out wherever it is, and so are skip links ("Skip to content")
and the permalink anchors generators put beside headings and definitions (`¶` in Sphinx and
MkDocs, `#` in Docusaurus and Hugo themes, `§` in rustdoc, `🔗` or an icon in Javadoc: a link
to `#id` in the page whose text is no more than such a glyph). Each section keeps its
heading's anchor: the heading's id, else its permalink's target, else the id of the `<div>`,
`<section>` or `<article>` that opens with it (no words between its start and the heading:
DocBook's `<div class="sect2" id="…"><div class="titlepage">…<h3>`, Texinfo's and older
Sphinx's and pandoc's `<div class="section" id="…"><h2>`), else the id of the `<section>` or
`<article>` it lies in, so a result cites `page.html#anchor`.

Block elements become paragraphs, table rows become one line with cells joined by " | ",
whitespace is collapsed inside paragraphs (kept, line by line, inside `<pre>`).

Deep nesting is bounded before the parse (nesting.py: a page whose tags would cost the parser
quadratic time is flattened the way browsers flatten over-deep trees, every word kept), and
the tree is walked with an explicit stack (no recursion), so any depth is safe. A page of
more than HTML_ELEMENTS_MAX elements is refused before it is parsed (common.py).
"""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import unquote

from selectolax.lexbor import LexborHTMLParser, LexborNode

from metis_lite.errors import ParseError
from metis_lite.parsing.charset import html_utf8, wide_encoding
from metis_lite.parsing.common import (
    HTML_ELEMENTS_MAX,
    ONLY_LINKS,
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

FURNITURE_CLASSES = frozenset({"navheader", "navfooter", "nav-panel", "navpath", "toc", "nosearch"})
"""Classes that generators without `<nav>` give the bars they repeat on every page: DocBook
XSL's navigation header and footer (Prev | Up | Home | Next: PostgreSQL's manual and many
more), Texinfo's panel (Next: … Previous: … Up: …) and Doxygen's path of parents; the table
of contents DocBook puts at the head of a chapter (its list of links and its title); and what
a site marks as not for its own search (`nosearch`: SQLite's banner, menu and tagline, or
`data-pagefind-ignore`, Pagefind's mark, in MARKED)."""

MARKED = (
    '[role], [class*="breadcrumb" i], [data-pagefind-ignore], main, article, a[href^="#"], '
    "ul, ol, dl, " + ", ".join(f'[class~="{name}"]' for name in sorted(FURNITURE_CLASSES))
)
"""The elements looked at before the walk: those of a role (furniture, or the content's
region), breadcrumbs (`<ol class="breadcrumb">`: the generators' trail of the page's parents,
removed wherever they are), generators' bars (FURNITURE_CLASSES), `<main>` and `<article>`,
links within the page (permalinks, skip links) and lists (of links: LINK_LIST_SHARE)."""

UP = 'link[rel~="up" i][title], a[accesskey="u" i], a[rel~="up" i]'
"""The link to a page's parent in its book: HTML's `rel="up"`, and the access key U that
DocBook XSL ("Up", its title the chapter's) and Sphinx (the parent's name) give it in the bars
left out of the page's words."""

PARENT_MAX = 200
"""Characters of a parent's title kept as a page's first heading."""

NOT_A_TITLE = frozenset({"Up", "Top"})
"""The text of an "Up" link that names no parent (DocBook's without a title attribute), and
the name Texinfo gives every manual's first node."""

LISTS = frozenset({"ul", "ol", "dl"})
LIST_ITEMS = frozenset({"li", "dd", "dt"})

LINK_LIST_WORDS = 10
LINK_LIST_SHARE = 0.8
"""A list (`ul`, `ol`, `dl`, not within another's item) of at least LINK_LIST_WORDS words of
which at least LINK_LIST_SHARE are the words of its links to other pages (OTHER_PAGES) is a
list of links: a table of contents of a book's pages, a site map, an index of terms, a "see
also" list of other pages. It is left out: its words are other pages' titles, and they would
find this page for what those pages say (Python's documentation: 11 % of its pages' words, its
index and contents pages almost whole; PostgreSQL's: each chapter's table of contents). A
shorter list, or one whose items say something of their own beside their link, is read."""

LINK_WORDS_MAX = 12
"""Words of a link, at most, when a list is measured: a list with fewer links than its words
need at that length is no list of links, read without measuring each link."""

LINK_LISTS_MAX = 2_000
"""The most lists of a page measured for their links (a hostile page of a million lists costs
no more; the others are read)."""
PERMALINK_GLYPHS = frozenset({"", "¶", "#", "§", "🔗", "⚓"})
"""The text of a generator's permalink anchor, whitespace and invisible characters removed
("" for one drawn by CSS or an icon: Docusaurus's zero-width space, rustdoc's and Javadoc's)."""

INVISIBLE = str.maketrans("", "", "\u200b\u200c\u200d\u2060\ufeff\ufe0e\ufe0f")
"""Zero-width characters and the variation selectors: no text to a reader."""

SKIP_LINK = re.compile(r"(skip|jump)\s+(to|over|navigation)\b", re.I)
"""The text of an accessibility skip link ("Skip to main content", "Skip navigation")."""

GLYPHS_AFTER_HEADING = re.compile(r"[\s¶🔗⚓\u200b\ufe0f]+$")
"""A permalink glyph left at a heading's end as text ("Timeouts¶"): not the heading's words.
`#` and `§` are not among them: "C#" is a heading."""

REGIONS_MAX = 64
"""The most `<main>` or `<article>` elements looked into for the content region (each is
climbed to the page's root, as deep as nesting.py lets a tree be): a hostile page of a
million costs no more than a page of 64."""

PERMALINK_DEPTH = 3
"""How far up from a permalink anchor its heading is looked for (`<h2>…<a>` or `<h2><span><a>`)."""

SECTIONING = frozenset({"article", "main", "section"})
"""A `<header>` inside one of these heads that content (keep it); elsewhere it is the page's."""

HEADINGS = {f"h{n}": n for n in range(1, 7)}

ANCHORED = frozenset(HEADINGS) | SECTIONING | {"div"}
"""The elements whose id the reader is given: a heading's, the section's it lies in, or the
`<div>`'s that opens with it."""

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

DOCUMENT = "-document"
"""selectolax's tag of the document node above `<html>`: an element removed tops no such."""

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
    parent = _parent_title(tree)  # read before the bars that hold it are removed
    region, links_removed = _prepare(tree)
    reader = PageReader()
    if region is not None:
        walk(region, reader)
    if tree.root is not None and reader.empty:  # no region, or one with no text in it
        reader = PageReader()
        walk(tree.root, reader)
    document = reader.finish(page_title, name)
    if links_removed and not reader.sections:  # its headings alone were left
        raise ParseError(ONLY_LINKS)
    return _under(document, parent)


def _parent_title(tree: LexborHTMLParser) -> str:
    """The title of the page's parent in its book (UP), "" when it names none."""
    link = tree.css_first(UP)
    if link is None:
        return ""
    return collapse(link.attributes.get("title") or link.text(deep=True))[:PARENT_MAX]


def _under(document: Document, parent: str) -> Document:
    """The page's sections headed first by its parent's title, as a breadcrumb heads a page:
    what the parent is about is the context of every passage ("libpq" for its page on
    environment variables), by words and by meaning."""
    if not parent or parent == document.title or parent in NOT_A_TITLE:
        return document
    sections = tuple(
        section
        if section.headings[:1] == (parent,)
        else dataclasses.replace(section, headings=(parent, *section.headings))
        for section in document.sections
    )
    return dataclasses.replace(document, sections=sections)


def head_title(data: bytes) -> str:
    """An HTML page's `<title>`, as `parse` reads it, from no more of the page than its head
    up to `</title>` ("" when the page has none there): the titles of a site's pages are
    compared before the pages are parsed (indexing: a title suffix shared by a site)."""
    end = data.lower().find(b"</title")
    if end < 0:
        return ""
    try:
        found = LexborHTMLParser(html_utf8(data[:end])).css_first("title")
    except Exception:  # lexbor failing on what it cannot build a tree of: no title
        return ""
    return collapse(found.text()) if found is not None else ""


def walk(root: LexborNode, reader: PageReader) -> None:
    """Read lexbor's tree in document order, with an explicit stack: any depth is safe.

    Only the elements the reader acts on (STRUCTURE) are entered and left; the others are
    looked into for their text, or skipped whole when the reader skips them."""
    stack: list[LexborNode | str] = [root]  # a str: leave the element of that tag
    pop, push = stack.pop, stack.append  # bound once: the loop runs once per node
    text, enter, leave, skips = reader.text, reader.enter, reader.leave, reader.skips
    while stack:
        item = pop()
        if isinstance(item, str):
            leave(item)
            continue
        tag = item.tag
        if tag == TEXT:
            text(item.text_content or "")
            continue
        if not tag or tag[0] == "-" or (tag in SKIPPED and skips(tag)):
            continue
        if tag in STRUCTURE:
            enter(tag, item.id if tag in ANCHORED else None)
            push(tag)
        child = item.last_child
        while child is not None:
            push(child)
            child = child.prev


def _prepare(tree: LexborHTMLParser) -> tuple[LexborNode | None, bool]:
    """Before the walk, in one pass over the elements that may matter (MARKED: lexbor matches
    a list of selectors in one walk of its tree, each selector apart in one walk each): remove
    furniture (FURNITURE_ROLES, breadcrumbs), permalink anchors, skip links and lists of links;
    return the content region: the page's `<main>` (else its element of role main), and within
    it (or the page) its one `<article>` when it has exactly one, None when neither; and
    whether a list of links was removed."""
    mains: list[LexborNode] = []
    role_mains: list[LexborNode] = []
    articles: list[LexborNode] = []
    lists = 0
    links_removed = False
    for node in tree.css(MARKED):
        tag = node.tag
        if tag == "a" and _dropped_link(node):
            continue
        if tag in LISTS:
            parent = node.parent
            if parent is None or parent.tag in LIST_ITEMS:
                continue  # measured with the list it is an item of (or removed with it)
        attrs = node.attributes
        roles = (attrs.get("role") or "").lower().split()
        classes = attrs.get("class") or ""
        if (
            not SKIPPED_ROLES.isdisjoint(roles)
            or "breadcrumb" in classes.lower()
            or not FURNITURE_CLASSES.isdisjoint(classes.split())
            or "data-pagefind-ignore" in attrs
        ):
            node.remove()  # unlinked, not freed: a match inside it stays valid
        elif tag in LISTS:
            lists += 1
            if lists <= LINK_LISTS_MAX and _of_links(node):
                node.remove()
                links_removed = True
        elif tag == "main":
            mains.append(node)
        elif tag == "article":
            articles.append(node)
        elif "main" in roles:
            role_mains.append(node)
    candidates = (*mains, *role_mains)[:REGIONS_MAX]
    region = next((n for n in candidates if _read_within(n, None)), None)
    if len(articles) > REGIONS_MAX:
        return region, links_removed  # a page of many articles (a listing): none its content
    articles = [a for a in articles if _read_within(a, region)]
    return (articles[0] if len(articles) == 1 else region), links_removed


OTHER_PAGES = 'a[href]:not([href^="#"])'
"""Links to other pages: a link within the page (its own table of contents, a FAQ's list of
its questions) says what this page holds, and is read as its words."""


def _of_links(listing: LexborNode) -> bool:
    """Whether `listing` is a list of links to other pages (LINK_LIST_WORDS, LINK_LIST_SHARE;
    a permalink, to `#id`, is none)."""
    words = len(listing.text(deep=True).split())
    if words < LINK_LIST_WORDS:
        return False
    links = listing.css(OTHER_PAGES)
    if len(links) * LINK_WORDS_MAX < LINK_LIST_SHARE * words:
        return False  # too few links to hold that share of its words
    linked = sum(len(link.text(deep=True).split()) for link in links)
    return linked >= LINK_LIST_SHARE * words


def _read_within(node: LexborNode, region: LexborNode | None) -> bool:
    """Whether `node` is still in the page (not in furniture removed or skipped) and within
    `region` (None: the page)."""
    parent = node.parent
    while parent is not None:
        if region is not None and parent == region:
            return True
        if parent.tag in SKIPPED:
            return False
        node, parent = parent, parent.parent
    return region is None and node.tag == DOCUMENT


def _dropped_link(link: LexborNode) -> bool:
    """Remove `link` (to `#id` in the page) when it is a permalink anchor or a skip link; a
    heading without an id of its own takes its permalink's target as its id."""
    text = link.text(deep=True)
    if "".join(text.split()).translate(INVISIBLE) in PERMALINK_GLYPHS:
        target = unquote(link.attrs.get("href") or "#")[1:]
        heading = link.parent
        for _ in range(PERMALINK_DEPTH):
            if heading is None or heading.tag in HEADINGS:
                break
            heading = heading.parent
        if target and heading is not None and heading.tag in HEADINGS and not heading.id:
            heading.attrs["id"] = target
        link.remove()
        return True
    if SKIP_LINK.match(text.strip()):
        link.remove()
        return True
    return False


class PageReader:
    """Turns the walk of one page's tree into sections: `enter`, `text` and `leave` in
    document order (an element `skips` is neither entered nor read), then `finish`."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.first_h1: str | None = None
        self.headings_read: list[tuple[tuple[str, ...], str, str | None]] = []
        # (chain above, heading, its anchor)
        self._chain: list[tuple[int, str]] = []
        self._anchor: str | None = None  # the anchor of the section being read
        self._places: list[str | None] = []  # the ids of the sections the reader is in
        self._lead: str | None = None  # the id of the innermost element opened since words
        self._paragraphs: list[str] = []
        self._words: list[str] = []  # text of the paragraph being read
        self._has_words = False  # whether _words holds more than whitespace (no join per cell)
        self._rows_read: list[str] = []  # the rows of the table being read, one line each
        self._heading: tuple[int, list[str], str | None] | None = None  # level, words, id
        self._pre = 0
        self._rows = 0
        self._sectioning = 0

    def end_section(self) -> None:
        self._end_paragraph()
        if self._paragraphs:
            headings = tuple(text for _, text in self._chain)
            text = "\n\n".join(self._paragraphs)
            self.sections.append(Section(text=text, headings=headings, anchor=self._anchor))
        self._paragraphs = []

    @property
    def empty(self) -> bool:
        """Whether nothing has been read: no text, no heading."""
        return not (self.sections or self.headings_read or self._paragraphs or self._has_words)

    def finish(self, title: str, name: str) -> Document:
        """The page read: titled `title`, else by its first `<h1>`, else `name`. A page whose
        only text is in its headings gives one section per heading, its text the heading."""
        self.end_section()
        sections = self.sections or [
            Section(text=text, headings=chain, anchor=anchor)
            for chain, text, anchor in self.headings_read
        ]
        return document(title or self.first_h1 or name, "html", sections)

    def skips(self, tag: str) -> bool:
        return tag in SKIPPED and not (tag == "header" and self._sectioning)

    def enter(self, tag: str, anchor: str | None = None) -> None:
        """An element starts; `anchor`: its id, for a heading or a sectioning element."""
        if tag in HEADINGS and self._heading is None:
            self._end_paragraph()
            self._heading = (HEADINGS[tag], [], anchor)
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
            self._places.append(anchor)
            if anchor:
                self._lead = anchor
        elif anchor and tag == "div":
            self._lead = anchor

    def leave(self, tag: str) -> None:
        if tag in HEADINGS and self._heading and self._heading[0] == HEADINGS[tag]:
            level, words, anchor = self._heading
            self._heading = None
            text = GLYPHS_AFTER_HEADING.sub("", collapse("".join(words)))
            self._open_heading(level, text, anchor)
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
            self._places.pop()

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

    def _open_heading(self, level: int, text: str, anchor: str | None) -> None:
        """A heading read: the section before it ends, and the next is under it, at its
        anchor (its id, else the id of the element that opens with it, else the id of the
        innermost section it lies in that has one)."""
        if not text:
            return
        self.end_section()
        lead, self._lead = self._lead, None
        self._anchor = anchor or lead or next((a for a in reversed(self._places) if a), None)
        while self._chain and self._chain[-1][0] >= level:
            self._chain.pop()
        self.headings_read.append((tuple(t for _, t in self._chain), text, self._anchor))
        self._chain.append((level, text))
        if level == 1 and self.first_h1 is None:
            self.first_h1 = text

    def _end_row(self) -> None:
        if row := collapse("".join(self._words)):
            self._rows_read.append(row)
        self._words = []
        self._has_words = False

    def _end_paragraph(self) -> None:
        read = len(self._paragraphs)
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
        if len(self._paragraphs) > read:
            self._lead = None  # words came between: no element opened before them opens a heading
