"""Parsers, on the shipped example folder and on files that must be refused.

Citations are checked against the real files: the line a Section's offset gives must be the
line of the source file holding that text, read here independently of the parser.
"""

from __future__ import annotations

import codecs
import importlib.util
import io
import re
import resource
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docx as python_docx
import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from made_pdfs import pdf_with_stream
from pypdf import PdfReader, PdfWriter

from metis_lite.errors import ParseError
from metis_lite.parsing import (
    KIND_BY_SUFFIX,
    PARSERS,
    html,
    kind_of,
    nesting,
    parse,
    parser_for,
    pdf,
)
from metis_lite.parsing.docx import MAX_PART_BYTES
from metis_lite.parsing.pdf import page_text
from metis_lite.records import Document, Section
from metis_lite.settings import KINDS
from metis_lite.text.tokenizer import tokens

ROOT = Path(__file__).resolve().parent.parent
HANDBOOK = ROOT / "examples" / "handbook"
BAD = ROOT / "tests" / "fixtures" / "bad"
SOURCE_ENCODING = {"ti/relatorio-de-incidentes.txt": "cp1252"}


def example(relative: str) -> Document:
    return parse(HANDBOOK / relative)


def source_lines(relative: str) -> list[str]:
    """The file's lines as an editor numbers them (universal newlines), line 1 at index 0."""
    encoding = SOURCE_ENCODING.get(relative, "utf-8")
    return (HANDBOOK / relative).read_text(encoding=encoding).split("\n")


def line_of(section: Section, needle: str) -> int:
    """The 1-based line a citation gives for `needle`, by the Section contract."""
    offset = section.text.index(needle)
    assert section.start_line is not None
    return section.start_line + section.text.count("\n", 0, offset)


def section_with(document: Document, needle: str) -> Section:
    found = [s for s in document.sections if needle in s.text]
    assert len(found) == 1, f"{needle!r} in {len(found)} sections"
    return found[0]


def example_files() -> list[Path]:
    return sorted(p for p in HANDBOOK.rglob("*") if p.is_file() and kind_of(p))


# --- kinds ---------------------------------------------------------------------------------


def test_kind_by_suffix_covers_every_kind():
    assert set(KIND_BY_SUFFIX.values()) == set(KINDS) == set(PARSERS)
    assert kind_of(Path("a/b.MD")) == "md"
    assert kind_of(Path("notes.markdown")) == kind_of(Path("x.md")) == "md"
    assert kind_of(Path("x.text")) == "txt"
    assert kind_of(Path("x.HTM")) == kind_of(Path("x.html")) == "html"
    assert kind_of(Path("x.pdf")) == "pdf"
    assert kind_of(Path("x.docx")) == "docx"
    assert kind_of(Path("scan.PNG")) == kind_of(Path("x.jpeg")) == kind_of(Path("x.tif")) == "image"
    for other in ("x.gif", "x.doc", "x.docx.bak", "Makefile", ".gitattributes"):
        assert kind_of(Path(other)) is None


def test_parse_refuses_a_kind_it_does_not_read(tmp_path):
    image = tmp_path / "photo.gif"
    image.write_bytes(b"GIF89a")
    with pytest.raises(ParseError, match="not a kind a base reads"):
        parse(image)


def test_parse_reports_an_unreadable_path(tmp_path):
    with pytest.raises(ParseError, match="cannot read the file"):
        parse(tmp_path / "missing.md")
    folder = tmp_path / "folder.md"
    folder.mkdir()
    with pytest.raises(ParseError, match="cannot read the file"):
        parse(folder)


def test_parse_uses_given_bytes_and_kind(tmp_path):
    path = tmp_path / "not-there.bin"
    document = parse(path, kind="md", data=b"# Given\n\nbytes, not the disk")
    assert document.title == "Given"
    assert document.kind == "md"


# --- the example folder ----------------------------------------------------------------------


def test_example_folder_has_every_kind_nested():
    files = example_files()
    assert 8 <= len(files) <= 15
    # EPUB, ODT and PPTX are built by tests/test_formats.py instead, images by test_ocr.py: the
    # handbook's answers (examples/handbook-questions.jsonl, tests/fixtures/pipeline) are
    # pinned on these kinds.
    assert {kind_of(p) for p in files} == set(KINDS) - {"epub", "odt", "pptx", "image"}
    assert {p.parent for p in files} - {HANDBOOK}, "nested folders"


