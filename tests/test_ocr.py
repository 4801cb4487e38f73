"""Scanned pages and images read by OCR (Tesseract): found by their words, cited by page, marked
as OCR's; bombs and corrupt images refused before Tesseract decodes them; without Tesseract,
skipped with NO_TEXT_LAYER and said once; a language pack not installed said once.

The fixtures are made here: a page of text written by fpdf2, rendered by PDFium to a grey
bitmap, written as a PNG (zlib), and wrapped in an image-only PDF."""

from __future__ import annotations

import io
import struct
import time
import zlib

import pytest
from conftest import words_only_base

from metis_lite.errors import ParseError
from metis_lite.indexing import ocr_run
from metis_lite.parsing import image, ocr, parse, pdf
from metis_lite.store.document_file import read_document

pytestmark = pytest.mark.skipif(
    ocr.tesseract() is None,
    reason="Tesseract is not installed (Debian: tesseract-ocr; scripts/install-system installs it)",
)

LONG = (
    "This page has a text layer of its own, long enough to stand as a passage, about the "
    "canteen's opening hours on weekdays and the menu that changes every Monday morning."
)


def png(gray: bytes, width: int, height: int) -> bytes:
    """A greyscale PNG of `gray` (a byte a pixel, row after row)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    rows = b"".join(b"\x00" + gray[r * width : (r + 1) * width] for r in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def scan(*lines: str, dpi: int = 200) -> bytes:
    """A PNG of `lines` of text, as a scanner would see a printed card (150 × 70 mm)."""
    return png(*grey(*lines, dpi=dpi))


def grey(*lines: str, dpi: int = 200) -> tuple[bytes, int, int]:
    """A card of `lines` of text (150 × 70 mm) rendered in grey: its pixels, width, height."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c
    from fpdf import FPDF

    page = FPDF(format=(150, 70))
    page.add_page()
    page.set_font("helvetica", size=16)
    for line in lines:
        page.cell(0, 10, line, new_x="LMARGIN", new_y="NEXT")
    document = pdfium.PdfDocument(bytes(page.output()))
    bitmap = document[0].render(scale=dpi / 72, force_bitmap_format=pdfium_c.FPDFBitmap_Gray)
    width, height, stride = bitmap.width, bitmap.height, bitmap.stride
    raw = bytes(bitmap.buffer)
    gray = b"".join(raw[r * stride : r * stride + width] for r in range(height))
    return gray, width, height


def tiff(*pages: tuple[bytes, int, int]) -> bytes:
    """A TIFF of grey `pages` (pixels, width, height), uncompressed, a strip a page."""
    out = bytearray(b"II*\x00\x00\x00\x00\x00")
    link = 4  # where the offset of the next page's directory goes
    for pixels, width, height in pages:
        start = len(out)
        out += pixels
        tags = [  # (tag, type: 3 SHORT, 4 LONG, value), in the order of their tags
            (256, 4, width),
            (257, 4, height),
            (258, 3, 8),
            (259, 3, 1),
            (262, 3, 1),
            (273, 4, start),
            (277, 3, 1),
            (278, 4, height),
            (279, 4, len(pixels)),
        ]
        out[link : link + 4] = struct.pack("<I", len(out))
        out += struct.pack("<H", len(tags))
        for tag, kind, value in tags:
            packed = struct.pack("<H", value) + b"\0\0" if kind == 3 else struct.pack("<I", value)
            out += struct.pack("<HHI", tag, kind, 1) + packed
        link = len(out)
        out += b"\0\0\0\0"
    return bytes(out)


def pdf_of(*pages: str | bytes, stamp: str = "", size: tuple[int, int] = (150, 70)) -> bytes:
    """A PDF whose pages (`size` mm, a card's) are text (str) or a scanned image (bytes, a PNG,
    filling the page), in order; `stamp`: a few words of text layer over each image, as some
    scanners write."""
    from fpdf import FPDF

    out = FPDF(format=size)
    out.set_font("helvetica", size=12)
    for content in pages:
        out.add_page()
        if isinstance(content, str):
            out.multi_cell(0, 8, content)
        else:
            out.image(io.BytesIO(content), x=0, y=0, w=size[0], h=size[1])
            if stamp:
                out.text(5, size[1] - 3, stamp)
    return bytes(out.output())


def said(report) -> list:
    """A run's warnings but the dead embedding model's (these bases are searched by words)."""
    return [w for w in report.warnings if w.code != "EMBEDDING_MODEL_UNAVAILABLE"]


@pytest.fixture(scope="module")
def card() -> bytes:
    return scan("Wombats dig burrows at night.", "Receipts above fifty euros.")


