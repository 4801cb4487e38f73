"""EPUB (.epub): the book's chapters in reading order, each read as an HTML page is read.

META-INF/container.xml names the package document (the OPF); its manifest names every file
and its spine the chapters in reading order. Each chapter's XHTML is read by html.py — the
same furniture left out, the same sections at h1–h6, each with its heading's anchor (its id
in the chapter) — and each of its sections is headed by the chapter's title, so a result
cites `book.epub#anchor` under "Chapter 3 > Heading". A chapter's
title is its entry in the book's table of contents (the EPUB 3 navigation document, else the
EPUB 2 NCX), else its own `<title>` when that is not the book's; a chapter with neither is
headed by its own headings alone. The book's title is the OPF's `dc:title` (titles.choose),
else the file's name. A chapter with no text (a cover picture) gives no section.

The zip and its XML are read within archive.py's bounds, a chapter's elements counted against
the book's; a book of more than CHAPTERS_MAX chapters is refused before any is read; a spine
or table-of-contents reference that leaves the archive is ignored. A book whose chapters are
encrypted (DRM, named in META-INF/encryption.xml) is refused; fonts obfuscated there, as
publishers do to every font they embed, are no concern: no font is read.
"""

from __future__ import annotations

import dataclasses
import posixpath
import xml.etree.ElementTree as ET

from selectolax.lexbor import LexborHTMLParser

from metis_lite.errors import ParseError
from metis_lite.parsing import html
from metis_lite.parsing.archive import Archive, member_name
from metis_lite.parsing.common import NOTHING_TO_READ, collapse, count_elements, document
from metis_lite.parsing.titles import choose
from metis_lite.records import Document, Section

LABEL = "EPUB"
CHAPTERS_MAX = 10_000
"""The most chapters a spine may list: a long book has ~100."""