@pytest.mark.parametrize("path", example_files(), ids=lambda p: str(p.relative_to(HANDBOOK)))
def test_every_example_parses_cleanly(path):
    document = parse(path)
    assert document.kind == kind_of(path)
    assert document.title.strip() == document.title and document.title
    assert document.sections
    for section in document.sections:
        assert section.text.strip() == section.text and section.text
        assert "\r" not in section.text
        assert all(section.headings), "no empty heading in a chain"
        if document.kind == "pdf":
            assert section.page and section.start_line is None and section.headings == ()
        elif document.kind in ("md", "txt"):
            assert section.start_line and section.page is None
        else:
            assert section.start_line is None and section.page is None


def test_some_sections_are_longer_than_a_chunk():
    longest = max(len(s.text) for p in example_files() for s in parse(p).sections)
    assert longest > 1200
    long_ones = {p for p in example_files() if any(len(s.text) > 1200 for s in parse(p).sections)}
    assert len(long_ones) >= 3


@pytest.mark.parametrize(
    "relative",
    [str(p.relative_to(HANDBOOK)) for p in example_files() if kind_of(p) in ("md", "txt")],
)
def test_every_line_of_a_section_is_its_source_line(relative):
    lines = source_lines(relative)
    for section in example(relative).sections:
        assert section.start_line is not None
        for k, line in enumerate(section.text.split("\n")):
            assert lines[section.start_line - 1 + k].rstrip() == line
        assert lines[section.start_line - 1].strip(), "a section starts at a non-blank line"


@pytest.mark.parametrize(
    ("relative", "needle"),
    [
        ("policies/leave.md", "25 days of paid vacation"),
        ("policies/leave.md", "three months of unpaid\nleave, once every three years"),
        ("policies/travel-and-expenses.md", "| São Paulo   | R$650"),
        ("policies/code-of-conduct.txt", "5. Consequences"),
        ("ti/configuração-do-proxy.md", "export no_proxy="),
        ("ti/configuração-do-proxy.md", "Erro 407"),
        ("ti/relatorio-de-incidentes.txt", "O nó gpu-17 do cluster"),
        ("welcome.md", "Anyone can propose a change."),
    ],
)
def test_citation_line_is_the_line_of_the_source_file(relative, needle):
    section = section_with(example(relative), needle)
    first = needle.split("\n")[0]
    expected = [n for n, line in enumerate(source_lines(relative), start=1) if first in line]
    assert len(expected) == 1
    assert line_of(section, needle) == expected[0]


def test_leave_policy_headings_title_and_vacation():
    document = example("policies/leave.md")
    assert document.title == "Leave policy"  # front matter, not the first H1
    vacation = section_with(document, "25 days of paid vacation")
    assert vacation.headings == ("Handbook", "Leave policy", "Vacation")
    assert "holiday" not in vacation.text.lower()
    assert not vacation.text.startswith("#"), "a heading line is not section text"
    assert all("owner: People team" not in s.text for s in document.sections)
    assert [s.headings[-1] for s in document.sections] == [
        "Handbook", "Leave policy", "Vacation", "Sick leave", "Parental leave", "Unpaid leave",
    ]  # fmt: skip


def test_setext_headings_and_code_fences():
    welcome = example("welcome.md")
    assert welcome.title == "Welcome to Lumen"
    assert [s.headings for s in welcome.sections] == [
        ("Welcome to Lumen",),
        ("Welcome to Lumen", "How this handbook is organised"),
        ("Welcome to Lumen", "Changing the handbook"),
    ]
    proxy = example("ti/configuração-do-proxy.md")
    assert proxy.title == "Configuração do proxy"
    headings = {h for s in proxy.sections for h in s.headings}
    assert "Problemas frequentes" in headings  # setext under a paragraph-free line
    assert not any("Proxy corporativo" in h or "Exceções" in h for h in headings)
    linux = section_with(proxy, "# Proxy corporativo da Lumen")
    assert linux.headings == ("Configuração do proxy", "Configuração no Linux")
    assert "```bash\n# Proxy corporativo da Lumen\nexport http_proxy=" in linux.text


