"""EPUB, ODT and PPTX: what each reads (text, sections, headings, slides, notes, titles), what
each refuses (zip bombs, entity bombs, slide bombs, paths out of the archive, encrypted
files), and a folder of the three indexed and searched by words. Every file is built here with
zipfile, so no binary fixture is committed."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest
from conftest import words_only_base

from metis_lite.errors import ParseError
from metis_lite.parsing import archive, kind_of, parse
from metis_lite.parsing.archive import MEMBERS_MAX, PART_ELEMENTS_MAX, member_name
from metis_lite.parsing.pptx import SLIDES_MAX
from metis_lite.settings import KINDS


def zipped(members: dict[str, str | bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as package:
        for name, content in members.items():
            package.writestr(name, content.encode() if isinstance(content, str) else content)
    return out.getvalue()


def read(kind: str, data: bytes, name: str = "file"):
    return parse(Path(f"{name}.{kind}"), data=data)


# --- EPUB ------------------------------------------------------------------------------------

CONTAINER = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="OEBPS/content.opf"
    media-type="application/oebps-package+xml"/></rootfiles>
</container>"""


def chapter(title: str, body: str) -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<html xmlns="http://www.w3.org/1999/xhtml"><head>'
        f"<title>{title}</title></head><body>{body}</body></html>"
    )


def epub(
    chapters: dict[str, str],
    spine: list[str] | None = None,
    *,
    title: str = "The Lighthouse Keeper",
    nav: str | None = None,
    extra: dict[str, str | bytes] | None = None,
    compression: int = zipfile.ZIP_DEFLATED,
) -> bytes:
    """A book of `chapters` (href under OEBPS/ → XHTML), the spine in `spine`'s order."""
    hrefs = list(chapters) if spine is None else spine
    items = "".join(
        f'<item id="c{n}" href="{href}" media-type="application/xhtml+xml"/>'
        for n, href in enumerate(hrefs)
    )
    if nav is not None:
        items += (
            '<item id="nav" href="nav.xhtml" properties="nav" media-type="application/xhtml+xml"/>'
        )
    refs = "".join(f'<itemref idref="c{n}"/>' for n in range(len(hrefs)))
    opf = (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f"<dc:title>{title}</dc:title></metadata>"
        f"<manifest>{items}</manifest><spine>{refs}</spine></package>"
    )
    members: dict[str, str | bytes] = {
        "mimetype": "application/epub+zip",
        "META-INF/container.xml": CONTAINER,
        "OEBPS/content.opf": opf,
    }
    members |= {f"OEBPS/{href}": text for href, text in chapters.items()}
    if nav is not None:
        members["OEBPS/nav.xhtml"] = chapter("Contents", nav)
    return zipped(members | (extra or {}), compression)


BOOK = {
    "one.xhtml": chapter(
        "c1", "<h1>The Storm</h1><p>Waves broke over the granite pier of the northern harbour.</p>"
    ),
    "two.xhtml": chapter(
        "c2",
        "<h1>The Lamp</h1><p>Paraffin burned all night in the great lamp of the tower.</p>"
        "<h2>Wicks</h2><p>The wicks were trimmed every four hours until dawn.</p>",
    ),
    "cover.xhtml": chapter("Cover", '<img src="cover.jpg"/>'),
}
NAV = (
    '<nav epub:type="toc" xmlns:epub="http://www.idpf.org/2007/ops"><ol>'
    '<li><a href="one.xhtml">Chapter One: Weather</a></li>'
    '<li><a href="two.xhtml#start">Chapter Two: Light</a></li></ol></nav>'
)