def test_a_scanned_page_is_found_by_its_words_and_cited_by_its_page(tmp_path, card):
    (tmp_path / "docs").mkdir()
    mixed = pdf_of(LONG, card, "A third page, typed, about the quarterly budget." + LONG)
    (tmp_path / "docs" / "minutes.pdf").write_bytes(mixed)
    stamped = pdf_of(scan("Quokkas smile at the visitors."), stamp="Scan 42")
    (tmp_path / "docs" / "stamped.pdf").write_bytes(stamped)
    with words_only_base(tmp_path / "b.db", tmp_path / "docs") as base:
        report = base.index()
        assert not report.skipped and not said(report), (report.skipped, report.warnings)
        wombats = base.search("wombats burrows", mode="keyword").results[0].citation
        assert (wombats.document, wombats.page, wombats.ocr) == ("minutes.pdf", 2, True)
        quokkas = base.search("quokkas visitors", mode="keyword").results[0].citation
        assert (quokkas.document, quokkas.page, quokkas.ocr) == ("stamped.pdf", 1, True), (
            "a stamp of a few words over a page-wide image is no text layer"
        )
        typed = base.search("quarterly budget", mode="keyword").results[0].citation
        assert (typed.document, typed.page, typed.ocr) == ("minutes.pdf", 3, False)


def test_an_image_file_is_read_in_the_languages_its_source_names(tmp_path, card):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "card.png").write_bytes(card)
    german = scan("Die Mitarbeiterin prüft die Rechnung.", "Größe: vierzig Blätter.")
    (tmp_path / "photos" / "rechnung.png").write_bytes(german)
    with words_only_base(tmp_path / "b.db") as base:
        base.add_source(tmp_path / "photos", ocr_languages="deu+eng")
        assert [s.ocr_languages for s in base.sources() if s.path] == ["deu+eng"]
        report = base.index()
        assert report.added == 2 and not said(report)
        result = base.search("wombats", mode="keyword").results[0]
        assert (result.citation.document, result.citation.kind) == ("card.png", "image")
        assert result.citation.ocr and result.citation.page is None
        umlauts = base.search("prüft Größe", mode="keyword").results
        assert umlauts and umlauts[0].citation.document == "rechnung.png"
        served = read_document(base.store, "photos", "card.png")  # the console's link
        assert (served.media_type, served.content) == ("image/png", card)


def test_a_language_pack_not_installed_is_said_once(tmp_path, card):
    (tmp_path / "scans").mkdir()
    for n in range(2):
        (tmp_path / "scans" / f"card{n}.png").write_bytes(card)
    with words_only_base(tmp_path / "b.db") as base:
        base.add_source(tmp_path / "scans", ocr_languages="eng+xyz")
        report = base.index()
        missing = [w for w in report.warnings if w.code == ocr_run.OCR_LANGUAGE_MISSING]
        assert len(missing) == 1, report.warnings
        assert "xyz" in missing[0].message and "tesseract-ocr-xyz" in missing[0].message
        assert report.added == 2, "the other languages are still read"


def test_bad_ocr_languages_are_refused(tmp_path):
    from metis_lite.errors import InvalidRequest

    with words_only_base(tmp_path / "b.db") as base, pytest.raises(InvalidRequest):
        base.add_source(tmp_path, ocr_languages="eng; rm -rf /")


def _tiff(width: int, height: int) -> bytes:
    entries = [(256, 4, 1, width), (257, 4, 1, height)]
    ifd = struct.pack("<H", len(entries)) + b"".join(struct.pack("<HHII", *e) for e in entries)
    return b"II*\x00" + struct.pack("<I", 8) + ifd + struct.pack("<I", 0)


BOMBS = {
    "png": b"\x89PNG\r\n\x1a\n"
    + struct.pack(">I", 13)
    + b"IHDR"
    + struct.pack(">IIBBBBB", 100_000, 100_000, 8, 0, 0, 0, 0)
    + b"\0" * 4,
    "jpeg": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    + b"\xff\xc0\x00\x11\x08"
    + struct.pack(">HH", 60_000, 60_000)
    + b"\x03"
    + b"\0" * 9,
    "tiff": _tiff(100_000, 100_000),
    "webp": b"RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x00\x00\x00\x00"
    + (99_999).to_bytes(3, "little") * 2,
}
"""A header of each format declaring 10 gigapixels (a JPEG's most: 3.6), in a few bytes."""


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_an_image_bomb_is_refused_from_its_header_before_tesseract(kind, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("tesseract was run on a bomb")

    monkeypatch.setattr(ocr, "read", never)
    assert image.image_size(BOMBS[kind])[0] == kind
    with pytest.raises(ParseError, match="image bomb"):
        image.parse(BOMBS[kind], name="bomb", ocr_languages="eng")


def test_corrupt_images_and_lists_of_files_are_refused(tmp_path, card):
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "cut.png").write_bytes(card[:200])
    (tmp_path / "pics" / "garbled.png").write_bytes(card[:33] + b"\x07" * 500)
    (tmp_path / "pics" / "list.png").write_bytes(f"{tmp_path}/pics/ok.png\n".encode())
    (tmp_path / "pics" / "ok.png").write_bytes(card)
    with words_only_base(tmp_path / "b.db", tmp_path / "pics") as base:
        report = base.index()
    reasons = {s.path.split("/")[-1]: s.reason for s in report.skipped}
    assert set(reasons) == {"cut.png", "garbled.png", "list.png"} and report.added == 1
    assert "OCR could not read it" in reasons["cut.png"]
    assert "OCR could not read it" in reasons["garbled.png"]
    assert reasons["list.png"] == "not an image OCR reads (PNG, JPEG, TIFF or WebP)", (
        "Tesseract reads a file that is no image as a list of files to read: never handed one"
    )