def test_text_files_utf8_and_windows_1252():
    conduct = example("policies/code-of-conduct.txt")
    assert conduct.title == "code-of-conduct"
    assert len(conduct.sections) == 1 and conduct.sections[0].start_line == 1
    assert "Lumen Analytics — how we treat each other" in conduct.sections[0].text
    report = example("ti/relatorio-de-incidentes.txt")
    raw = (HANDBOOK / "ti/relatorio-de-incidentes.txt").read_bytes()
    assert b"Relat\xf3rio" in raw and b"\r\n" in raw, "the file really is Windows-1252, CRLF"
    text = report.sections[0].text
    assert text.startswith("Relatório mensal de incidentes – março de 2024\n")
    assert "1 850 €" in text and "«phishing»" in text
    assert re.findall(r"\w+", text)[0] == "Relatório", "one word, not mojibake"


def test_html_sections_tables_and_furniture_dropped():
    document = example("it/gpu-troubleshooting.html")
    assert document.title == "GPU troubleshooting"
    assert [s.headings for s in document.sections] == [
        ("GPU troubleshooting",),
        ("GPU troubleshooting", "Reading Xid errors"),
        ("GPU troubleshooting", "Xid 79: GPU has fallen off the bus"),
        ("GPU troubleshooting", "Checking a node by hand"),
    ]
    everything = "\n\n".join(s.text for s in document.sections)
    for furniture in ("window.analytics", "font-family", "Lumen intranet", "Policies",
                      "Last reviewed", "Related:", "tabIndex"):  # fmt: skip
        assert furniture not in everything
    table = section_with(document, "GPU has fallen off the bus | Drain")
    rows = [p for p in table.text.split("\n\n") if p.startswith("Xid |")][0].split("\n")
    assert rows[0] == "Xid | Meaning | What to do"
    assert "79 | GPU has fallen off the bus | Drain the node and tell IT at once" in rows
    xid = section_with(document, "Xid 79 means that the driver lost contact")
    assert "lost contact with the GPU over PCIe: the GPU stopped answering" in xid.text
    paragraphs = xid.text.split("\n\n")
    assert paragraphs[1] == "What to do, in this order:"
    assert paragraphs[2].startswith("Drain the node so that Slurm stops sending jobs to it:")
    assert all("  " not in p and "\n" not in p for p in paragraphs)
    check = section_with(document, "0, 41, 71.20 W, 0")
    assert "\nindex, temperature.gpu, power.draw [W]" in check.text  # <pre> keeps its lines


def test_html_whose_only_text_is_a_heading_is_read():
    page = "<!DOCTYPE html><title>Bericht</title><h3>Jahresabschluss zum Geschäftsjahr 2023</h3>"
    document = html.parse(page.encode(), name="bericht")
    assert [(s.headings, s.text) for s in document.sections] == [
        ((), "Jahresabschluss zum Geschäftsjahr 2023")
    ]
    nested = b"<h1>Report</h1><h2>Summary</h2><h2>Figures</h2>"
    assert [(s.headings, s.text) for s in html.parse(nested, name="r").sections] == [
        ((), "Report"),
        (("Report",), "Summary"),
        (("Report",), "Figures"),
    ]
    with pytest.raises(ParseError, match="no text"):
        html.parse(b"<title>Only a title</title><p> </p>", name="empty")


def test_furniture_marked_by_its_aria_role_is_dropped():
    page = (
        b'<div class="related" role="navigation"><a href="/">index</a> | next</div>'
        b'<div class="body"><h1>Guide</h1><p>The text.</p></div>'
        b'<div class="sphinxsidebar" role="Navigation search"><h3>Previous topic</h3></div>'
        b'<div role="contentinfo">Copyright</div><div role="note">A note.</div>'
    )  # no role main: the whole page is read (with one, it alone is: test_site_pages.py)
    document = html.parse(page, name="g")
    assert [(s.headings, s.text) for s in document.sections] == [
        (("Guide",), "The text.\n\nA note.")
    ]


def test_html_encoding_from_meta_charset():
    raw = (HANDBOOK / "people/benefits.htm").read_bytes()
    assert b"\x809.60" in raw and b'charset="windows-1252"' in raw
    document = example("people/benefits.htm")
    assert document.title == "Benefits"
    text = "\n".join(s.text for s in document.sections)
    assert "€9.60" in text and "You’ll find" in text and "Médis" in text and "“Benefits”" in text
    assert "Intranet" not in text and "©" not in text, "nav and footer dropped"