def test_epub_reads_chapters_in_spine_order_headed_by_their_titles():
    book = read("epub", epub(BOOK, ["cover.xhtml", "two.xhtml", "one.xhtml"], nav=NAV))
    assert book.title == "The Lighthouse Keeper" and book.kind == "epub"
    assert [(s.headings, s.text) for s in book.sections] == [
        (
            ("Chapter Two: Light", "The Lamp"),
            "Paraffin burned all night in the great lamp of the tower.",
        ),
        (
            ("Chapter Two: Light", "The Lamp", "Wicks"),
            "The wicks were trimmed every four hours until dawn.",
        ),
        (
            ("Chapter One: Weather", "The Storm"),
            "Waves broke over the granite pier of the northern harbour.",
        ),
    ]


def test_epub_without_a_table_of_contents_heads_chapters_by_their_own_titles():
    book = read("epub", epub({"a.xhtml": chapter("Harbour", "<p>Boats at anchor.</p>")}))
    assert [s.headings for s in book.sections] == [("Harbour",)]
    untitled = read("epub", epub(BOOK, title="Untitled"), name="keeper")
    assert untitled.title == "keeper"
    assert untitled.sections[0].headings == ("c1", "The Storm")


def test_epub_ignores_a_spine_reference_out_of_the_archive():
    secret = chapter("secret", "<p>SECRET outside the root</p>")
    data = epub(
        {"one.xhtml": BOOK["one.xhtml"]},
        ["one.xhtml", "../../secret.xhtml", "/etc/passwd"],
        extra={"../secret.xhtml": secret, "secret.xhtml": secret},
    )
    text = " ".join(s.text for s in read("epub", data).sections)
    assert "granite pier" in text and "SECRET" not in text


def test_member_names_never_leave_the_archive():
    assert member_name("OEBPS", "text/ch1.xhtml#p3") == "OEBPS/text/ch1.xhtml"
    assert member_name("ppt/slides", "../notesSlides/n1.xml") == "ppt/notesSlides/n1.xml"
    assert member_name("ppt", "/ppt/slides/slide1.xml") == "ppt/slides/slide1.xml"
    for escaping in ("../../etc/passwd", "/../x.xml", "file:///etc/passwd", "http://a/b", ".."):
        assert member_name("OEBPS", escaping) is None, escaping


def test_epub_with_encrypted_chapters_is_refused_but_obfuscated_fonts_are_read():
    def encryption(algorithm: str, uri: str) -> str:
        return (
            '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
            'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
            f'<enc:EncryptionMethod Algorithm="{algorithm}"/><enc:CipherData>'
            f'<enc:CipherReference URI="{uri}"/></enc:CipherData></enc:EncryptedData></encryption>'
        )

    aes = "http://www.w3.org/2001/04/xmlenc#aes128-cbc"
    locked = epub(BOOK, extra={"META-INF/encryption.xml": encryption(aes, "OEBPS/one.xhtml")})
    with pytest.raises(ParseError, match=r"encrypted EPUB \(DRM\): a password or licence"):
        read("epub", locked)
    fonts = encryption("http://www.idpf.org/2008/embedding", "OEBPS/font.otf")
    assert read("epub", epub(BOOK, extra={"META-INF/encryption.xml": fonts})).sections


def test_epub_with_too_many_chapters_is_refused_before_any_is_read():
    many = epub({}, [f"c{n}.xhtml" for n in range(10_001)])
    with pytest.raises(ParseError, match="10,001 chapters, more than 10,000"):
        read("epub", many)


def test_epub_chapter_tag_bomb_is_refused_by_the_html_bound():
    bomb = chapter("x", "<p>" * 1_000_001)  # stored, not deflated: no zip bomb, a tag bomb
    with pytest.raises(ParseError, match=r"EPUB chapter OEBPS/a.xhtml: HTML with more than"):
        read("epub", epub({"a.xhtml": bomb}, compression=zipfile.ZIP_STORED))


# --- ODT -------------------------------------------------------------------------------------

ODF_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
)


