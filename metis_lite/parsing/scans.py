"""A PDF's scanned pages, found and read by OCR inside PDFium's worker (pdf_worker.py).

A page is scanned when an image covers at least OCR_IMAGE_COVER of it and it has no text
layer, or one of almost nothing (fewer than OCR_TEXT_MIN_CHARS letters and digits: a scanner's
stamp). A page with no text and no such image is blank or a drawing (the example handbook's
security guide has one): it is not read, nor counted. Each is rendered in grey (8 bits a pixel, written as a PGM: no image
library needed) at ocr.OCR_DPI, or less for a page so large it would pass
ocr.OCR_PIXELS_MAX, and handed to Tesseract; its text replaces the page's. A page OCR cannot
read, and every page once the file's OCR time is spent, stays as it was and is counted unread,
with why.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from metis_lite.errors import ParseError
from metis_lite.parsing import ocr
from metis_lite.parsing.ocr import Listener

OCR_TEXT_MIN_CHARS = 16
"""A page whose text layer holds fewer letters and digits than this, over a page-wide image,
is read by OCR: a scanner's stamp ("Scanned by …") is not the page's text."""

OCR_IMAGE_COVER = 0.5
"""The share of a page an image must cover for the page to count as a scan."""


@dataclass
class Scans:
    """What OCR did with a PDF's scanned pages."""

    read: set[int] = field(default_factory=set)
    """The pages (1-based) whose text OCR read."""
    unread: int = 0
    why: str = ""

    def answer(self) -> dict:
        return {"ocr": sorted(self.read), "unread": self.unread, "unread_why": self.why}

    def left(self, why: str) -> None:
        self.unread += 1
        self.why = self.why or why


def scanned_pages(
    pdf, pages: list[str], languages: str, seconds: float, said: Listener | None = None
) -> Scans:
    """Read each scanned page of `pdf` by OCR, its text put in `pages` (each page's raw text,
    changed in place); without `languages`, count the pages with no text layer as unread.
    `said(page, pages)`: each page about to be read, in order (ocr.told)."""
    scans = Scans()
    started = time.monotonic()
    for number, text in enumerate(pages):
        if not _scanned(pdf, number, text):
            continue
        if not languages:
            if not text.strip():
                scans.left(f"{ocr.NO_TEXT_LAYER}: {ocr.INSTALL_HINT}")
            continue
        spent = f"the file's OCR took its {seconds:.0f} s"
        left = seconds - (time.monotonic() - started)
        if left <= 0:
            scans.left(spent)
            continue
        if said is not None:
            said(number + 1, len(pages))
        try:
            read = _read(pdf, number, languages, min(left, ocr.OCR_PAGE_S))
        except ParseError as exc:  # its own fault, or cut short by the file's time
            cut = time.monotonic() - started >= seconds
            scans.left(spent if cut else f"page {number + 1}: {exc.message}")
            continue
        if read.strip() or not text.strip():
            pages[number] = read
            scans.read.add(number + 1)
    return scans


def _scanned(pdf, number: int, text: str) -> bool:
    """Whether page `number`, whose text layer is `text`, is a scan (see the module)."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    if sum(c.isalnum() for c in text) >= OCR_TEXT_MIN_CHARS:
        return False
    try:
        page = pdf[number]
    except pdfium.PdfiumError:  # a damaged page is not read at all
        return False
    try:
        width, height = page.get_size()
        area = max(width * height, 1.0)
        for image in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,)):
            left, bottom, right, top = image.get_bounds()
            if (right - left) * (top - bottom) >= OCR_IMAGE_COVER * area:
                return True
        return False
    finally:
        page.close()


def _read(pdf, number: int, languages: str, seconds: float) -> str:
    import pypdfium2.raw as pdfium_c

    page = pdf[number]
    try:
        width, height = page.get_size()
        scale = min(ocr.OCR_DPI / 72, math.sqrt(ocr.OCR_PIXELS_MAX / max(width * height, 1.0)))
        bitmap = page.render(scale=scale, force_bitmap_format=pdfium_c.FPDFBitmap_Gray)
        try:
            image = pgm(memoryview(bitmap.buffer), bitmap.width, bitmap.height, bitmap.stride)
        finally:
            bitmap.close()
    finally:
        page.close()
    return ocr.read(image, languages, dpi=round(scale * 72), seconds=seconds)


def pgm(buffer: memoryview, width: int, height: int, stride: int) -> bytearray:
    """A grey bitmap (a byte a pixel, rows `stride` bytes apart) as a binary PGM file, copied
    once (a page of 50 million pixels is 50 MB, in a worker of 256 MiB at least)."""
    out = bytearray(b"P5\n%d %d\n255\n" % (width, height))
    if stride == width:
        out += buffer.cast("B")[: width * height]
    else:
        for row in range(height):
            out += buffer.cast("B")[row * stride : row * stride + width]
    return out