CONTAINER = "META-INF/container.xml"
ENCRYPTION = "META-INF/encryption.xml"
OPF_TYPE = "application/oebps-package+xml"
FONT_OBFUSCATION = frozenset(
    {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
)
"""The algorithms that only obfuscate embedded fonts (the IDPF's and Adobe's)."""

_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF = "{http://www.idpf.org/2007/opf}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
_ENC = "{http://www.w3.org/2001/04/xmlenc#}"


def parse(data: bytes, *, name: str) -> Document:
    """Read a book into sections, chapter by chapter, each headed by its chapter's title."""
    with Archive(data, LABEL) as archive:
        opf_name = _package_name(archive)
        opf = archive.xml(opf_name)
        folder = posixpath.dirname(opf_name)
        manifest = {item.get("id", ""): item for item in opf.iterfind(f"{_OPF}manifest/{_OPF}item")}
        spine = opf.find(_OPF + "spine")
        refs = [] if spine is None else spine.findall(_OPF + "itemref")
        if len(refs) > CHAPTERS_MAX:
            raise ParseError(
                f"{LABEL} refused: {len(refs):,} chapters, more than {CHAPTERS_MAX:,} "
                "(a chapter bomb?)"
            )
        chapters = [_href(manifest.get(ref.get("idref", "")), folder) for ref in refs]
        _refuse_encrypted(archive, {c for c in chapters if c})
        book = collapse(_text(opf.find(f"{_OPF}metadata/{_DC}title")) or "")
        contents = _table_of_contents(archive, opf, manifest, folder)
        sections: list[Section] = []
        for chapter in dict.fromkeys(c for c in chapters if c is not None and archive.has(c)):
            sections += _chapter(archive, chapter, contents.get(chapter), book)
    return document(choose(book, [], name), "epub", sections)


def _package_name(archive: Archive) -> str:
    container = archive.xml(CONTAINER)
    for rootfile in container.iter(_CONTAINER + "rootfile"):
        media = rootfile.get("media-type", OPF_TYPE)
        found = member_name("", rootfile.get("full-path", ""))
        if media == OPF_TYPE and archive.has(found):
            return str(found)
    raise ParseError(f"not a valid {LABEL} (its container names no package document)")


def _href(item: ET.Element | None, folder: str) -> str | None:
    """The member a manifest item names, or None (no item, or a path out of the archive)."""
    return None if item is None else member_name(folder, item.get("href", ""))


def _refuse_encrypted(archive: Archive, chapters: set[str]) -> None:
    """Refuse a book whose chapters encryption.xml says are encrypted (DRM: a reader's
    licence decrypts them); obfuscated fonts are let be."""
    if not archive.has(ENCRYPTION):
        return
    for data in archive.xml(ENCRYPTION).iter(_ENC + "EncryptedData"):
        method = data.find(_ENC + "EncryptionMethod")
        if method is not None and method.get("Algorithm") in FONT_OBFUSCATION:
            continue
        reference = data.find(f"{_ENC}CipherData/{_ENC}CipherReference")
        uri = member_name("", reference.get("URI", "")) if reference is not None else None
        if uri in chapters:
            raise ParseError(
                f"encrypted {LABEL} (DRM): a password or licence is needed to read {uri}"
            )


def _chapter(archive: Archive, chapter: str, title: str | None, book: str) -> list[Section]:
    """A chapter's sections, read by html.py, each headed first by the chapter's title."""
    page = archive.read(chapter)
    archive.count(count_elements(page), chapter)
    try:
        read = html.parse(page, name="")
    except ParseError as refused:
        if refused.message in NOTHING_TO_READ:  # a contents chapter too: skipped, not refused
            return []
        raise ParseError(f"{LABEL} chapter {chapter}: {refused.message}") from refused
    own = collapse(read.title)
    title = title or (own if own and own != book else None)
    if not title:
        return list(read.sections)
    return [
        s if s.headings[:1] == (title,) else dataclasses.replace(s, headings=(title, *s.headings))
        for s in read.sections
    ]


def _table_of_contents(
    archive: Archive, opf: ET.Element, manifest: dict[str, ET.Element], folder: str
) -> dict[str, str]:
    """Each chapter's title in the book's table of contents, by its member: the first entry
        that points into it. Best effort: a table refused (not XML, past a bound, declaring
    entities) gives none, and the chapters are read without it."""
    nav = next((i for i in manifest.values() if "nav" in i.get("properties", "").split()), None)
    spine = opf.find(_OPF + "spine")
    ncx = manifest.get(spine.get("toc", "")) if spine is not None else None
    try:
        if (found := _href(nav, folder)) and archive.has(found):
            page = archive.read(found)
            archive.count(count_elements(page), found)
            return _nav_titles(page, posixpath.dirname(found))
        if (found := _href(ncx, folder)) and archive.has(found):
            return _ncx_titles(archive.xml(found), posixpath.dirname(found))
    except ParseError:  # refused within the bounds, before anything grew: read without it
        pass
    return {}


def _nav_titles(page: bytes, folder: str) -> dict[str, str]:
    """EPUB 3: the links of the navigation document's `toc` nav (else its first nav)."""
    navs = LexborHTMLParser(page).css("nav")
    if not navs:
        return {}
    toc = next((n for n in navs if "toc" in (n.attributes.get("epub:type") or "").split()), navs[0])
    titles: dict[str, str] = {}
    for link in toc.css("a[href]"):
        target = member_name(folder, link.attributes.get("href") or "")
        if target and (label := collapse(link.text())):
            titles.setdefault(target, label)
    return titles


def _ncx_titles(ncx: ET.Element, folder: str) -> dict[str, str]:
    """EPUB 2: each navPoint's label and the chapter its content points into."""
    titles: dict[str, str] = {}
    for point in ncx.iter(_NCX + "navPoint"):
        content = point.find(_NCX + "content")
        target = member_name(folder, content.get("src", "")) if content is not None else None
        label = collapse(_text(point.find(f"{_NCX}navLabel/{_NCX}text")) or "")
        if target and label:
            titles.setdefault(target, label)
    return titles


def _text(element: ET.Element | None) -> str | None:
    return "".join(element.itertext()) if element is not None else None