def odt(body: str, *, title: str | None = None, manifest: str = "") -> bytes:
    content = (
        f'<?xml version="1.0"?><office:document-content {ODF_NS}><office:body><office:text>'
        f"{body}</office:text></office:body></office:document-content>"
    )
    members: dict[str, str | bytes] = {
        "mimetype": "application/vnd.oasis.opendocument.text",
        "content.xml": content,
        "META-INF/manifest.xml": (
            '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0">'
            f'<manifest:file-entry manifest:full-path="content.xml">{manifest}'
            "</manifest:file-entry></manifest:manifest>"
        ),
    }
    if title is not None:
        members["meta.xml"] = (
            '<office:document-meta xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
            'xmlns:dc="http://purl.org/dc/elements/1.1/"><office:meta>'
            f"<dc:title>{title}</dc:title></office:meta></office:document-meta>"
        )
    return zipped(members)


REPORT = (
    '<text:h text:outline-level="1">Quarterly Report</text:h>'
    "<text:p>Revenue grew<text:note><text:note-body><text:p>FOOTNOTE</text:p></text:note-body>"
    "</text:note> by eleven<text:s/>percent.<text:line-break/>Second line.</text:p>"
    '<text:h text:outline-level="2">Regional Figures</text:h>'
    "<text:list><text:list-item><text:p>North held steady.</text:p></text:list-item></text:list>"
    "<table:table><table:table-row><table:table-cell><text:p>Region</text:p></table:table-cell>"
    "<table:table-cell><text:p>Sales</text:p></table:table-cell></table:table-row>"
    "<table:table-row><table:table-cell><text:p>Lisbon</text:p></table:table-cell>"
    "<table:table-cell><text:p>4,200</text:p></table:table-cell></table:table-row></table:table>"
    '<text:h text:outline-level="2">Outlook</text:h><text:p>Cautious.</text:p>'
    "<text:tracked-changes><text:changed-region><text:deletion><text:p>DELETED</text:p>"
    "</text:deletion></text:changed-region></text:tracked-changes>"
)


def test_odt_reads_headings_by_level_lists_and_tables():
    report = read("odt", odt(REPORT))
    assert report.title == "Quarterly Report" and report.kind == "odt"
    assert [(s.headings, s.text) for s in report.sections] == [
        (("Quarterly Report",), "Revenue grew by eleven percent.\nSecond line."),
        (
            ("Quarterly Report", "Regional Figures"),
            "North held steady.\n\nRegion | Sales\nLisbon | 4,200",
        ),
        (("Quarterly Report", "Outlook"), "Cautious."),
    ]


def test_odt_title_is_the_metadata_title_when_real():
    assert read("odt", odt(REPORT, title="Annual Review 2026")).title == "Annual Review 2026"
    assert read("odt", odt(REPORT, title="Untitled")).title == "Quarterly Report"
    assert read("odt", odt("<text:p>just a line</text:p>"), name="memo").title == "memo"


def test_odt_saved_with_a_password_is_refused():
    encrypted = '<manifest:encryption-data manifest:checksum-type="SHA1"/>'
    with pytest.raises(ParseError, match=r"encrypted ODT: a password is needed"):
        read("odt", odt(REPORT, manifest=encrypted))


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10 if n > 1 else "&lol;" * 10}">'
        for n in range(1, 10)
    )
    + "]>"
)


def test_entity_declarations_are_refused_before_they_expand():
    content = (
        BILLION_LAUGHS
        + f"<office:document-content {ODF_NS}><text:p>&lol9;</text:p></office:document-content>"
    )
    data = zipped({"content.xml": content})
    with pytest.raises(ParseError, match=r"content.xml declares a DTD of its own \(an entity bomb"):
        read("odt", data)


def test_an_external_dtd_is_only_named_never_fetched():
    named = '<!DOCTYPE office:document-content SYSTEM "http://127.0.0.1:9/x.dtd">'
    body = f"<office:document-content {ODF_NS}><office:body><text:p>Plain words.</text:p></office:body></office:document-content>"
    assert read("odt", zipped({"content.xml": named + body})).sections[0].text == "Plain words."