def test_without_tesseract_scans_are_skipped_with_no_text_layer_said_once(
    tmp_path, card, monkeypatch
):
    monkeypatch.setattr(ocr, "tesseract", lambda: None)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "scan.pdf").write_bytes(pdf_of(card, card))
    (tmp_path / "docs" / "photo.png").write_bytes(card)
    (tmp_path / "docs" / "mixed.pdf").write_bytes(pdf_of(LONG, card))
    with words_only_base(tmp_path / "b.db", tmp_path / "docs") as base:
        report = base.index(workers=2)
        assert base.search("canteen", mode="keyword").results, "the text pages are indexed"
    reasons = {s.path.split("/")[-1]: s.reason for s in report.skipped}
    assert set(reasons) == {"scan.pdf", "photo.png"}
    for reason in reasons.values():
        assert reason.startswith("NO_TEXT_LAYER: ") and "install tesseract-ocr" in reason
    said = [w for w in report.warnings if w.code == ocr.NO_TEXT_LAYER]
    assert len(said) == 1, report.warnings
    assert said[0].message.startswith("2 images or PDFs with no text layer and 1 scanned page")


def test_a_scan_of_2000_pages_is_read_within_its_time(monkeypatch):
    from fpdf import FPDF

    small = scan("Page of a very long scanned ledger.", dpi=100)
    book = FPDF(format=(150, 70))
    for _ in range(2000):  # one image, drawn on every page: a small file
        book.add_page()
        book.image(io.BytesIO(small), x=0, y=0, w=150)
    data = bytes(book.output())
    monkeypatch.setattr(ocr, "OCR_FILE_S", 3.0)
    started = time.monotonic()
    document = pdf.parse(data, name="ledger", ocr_languages="eng")
    took = time.monotonic() - started
    read = [s.page for s in document.sections]
    assert read == list(range(1, len(read) + 1)) and all(s.ocr for s in document.sections)
    assert "ledger" in document.sections[0].text.lower()
    assert document.unread_pages == 2000 - len(read) > 1000
    assert "OCR took its 3 s" in document.unread_why
    assert took < 3.0 + ocr.OCR_PAGE_S / 4, took


def test_parse_says_no_text_layer_with_what_to_install(card):
    with pytest.raises(ParseError) as refused:
        parse(__import__("pathlib").Path("scan.pdf"), data=pdf_of(card))
    assert refused.value.message.startswith("NO_TEXT_LAYER: no text layer on any page (1 page")
    assert "install tesseract-ocr" in refused.value.message


def test_the_command_line_keeps_a_sources_languages_and_marks_ocr(tmp_path, card):
    import subprocess
    import sys

    from conftest import DEAD_EMBEDDING, ROOT

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "metis_lite", *args]
        return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)

    (tmp_path / "scans").mkdir()
    (tmp_path / "scans" / "card.png").write_bytes(card)
    base = str(tmp_path / "b.db")
    dead = ("--embedding", "tei", "--embedding-url", DEAD_EMBEDDING["url"], "--quiet")
    refused = cli("index", base, "--ocr-languages", "eng+deu", *dead)
    assert refused.returncode != 0 and "--ocr-languages sets the languages" in refused.stderr
    indexed = cli("index", base, str(tmp_path / "scans"), "--ocr-languages", "eng+deu", *dead)
    assert "1 added" in indexed.stdout, indexed.stderr
    assert "OCR in eng+deu" in cli("sources", base).stdout
    found = cli("search", base, "wombats", "--mode", "keyword").stdout
    assert "scans/card.png (OCR)" in found


def test_a_run_says_the_scanned_pages_it_could_not_read_once():
    run = ocr_run.OcrRun()
    run.note("s/a.pdf", None, 3, "the file's OCR took its 600 s")
    run.note("s/b.pdf", None, 1, "page 2: OCR took longer than 60 s on it")
    run.note("s/c.pdf", None, 0, "")
    run.note("s/d.png", "OCR could not read it (Error in pixReadStream)", 0, "")
    (said,) = run.warnings()
    assert said.code == ocr_run.OCR_INCOMPLETE
    assert said.message == (
        "s/a.pdf: 3 scanned pages not read (the file's OCR took its 600 s); and 1 more file"
    )