def test_pdf_pages_title_accents_and_hyphenation():
    document = example("it/security-guide.pdf")
    assert document.title == "Security guide"
    assert [s.page for s in document.sections] == [1, 2, 4, 5], "page 3 has no text layer"
    assert section_with(document, "Laptops and disk encryption").page == 2
    portuguese = document.sections[-1].text
    assert portuguese.startswith("Autenticação na VPN (Lisboa)")
    assert "é necessária a autenticação com o utilizador" in portuguese
    assert "autenti-" not in portuguese and "«Lisboa»" in portuguese


def test_pdf_title_falls_back_to_first_line():
    writer = PdfWriter(clone_from=PdfReader(BAD / "broken-xref.pdf"))
    writer.add_metadata({"/Title": ""})
    out = io.BytesIO()
    writer.write(out)
    document = parser_for("pdf")(out.getvalue(), name="stem")
    assert document.title.startswith("Page 1 of a small test document.")


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("configu-\nração do proxy", "configuração do proxy"),
        ("PO-\n2231", "PO-\n2231"),
        ("Xid-\nAlpha", "Xid-\nAlpha"),
        ("a   b\t c\n\n\n\nnext ", "a b c\n\nnext"),
        ("fim de li-  \n  nha", "fim de linha"),
        ("autenti\x02cação com o", "autenticação com o"),  # PDFium's mark of a line-end hyphen
        ("autenti\ufffecação", "autenticação"),
        ("PO\x022231", "PO-\n2231"),
    ],
)
def test_pdf_page_text_cleanup(raw, cleaned):
    assert page_text(raw) == cleaned


def test_pdf_encrypted_with_owner_password_only_is_read():
    writer = PdfWriter(clone_from=PdfReader(HANDBOOK / "it/security-guide.pdf"))
    writer.encrypt(user_password="", owner_password="owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    document = parser_for("pdf")(out.getvalue(), name="x")
    assert [s.page for s in document.sections] == [1, 2, 4, 5]


@pytest.mark.parametrize("ascii85", [False, True], ids=["flate", "ascii85-then-flate"])
def test_a_pdf_bomb_is_refused_and_costs_only_the_pdfium_worker(ascii85):
    """1 GiB of spaces in a 1 MB file: PDFium would hold it whole (2 GB of memory). Its worker
    process is capped; it dies, the file is refused, this process's memory stays as it was,
    and the next PDF is read by a new worker."""
    assert (
        parser_for("pdf")(pdf_with_stream(1 << 20, ascii85=ascii85), name="s").sections[0].text
        == "bomb"
    )
    bomb = pdf_with_stream(1 << 30, ascii85=ascii85)
    assert len(bomb) < 2_000_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ParseError, match="PDF bomb"):
        parser_for("pdf")(bomb, name="bomb")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB
    assert [s.page for s in parse(HANDBOOK / "it/security-guide.pdf").sections] == [1, 2, 4, 5]


def test_what_the_pdfium_worker_sends_back_is_checked_as_hostile():
    """A worker a file took over could answer anything: only text is taken, and a lone
    surrogate, which no base could store, is replaced."""
    assert pdf._checked({"pages": ["a\udc80b", 3], "title": "t\ud800", "heading": "h\udc80"}) == {
        "pages": ["a?b", ""],
        "title": "t?",
        "heading": "h?",
        "ocr": [],
        "unread": 0,
        "unread_why": "",
    }
    assert pdf._checked({"refused": "encrypted PDF"}) == {"refused": "encrypted PDF"}
    nonsense_answers = (
        [],
        {"pages": "x", "title": ""},
        {"pages": [], "title": 3},
        {"pages": [], "title": "", "heading": 3},
        None,
    )
    for nonsense in nonsense_answers:
        with pytest.raises(ParseError, match="something other than the text of a PDF"):
            pdf._checked(nonsense)