# --- PPTX ------------------------------------------------------------------------------------

PML = (
    'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
)
REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
RELS = "http://schemas.openxmlformats.org/package/2006/relationships"


def shape(text: str, placeholder: str | None = None) -> str:
    ph = f'<p:ph type="{placeholder}"/>' if placeholder else ""
    paragraphs = "".join(f"<a:p><a:r><a:t>{line}</a:t></a:r></a:p>" for line in text.split("\n"))
    return (
        f"<p:sp><p:nvSpPr><p:cNvPr id='1' name='s'/><p:cNvSpPr/><p:nvPr>{ph}</p:nvPr></p:nvSpPr>"
        f"<p:txBody>{paragraphs}</p:txBody></p:sp>"
    )


def rels(targets: list[tuple[str, str, str]]) -> str:
    return (
        f'<Relationships xmlns="{RELS}">'
        + "".join(
            f'<Relationship Id="{i}" Type="{REL}/{t}" Target="{target}"/>'
            for i, t, target in targets
        )
        + "</Relationships>"
    )


def pptx(
    slides: list[str],
    *,
    order: list[int] | None = None,
    notes: dict[int, str] | None = None,
    title: str | None = None,
    targets: dict[int, str] | None = None,
    listed: int | None = None,
) -> bytes:
    """A deck of `slides` (each the shapes of slideN.xml, N from 1), shown in `order`."""
    order = order or list(range(1, len(slides) + 1))
    ids = "".join(
        f'<p:sldId id="{255 + n}" r:id="rId{n}"/>'
        for n in (order if listed is None else range(1, listed + 1))
    )
    members: dict[str, str | bytes] = {
        "_rels/.rels": rels([("rId1", "officeDocument", "ppt/presentation.xml")]),
        "ppt/presentation.xml": f"<p:presentation {PML}><p:sldIdLst>{ids}</p:sldIdLst></p:presentation>",
        "ppt/_rels/presentation.xml.rels": rels(
            [
                (f"rId{n}", "slide", (targets or {}).get(n, f"slides/slide{n}.xml"))
                for n in range(1, len(slides) + 1)
            ]
        ),
    }
    for n, shapes in enumerate(slides, 1):
        members[f"ppt/slides/slide{n}.xml"] = (
            f"<p:sld {PML}><p:cSld><p:spTree>{shapes}</p:spTree></p:cSld></p:sld>"
        )
        if notes and n in notes:
            members[f"ppt/slides/_rels/slide{n}.xml.rels"] = rels(
                [("rId1", "notesSlide", f"../notesSlides/notesSlide{n}.xml")]
            )
            members[f"ppt/notesSlides/notesSlide{n}.xml"] = (
                f"<p:notes {PML}><p:cSld><p:spTree>{shape('', 'sldImg')}{shape(notes[n], 'body')}"
                f"{shape(str(n), 'sldNum')}</p:spTree></p:cSld></p:notes>"
            )
    if title is not None:
        members["docProps/core.xml"] = (
            '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" '
            f'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title></cp:coreProperties>'
        )
    return zipped(members)


TABLE = (
    "<p:graphicFrame><a:graphic><a:graphicData><a:tbl>"
    "<a:tr><a:tc><a:txBody><a:p><a:r><a:t>Site</a:t></a:r></a:p></a:txBody></a:tc>"
    "<a:tc><a:txBody><a:p><a:r><a:t>Turbines</a:t></a:r></a:p></a:txBody></a:tc></a:tr>"
    "<a:tr><a:tc><a:txBody><a:p><a:r><a:t>Aveiro</a:t></a:r></a:p></a:txBody></a:tc>"
    "<a:tc><a:txBody><a:p><a:r><a:t>12</a:t></a:r></a:p></a:txBody></a:tc></a:tr>"
    "</a:tbl></a:graphicData></a:graphic></p:graphicFrame>"
)
DECK = [
    shape("Wind Farm Review", "ctrTitle")
    + shape("Board meeting of the regional energy cooperative"),
    shape("Costs", "title") + shape("Maintenance rose\nInsurance fell") + shape("7", "sldNum"),
    shape("Sites", "title") + TABLE,
    "",
]