def test_a_blank_page_or_a_drawing_is_no_scan(card):
    from fpdf import FPDF

    drawing = FPDF(format=(150, 70))
    drawing.set_font("helvetica", size=12)
    drawing.add_page()
    drawing.multi_cell(0, 8, LONG)
    drawing.add_page()
    drawing.rect(20, 20, 100, 30)  # a drawing: paths, no text, no image
    drawing.add_page()  # blank
    document = pdf.parse(bytes(drawing.output()), name="d", ocr_languages="")
    assert [s.page for s in document.sections] == [1] and document.unread_pages == 0


def test_a_tiff_of_several_pages_is_cited_by_page():
    first = grey("The first sheet lists the wombats.", dpi=150)
    second = grey("The second sheet lists the quokkas.", dpi=150)
    data = tiff(first, second)
    assert image.image_size(data) == ("tiff", [first[1:], second[1:]])
    document = image.parse(data, name="sheets", ocr_languages="eng")
    assert [(s.page, s.ocr) for s in document.sections] == [(1, True), (2, True)]
    assert "wombats" in document.sections[0].text and "quokkas" in document.sections[1].text


def test_a_long_scan_says_each_page_it_reads_in_order(tmp_path, card):
    """Each page OCR is about to read reaches the run's progress, in order, whether the file is
    parsed in the indexer or by a worker process (and PDFium's worker under it); the progress
    line names the page and the file."""
    from metis_lite.cli.progress import IndexProgress
    from metis_lite.indexing.parse_pool import ParseJob, ParsePool

    typed = "A typed page between the scans, about the quarterly budget. " + LONG
    data = pdf_of(card, typed, card, card)  # pages 1, 3 and 4 are scans
    (tmp_path / "docs" / "scans").mkdir(parents=True)
    (tmp_path / "docs" / "scans" / "book.pdf").write_bytes(data)
    told: list[tuple[str, int, int]] = []

    def progress(stage: str, done: int, total: int) -> None:
        if stage.startswith("ocr "):
            told.append((stage, done, total))

    with words_only_base(tmp_path / "kb.db", tmp_path / "docs") as base:
        assert base.index(progress=progress, workers=1).added == 1  # parsed in the indexer
    expected = [("ocr scans/book.pdf", page, 4) for page in (1, 3, 4)]
    assert told == expected

    pages: list[tuple[str, int, int]] = []
    job = ParseJob("scans/book.pdf", "pdf", data, 800, ocr_languages="eng")
    with ParsePool(2, lambda name, page, of: pages.append((name, page, of))) as pool:
        parsed = pool.submit(job).result()  # by a worker process
    assert parsed.refused is None and parsed.chunks
    assert pages == [("scans/book.pdf", p, 4) for p in (1, 3, 4)]

    line = IndexProgress("kb.db", terminal=False)
    line("files", 0, 1)
    line("ocr scans/book.pdf", 37, 2000)
    assert line.line().endswith("OCR page 37 of 2,000 of scans/book.pdf")


def test_an_icon_is_left_out_unsaid_without_starting_tesseract(tmp_path, card, monkeypatch):
    """A documentation tree's icons (16 × 16, a 200 × 11 rule) are too small to hold text:
    refused from their header, before Tesseract starts, and a run says nothing of them; a
    line of text 12 pixels high is still read."""
    icon, rule, line = png(b"\x80" * 256, 16, 16), png(b"\0" * 2200, 200, 11), (120, 12)
    started: list[int] = []
    real = ocr.read

    def counted(data, languages, **options):
        started.append(len(data))
        return real(data, languages, **options)

    monkeypatch.setattr(ocr, "read", counted)
    for small in (icon, rule):
        with pytest.raises(ParseError) as refused:
            image.parse(small, name="icon", ocr_languages="eng")
        assert refused.value.message.startswith(ocr.TOO_SMALL)
    assert started == []
    with pytest.raises(ParseError, match="OCR found no text"):  # read: tesseract started
        image.parse(png(b"\xff" * (line[0] * line[1]), *line), name="line", ocr_languages="eng")
    assert len(started) == 1

    (tmp_path / "docs" / "_static").mkdir(parents=True)
    for n, name in enumerate(("file.png", "plus.png", "minus.png")):
        (tmp_path / "docs" / "_static" / name).write_bytes(png(bytes([n]) * 121, 11, 11))
    (tmp_path / "docs" / "card.png").write_bytes(card)
    with words_only_base(tmp_path / "kb.db", tmp_path / "docs") as base:
        report = base.index()
    assert report.added == 1 and report.skipped == () and said(report) == []