def test_pdfs_parsed_on_many_threads_and_in_a_second_process_read_the_same(tmp_path):
    """PDFium is not thread-safe: one lock serializes it. Eight threads parse the example PDFs
    at once, a second process parses them too, and every document is the one read alone."""
    paths = [HANDBOOK / "it/security-guide.pdf", BAD / "broken-xref.pdf"]
    alone = {p: parse(p) for p in paths}
    script = (
        "import sys; from pathlib import Path; from metis_lite.parsing import parse\n"
        "for _ in range(30):\n"
        "    for p in sys.argv[1:]: parse(Path(p))\n"
        "print('done')\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", script, *map(str, paths)], cwd=ROOT, stdout=subprocess.PIPE
    )
    with ThreadPoolExecutor(max_workers=8) as pool:
        read = list(pool.map(parse, paths * 40))
    assert read == [alone[p] for p in paths * 40]
    out, _ = other.communicate(timeout=120)
    assert other.returncode == 0 and out.strip() == b"done"


def test_docx_title_headings_and_tables():
    document = example("purchasing/purchase-orders.docx")
    assert document.title == "Purchasing guide"  # Title style; the core title is empty
    assert [s.headings for s in document.sections] == [
        ("Purchasing guide",),
        ("Purchasing guide", "Purchase orders"),
        ("Purchasing guide", "Purchase orders", "Approval limits"),
        ("Purchasing guide", "Purchase orders", "Open purchase orders"),
        ("Purchasing guide", "Suppliers"),
    ]
    orders = section_with(document, "PO-2231 | Dell")
    intro, table, after = orders.text.split("\n\n")
    assert intro.startswith("Orders placed this quarter") and after.startswith("PO-2231 is late")
    rows = table.split("\n")
    assert rows[0] == "PO number | Supplier | Item | Amount | Status"
    assert (
        "PO-2231 | Dell Technologies | 14 Latitude 7450 laptops | €18,900 | Awaiting delivery"
        in rows
    )
    assert len(rows) == 5


def test_docx_core_title_lists_breaks_and_merged_cells():
    document = example("people/onboarding.docx")
    assert document.title == "Onboarding checklist"
    day_one = section_with(document, "Collect your laptop")
    assert day_one.headings == ("Your first week", "Day one")
    assert len(day_one.text.split("\n\n")) == 3
    breaks = section_with(document, "Read the handbook")
    assert breaks.text == (
        "Read the handbook, starting with the leave policy.\n"
        "Meet your onboarding buddy every day at 16:00."
    )
    contacts = section_with(document, "Contacts for your first month").text.split("\n")
    assert contacts[0] == "Contacts for your first month", "a merged cell counts once"
    assert contacts[1:] == [
        "IT | Rui Almeida | ext. 4357",
        "People | Marta Costa | people@lumen.example",
    ]


# --- bad input --------------------------------------------------------------------------------

REFUSED = {
    "binary.html": "binary file, not HTML",
    "binary.txt": "binary file, not text",
    "control-characters.txt": "binary file, not text",
    "corrupt.docx": "not a valid DOCX (zip error)",
    "corrupt.pdf": "not a valid PDF",
    "empty.docx": "empty file",
    "empty.html": "empty file",
    "empty.pdf": "empty file",
    "empty.txt": "empty file",
    "encrypted.pdf": "encrypted PDF",
    "front-matter-only.md": "no text",
    "not-a-pdf.pdf": "not a PDF",
    "not-word.docx": "not a valid DOCX",
    "scanned.pdf": "no text layer on any page",
    "truncated.docx": "not a valid DOCX (zip error)",
    "truncated.pdf": "not a valid PDF (truncated",
    "whitespace-only.md": "empty file",
    "zip-bomb.docx": "zip bomb",
}
"""Each bad fixture refused, with the reason its ParseError gives."""

RECOVERED = {
    "broken-xref.pdf": "Page 3 of a small test document.",
    "deep-nesting.html": "the bottom of a very deep page",
    "invalid-utf8.txt": "Relatório de março: ção está pronto.",
}
"""Each bad fixture a parser reads anyway, with text it must find."""


def test_every_bad_fixture_has_an_expectation():
    assert {p.name for p in BAD.iterdir()} == set(REFUSED) | set(RECOVERED)
    assert sum(p.stat().st_size for p in BAD.iterdir()) < 1_000_000


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bad_fixture_is_refused_with_its_reason(name):
    with pytest.raises(ParseError) as refused:
        parse(BAD / name)
    assert REFUSED[name] in refused.value.message
    assert refused.value.code == "PARSE_ERROR" and refused.value.status == 422
    assert len(refused.value.message) < 160 and "\n" not in refused.value.message