def test_pptx_reads_slides_in_the_presentations_order_with_their_numbers_and_notes():
    deck = read("pptx", pptx(DECK, order=[1, 3, 2, 4], notes={2: "Mention the gearbox recall."}))
    assert deck.title == "Wind Farm Review" and deck.kind == "pptx"
    assert [(s.page, s.headings, s.text) for s in deck.sections] == [
        (1, ("Wind Farm Review",), "Board meeting of the regional energy cooperative"),
        (2, ("Sites",), "Site | Turbines\nAveiro | 12"),
        (3, ("Costs",), "Maintenance rose\nInsurance fell\n\nMention the gearbox recall."),
    ]


def test_pptx_title_slide_alone_is_found_by_its_title_and_metadata_title_wins_when_real():
    deck = read("pptx", pptx([shape("Part Two", "title")], title="PowerPoint Presentation"))
    assert [(s.page, s.text) for s in deck.sections] == [(1, "Part Two")]
    assert deck.title == "Part Two"
    assert read("pptx", pptx(DECK, title="Energy Board 2026")).title == "Energy Board 2026"


def test_pptx_ignores_a_slide_whose_target_leaves_the_archive():
    data = pptx(DECK[:2], targets={1: "../../../etc/passwd"})
    assert [s.page for s in read("pptx", data).sections] == [2]


def test_a_deck_of_too_many_slides_is_refused_before_any_is_read():
    with pytest.raises(ParseError, match=f"{SLIDES_MAX + 1:,} slides, more than {SLIDES_MAX:,}"):
        read("pptx", pptx([""], listed=SLIDES_MAX + 1))


def test_an_encrypted_office_file_is_refused_as_encrypted():
    ole = bytes.fromhex("D0CF11E0A1B11AE1") + bytes(500) + "EncryptionInfo".encode("utf-16-le")
    with pytest.raises(ParseError, match=r"encrypted PPTX: a password is needed"):
        read("pptx", ole + bytes(500))
    with pytest.raises(ParseError, match=r"Office 97–2003 file"):
        read("pptx", bytes.fromhex("D0CF11E0A1B11AE1") + bytes(1000))


# --- bounds shared by the three --------------------------------------------------------------


def bomb(member: str, size: int) -> bytes:
    """A zip whose `member` inflates to `size` bytes of spaces (deflate packs them ~1,000×)."""
    return zipped({member: b"<a>" + b" " * size + b"</a>"})


@pytest.mark.parametrize(
    "kind, member",
    [("epub", "META-INF/container.xml"), ("odt", "content.xml"), ("pptx", "_rels/.rels")],
)
def test_a_zip_bomb_is_refused_before_it_inflates(kind, member):
    big = bomb(member, 80 * 1024 * 1024)
    assert len(big) < 200_000
    with pytest.raises(ParseError, match=r"declares 80 MiB uncompressed \(a zip bomb\?\)"):
        read(kind, big)
    with pytest.raises(ParseError, match=r"inflates 1,0\d\d× to 4 MiB uncompressed \(a zip bomb"):
        read(kind, bomb(member, 4 * 1024 * 1024))


def test_the_members_read_together_are_bounded(monkeypatch):
    monkeypatch.setattr(archive, "TOTAL_BYTES_MAX", 2 * 1024 * 1024)
    words = " ".join(os.urandom(8).hex() for _ in range(50_000))  # ~850 KB, packs ~2×
    data = odt(f"<text:p>{words}</text:p>", title=words + words)
    with pytest.raises(ParseError, match=r"its parts hold more than 2 MiB uncompressed"):
        read("odt", data)
    monkeypatch.undo()
    assert read("odt", data).sections


