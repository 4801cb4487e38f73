"""Images (.png, .jpg, .jpeg, .tif, .tiff, .webp): their text read by OCR (ocr.py).

Before anything decodes an image, its format and size are read from its header here (PNG's
IHDR, JPEG's SOF, each TIFF IFD, WebP's VP8/VP8L/VP8X): a file that is none of the four is
refused (Tesseract would read it as a list of file names), and one declaring more than
OCR_PIXELS_MAX pixels (an image bomb: 100,000 × 100,000 in a few hundred bytes) is refused
without being decoded. A TIFF of several pages gives a section per page, cited by page.

An image too small to hold a line of text (its shorter side under OCR_SIDE_MIN pixels, or fewer
than OCR_PIXELS_MIN pixels: a documentation tree's icons, arrows and bullets) is refused from
its header with ocr.TOO_SMALL, before Tesseract is started: a run leaves it out without a word
(indexing/ocr_run.py), where each cost a second of Tesseract and a skip saying it found no text.
"""

from __future__ import annotations

import struct

from metis_lite.errors import ParseError
from metis_lite.parsing import ocr
from metis_lite.parsing.common import document
from metis_lite.records import Document, Section

OCR_SIDE_MIN = 12
"""The shortest side, in pixels, of an image OCR reads: Tesseract read a line of 14 pt
Helvetica rendered 12 pixels high ("Recaipts above fitty"), and nothing of it at 9."""

OCR_PIXELS_MIN = 32 * 32
"""The fewest pixels of an image OCR reads: the icons of /usr/share/doc's trees (27 of its
89 images, 8 × 8 to 24 × 24: Sphinx's file.png and plus.png, navigation arrows) hold no text
Tesseract finds, each ~1 s of it for nothing; the smallest line of text it read above, 111 × 12
pixels, has 1,332, and the smallest image of those trees it found text in, a 215 × 46 logo."""

TIFF_PAGES_MAX = 2_000
"""The most pages of a TIFF whose headers are read; a TIFF with more is refused."""

JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
"""The JPEG markers that start a frame and carry its height and width."""


def parse(data: bytes, *, name: str, ocr_languages: str = "") -> Document:
    """The text of an image, a section per page; ParseError when it is no image of the four
    formats, too large, unreadable, or there is no OCR here (NO_TEXT_LAYER)."""
    if not data:
        raise ParseError("empty file")
    kind, pages = image_size(data)
    for width, height in pages:
        if width * height > ocr.OCR_PIXELS_MAX:
            raise ParseError(
                f"{kind} of {width:,} × {height:,} pixels, more than OCR reads "
                f"({ocr.OCR_PIXELS_MAX:,}; an image bomb?)"
            )
    if all(min(w, h) < OCR_SIDE_MIN or w * h < OCR_PIXELS_MIN for w, h in pages):
        width, height = pages[0]
        raise ParseError(f"{ocr.TOO_SMALL}: a {kind} of {width} × {height} pixels holds no text")
    if not ocr_languages:
        raise ParseError(f"{ocr.NO_TEXT_LAYER}: an image, and no OCR here: {ocr.INSTALL_HINT}")
    seconds = min(ocr.OCR_PAGE_S * len(pages), ocr.OCR_FILE_S)  # a TIFF's pages: one process
    text = ocr.read(data, ocr_languages, seconds=seconds)
    texts = [page.strip() for page in text.split("\f")]
    numbered = len(pages) > 1
    sections = [
        Section(text=t, page=n if numbered else None, ocr=True)
        for n, t in enumerate(texts, start=1)
        if t
    ]
    if not sections:
        raise ParseError(f"OCR found no text in the {kind}")
    return document(name, "image", sections)


def image_size(data: bytes) -> tuple[str, list[tuple[int, int]]]:
    """The format of an image and the (width, height) of each of its pages, from its header
    alone; ParseError for what is none of PNG, JPEG, TIFF and WebP, or is cut short."""
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n"):
            if data[12:16] != b"IHDR":
                raise ParseError("unreadable png (no IHDR header)")
            return "png", [struct.unpack(">II", data[16:24])]
        if data.startswith(b"\xff\xd8"):
            return "jpeg", [_jpeg(data)]
        if data[:4] in (b"II*\x00", b"MM\x00*"):
            return "tiff", _tiff(data)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return "webp", [_webp(data)]
    except (struct.error, IndexError) as exc:
        raise ParseError("unreadable image (its header is cut short)") from exc
    raise ParseError("not an image OCR reads (PNG, JPEG, TIFF or WebP)")


def _jpeg(data: bytes) -> tuple[int, int]:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            raise ParseError("unreadable jpeg (a damaged header)")
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in JPEG_SOF:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        if marker == 0xDA or length < 2:  # the scan begins before any frame header
            break
        at += 2 + length
    raise ParseError("unreadable jpeg (no frame header)")


def _tiff(data: bytes) -> list[tuple[int, int]]:
    order = "<" if data[:2] == b"II" else ">"
    (at,) = struct.unpack(order + "I", data[4:8])
    pages: list[tuple[int, int]] = []
    seen: set[int] = set()
    while at:
        if at in seen or len(pages) >= TIFF_PAGES_MAX:
            raise ParseError(f"unreadable tiff (more than {TIFF_PAGES_MAX:,} pages, or a loop)")
        seen.add(at)
        (count,) = struct.unpack(order + "H", data[at : at + 2])
        size = {}
        for n in range(count):
            entry = data[at + 2 + 12 * n : at + 14 + 12 * n]
            tag, kind = struct.unpack(order + "HH", entry[:4])
            if tag in (256, 257):  # ImageWidth, ImageLength: SHORT or LONG
                fmt = "H" if kind == 3 else "I"
                size[tag] = struct.unpack(order + fmt, entry[8 : 8 + struct.calcsize(fmt)])[0]
        if 256 not in size or 257 not in size:
            raise ParseError("unreadable tiff (a page without its size)")
        pages.append((size[256], size[257]))
        (at,) = struct.unpack(order + "I", data[at + 2 + 12 * count : at + 6 + 12 * count])
    if not pages:
        raise ParseError("unreadable tiff (no pages)")
    return pages


def _webp(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":
        (bits,) = struct.unpack("<I", data[21:25])
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    raise ParseError("unreadable webp (an unknown chunk)")