@pytest.mark.parametrize("name", sorted(set(RECOVERED) - {"deep-nesting.html"}))
def test_bad_fixture_is_recovered(name):
    document = parse(BAD / name)
    assert any(RECOVERED[name] in s.text for s in document.sections)


def test_broken_xref_keeps_every_page():
    assert [s.page for s in parse(BAD / "broken-xref.pdf").sections] == [1, 2, 3]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(set(REFUSED) | set(RECOVERED) - {"deep-nesting.html"}))
def test_any_file_read_as_any_kind_gives_a_document_or_a_parse_error(name, kind):
    data = (BAD / name).read_bytes()
    try:
        document = parse(BAD / name, kind=kind, data=data)
    except ParseError as refused:
        assert refused.message
    else:
        assert isinstance(document, Document) and document.sections


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=3000), kind=st.sampled_from(KINDS))
def test_random_bytes_give_a_document_or_a_parse_error(data, kind):
    try:
        document = parse(Path(f"random.{kind}"), data=data)
    except ParseError as refused:
        assert refused.message and "\n" not in refused.message
    else:
        assert document.kind == kind and document.sections
        assert all(s.text.strip() for s in document.sections)


WORDS = st.lists(
    st.text(alphabet=st.characters(categories=("L", "N")), min_size=2, max_size=12),
    min_size=1,
    max_size=60,
)
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-be-bom", "utf-32", "utf-32-be-bom", "cp1252"]


def encoded(text: str, encoding: str) -> bytes:
    """`text` in `encoding`; "…-bom" is the big-endian form with its byte-order mark."""
    if encoding.endswith("-bom"):
        return "\ufeff".encode(encoding[:-4]) + text.encode(encoding[:-4])
    return text.encode(encoding)


@settings(max_examples=120, deadline=None)
@given(
    words=WORDS, kind=st.sampled_from(["txt", "md", "html"]), encoding=st.sampled_from(ENCODINGS)
)
def test_text_in_any_encoding_is_read_word_for_word(words, kind, encoding):
    """The oracle is the words written: a parser that refused text, or misread its encoding,
    fails here (a cp1252 page declares its charset, as a page that is not UTF-8 must)."""
    body = " ".join(words)
    if encoding == "cp1252":
        try:
            body.encode("cp1252")
        except UnicodeEncodeError:
            encoding = "utf-8"
    if kind == "html":
        declared = '<meta charset="windows-1252">' if encoding == "cp1252" else ""
        text = f"<!DOCTYPE html>{declared}<title>t</title><p>{body}</p>"
    else:
        text = body
    document = parse(Path(f"words.{kind}"), data=encoded(text, encoding))
    assert tokens(" ".join(s.text for s in document.sections)) == tokens(body)


def test_utf16_text_with_bom(tmp_path):
    path = tmp_path / "windows-notepad.txt"
    path.write_bytes("\ufeffRelatório\r\nsegunda linha\r\n".encode("utf-16-le"))
    document = parse(path)
    assert document.sections[0].text == "Relatório\nsegunda linha"


@pytest.mark.parametrize("encoding", ["utf-32-le", "utf-32-be"])
def test_utf32_text_with_bom(tmp_path, encoding):
    path = tmp_path / "export.txt"
    path.write_bytes("\ufeffJahresabschluss\r\nGeschäftsjahr 2023\r\n".encode(encoding))
    document = parse(path)
    assert document.sections[0].text == "Jahresabschluss\nGeschäftsjahr 2023"


def test_a_bom_whose_encoding_the_bytes_break_is_refused(tmp_path):
    path = tmp_path / "broken.txt"
    path.write_bytes(codecs.BOM_UTF32_LE + "text".encode("utf-32-le") + b"\xff\xff\xff\xff")
    with pytest.raises(ParseError, match="not valid UTF-32 text"):
        parse(path)
    path.write_bytes(codecs.BOM_UTF16_LE + "text".encode("utf-16-le") + b"\x00\xd8")
    with pytest.raises(ParseError, match="not valid UTF-16 text"):
        parse(path)


def test_text_starts_at_first_non_blank_line(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"\n\n   \nfirst\n  \nthird   \n\n")
    section = parse(path).sections[0]
    assert section.start_line == 4 and section.text == "first\n\nthird"