def test_a_member_that_inflates_past_its_declared_size_is_stopped():
    """zipfile reads no further than a member declares: a lying size fails its CRC, not memory."""
    lying = bytearray(bomb("content.xml", 2 * 1024 * 1024))
    central = lying.rfind(b"PK\x01\x02")
    lying[central + 24 : central + 28] = (1000).to_bytes(4, "little")  # declared: 1,000 bytes
    local = lying.find(b"PK\x03\x04")
    lying[local + 22 : local + 26] = (1000).to_bytes(4, "little")
    with pytest.raises(ParseError, match=r"not a valid ODT \(content.xml: Bad CRC-32"):
        read("odt", bytes(lying))


def test_a_part_of_too_many_elements_is_refused():
    many = (
        f"<office:document-content {ODF_NS}>"
        + "<text:p/>" * PART_ELEMENTS_MAX
        + "</office:document-content>"
    )
    with pytest.raises(ParseError, match=f"more than {PART_ELEMENTS_MAX:,} elements"):
        read("odt", zipped({"content.xml": many}, zipfile.ZIP_STORED))


def test_a_zip_of_too_many_members_is_refused_before_its_directory_is_read():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as package:
        for n in range(MEMBERS_MAX + 1):
            package.writestr(f"{n}", b"")
    with pytest.raises(ParseError, match=r"members in its zip \(at most"):
        read("epub", out.getvalue())


@pytest.mark.parametrize("kind", ["epub", "odt", "pptx"])
def test_what_is_not_a_zip_is_refused_plainly(kind):
    with pytest.raises(ParseError, match=f"not a valid {kind.upper()}"):
        read(kind, b"just some text, not a zip")
    with pytest.raises(ParseError, match="not a valid"):
        read(kind, zipped({"other.txt": "nothing the format needs"}))


# --- registered and indexed ------------------------------------------------------------------


def test_the_kinds_are_read_by_suffix():
    assert {"epub", "odt", "pptx"} <= set(KINDS)
    assert [kind_of(Path(p)) for p in ("a.EPUB", "b.odt", "c.pptx")] == ["epub", "odt", "pptx"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_folder_of_each_kind_is_indexed_and_found_with_its_citation(tmp_path, workers):
    folder = tmp_path / "library"
    folder.mkdir()
    (folder / "keeper.epub").write_bytes(epub(BOOK, nav=NAV))
    (folder / "report.odt").write_bytes(odt(REPORT))
    (folder / "wind.pptx").write_bytes(pptx(DECK, notes={2: "Mention the gearbox recall."}))
    with words_only_base(tmp_path / "library.db", folder) as base:
        report = base.index(workers=workers)
        assert (report.added, report.skipped) == (3, ())

        def cited(question: str):
            result = base.search(question, mode="keyword").results[0]
            c = result.citation
            return c.document, c.kind, c.title, c.headings, c.page

        assert cited("paraffin") == (
            "keeper.epub",
            "epub",
            "The Lighthouse Keeper",
            ("Chapter Two: Light", "The Lamp"),
            None,
        )
        assert cited("Lisbon") == (
            "report.odt",
            "odt",
            "Quarterly Report",
            ("Quarterly Report", "Regional Figures"),
            None,
        )
        assert cited("gearbox") == ("wind.pptx", "pptx", "Wind Farm Review", ("Costs",), 2)


def test_an_epubs_table_of_contents_in_its_spine_is_skipped_and_the_book_read():
    links = "".join(f'<li><a href="c{n}.xhtml">Chapter {n} of the book</a></li>' for n in (1, 2, 3))
    book = epub(
        {
            "toc.xhtml": chapter("Contents", f"<h1>Contents</h1><ol>{links}</ol>"),
            "one.xhtml": chapter("One", "<h1>The Storm</h1><p>Waves broke over the lamp.</p>"),
        }
    )
    assert [s.text for s in read("epub", book).sections] == ["Waves broke over the lamp."]