def test_an_honest_zip_bomb_is_refused_before_it_inflates(tmp_path):
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as package:
        with package.open("word/document.xml", "w", force_zip64=True) as member:
            block = bytes(1 << 20)
            for _ in range(MAX_PART_BYTES // len(block) + 1):
                member.write(block)
    assert len(bomb.getvalue()) < 2_000_000
    with pytest.raises(ParseError, match="zip bomb"):
        parse(tmp_path / "bomb.docx", data=bomb.getvalue())


def test_a_docx_without_text_is_refused():
    out = io.BytesIO()
    python_docx.Document().save(out)
    with pytest.raises(ParseError, match="no text"):
        parser_for("docx")(out.getvalue(), name="blank")


# --- deep HTML ------------------------------------------------------------------------------


def tree_depth(node) -> int:
    """The depth of lexbor's tree under `node`, walked with a stack (the tree may be deep)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        child = node.child
        while child is not None:
            stack.append((child, depth + 1))
            child = child.next
    return deepest


def test_deeply_nested_html_fixture_is_read_with_a_short_stack(monkeypatch):
    """Bounded time without timing: lexbor's scope checks scan its stack of open elements,
    which is never deeper than the tree it builds — so a shallow tree means work linear in the
    file. The fixture (100,000 nested <div>s) costs lexbor ~20 s unflattened."""
    trees = []
    real = html.LexborHTMLParser

    def recorded(data, *args, **kwargs):
        trees.append((data, real(data, *args, **kwargs)))
        return trees[-1][1]

    monkeypatch.setattr(html, "LexborHTMLParser", recorded)
    raw = (BAD / "deep-nesting.html").read_bytes()
    assert nesting.scan_work(raw) > 50 * nesting.SCAN_BUDGET
    document = parse(BAD / "deep-nesting.html")
    assert document.title == "Deep"
    assert document.sections[0].text == "the bottom of a very deep page"
    ((given, tree),) = trees
    assert given != raw and nesting.scan_work(given) <= nesting.SCAN_BUDGET
    assert tree_depth(tree.root) <= nesting.FLATTEN_DEPTH + 3  # html, body, the text


def test_deep_html_keeps_every_word_in_order():
    depth = 20_000
    page = (
        b"<title>T</title><p>top</p>"
        + b"<div><span><b>" * depth
        + b"<h2>Deep heading</h2>deep text"
        + b"</b></span></div>" * depth
        + b"<p>after</p>"
    )
    document = html.parse(page, name="deep")
    assert [(s.headings, s.text) for s in document.sections] == [
        ((), "top"),
        (("Deep heading",), "deep text\n\nafter"),
    ]


def test_tables_nested_a_thousand_deep_are_read_and_deeper_ones_refused():
    """lexbor reads 1,000 nested tables quickly (no flattening needed: within the budget), and
    every cell is kept; 5,000 are past the budget, and tables are never closed early, so the
    page is refused rather than parsed in quadratic time."""
    page = b"<table><tr><td>cell " * 1000 + b"bottom"
    document = html.parse(page, name="tables")
    text = " ".join(s.text for s in document.sections)
    assert text.split().count("cell") == 1000 and text.endswith("bottom")
    with pytest.raises(ParseError, match="nested too deeply"):
        html.parse(b"<table><tr><td>" * 5000 + b"cell", name="tables")


TAG_SOUP = st.lists(
    st.sampled_from(
        [
            "<div>",
            "</div>",
            "<b>",
            "</b>",
            "<p>",
            "x ",
            "<br>",
            "</span>",
            "<!-- <div> -->",
            "a<b",
            "<table><tr><td>",
            "</td></tr></table>",
        ]
    ),
    max_size=400,
).map("".join)


def naive_scan_work(data: bytes) -> int:
    """The bound nesting.scan_work computes, one byte at a time: every `<` and a letter opens,
    every `</` closes, a close with nothing open closes nothing; summed over the tags."""
    depth = total = 0
    for at in range(len(data) - 1):
        if data[at] != ord("<"):
            continue
        after = chr(data[at + 1])
        if after.isascii() and after.isalpha():
            depth += 1
        elif after == "/":
            depth = max(depth - 1, 0)
        else:
            continue
        total += depth
    return total


@settings(max_examples=80, deadline=None)
@given(soup=TAG_SOUP, block=st.sampled_from([7, 64, 1 << 22]))
def test_scan_work_is_the_bound_computed_byte_by_byte(soup, block):
    data = soup.encode()  # small blocks: the bound is carried from one block to the next
    assert nesting.scan_work(data, safe_tags=0, block_bytes=block) == naive_scan_work(data)


@settings(max_examples=80, deadline=None)
@given(soup=TAG_SOUP, depth=st.integers(0, 300))
@hypothesis.example(soup="</span><b></div><b><table><tr><td><div></b><div>", depth=32)  # found once
def test_flattening_keeps_every_word_in_order_and_bounds_the_tree(soup, depth):
    page = ("<div><span>" * depth + soup + " end").encode()
    flat = nesting.flatten(page)
    words = html.LexborHTMLParser(page).body.text().split()
    assert html.LexborHTMLParser(flat).body.text().split() == words
    tables = soup.count("<table>")  # never closed early: table, tbody, tr, td each
    assert tree_depth(html.LexborHTMLParser(flat).root) <= nesting.FLATTEN_DEPTH + 4 + 4 * tables


# --- properties of the Markdown reader --------------------------------------------------------

MARKDOWN_LINES = st.sampled_from(
    [
        "",
        "   ",
        "# One",
        "## Two #",
        "### Three",
        "#not a heading",
        "text line",
        "more text",
        "- item",
        "===",
        "---",
        "```",
        "~~~",
        "# in code?",
        "    indented",
        "> quote",
        "| a | b |",
        "Título com acentuação",
        "\t",
        "***",
    ]  # fmt: skip
)


ATX_LIKE = re.compile(r"^ {0,3}#{1,6}([ \t].*)?$")
UNDERLINE_LIKE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(MARKDOWN_LINES, max_size=40), newline=st.sampled_from(["\n", "\r\n"]))
def test_markdown_sections_are_source_lines_in_order(lines, newline):
    """Sections are runs of the source's own lines, in order, and only heading lines are left
    out of them (an ATX heading, or a setext heading's text and underline)."""
    try:
        document = parser_for("md")(newline.join(lines).encode(), name="prop")
    except ParseError as refused:
        assert refused.message in ("empty file", "no text")
        assert (refused.message == "empty file") == (not any(line.strip() for line in lines))
        sections: tuple[Section, ...] = ()
    else:
        sections = document.sections
    covered: set[int] = set()
    for section in sections:
        assert section.start_line is not None and section.start_line - 1 not in covered
        assert not covered or section.start_line - 1 > max(covered)
        body = section.text.split("\n")
        for k, line in enumerate(body):
            assert lines[section.start_line - 1 + k].rstrip() == line
        covered.update(range(section.start_line - 1, section.start_line - 1 + len(body)))
        assert all(h.strip() == h and h for h in section.headings)
    front = 0  # a front-matter block (--- or +++ on the first line, closed by the same) is no body
    if lines and lines[0].rstrip() in ("---", "+++"):
        closers = ("---", "...") if lines[0].rstrip() == "---" else ("+++",)
        closing = [k for k in range(1, len(lines)) if lines[k].rstrip() in closers]
        front = closing[0] + 1 if closing else 0
    left_out = [
        i for i, line in enumerate(lines) if line.strip() and i not in covered and i >= front
    ]
    for i in left_out:
        if ATX_LIKE.match(lines[i]) or UNDERLINE_LIKE.match(lines[i]):
            continue
        j = i  # a setext heading's text: the run it is in ends with an underline
        while j in left_out and not UNDERLINE_LIKE.match(lines[j]):
            j += 1
        assert j in left_out and UNDERLINE_LIKE.match(lines[j])


# --- the generators -----------------------------------------------------------------------------


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_examples_is_deterministic_and_matches_the_committed_files(tmp_path, monkeypatch):
    pytest.importorskip("fpdf")
    script = _load_script("make_examples")
    for out in (tmp_path / "a", tmp_path / "b"):
        monkeypatch.setattr("sys.argv", ["make_examples.py", "--out", str(out)])
        script.main()
    generated = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.*"))
    assert len(generated) == 5
    for relative in generated:
        assert (tmp_path / "a" / relative).read_bytes() == (tmp_path / "b" / relative).read_bytes()
        assert parse(tmp_path / "a" / relative) == parse(HANDBOOK / relative)
