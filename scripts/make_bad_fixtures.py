"""Generate tests/fixtures/bad/: files a parser must refuse (or recover) without crashing.

    pip install fpdf2          # dev-only (pyproject: [project.optional-dependencies] dev)
    python scripts/make_bad_fixtures.py [--out tests/fixtures/bad]

Each file is small (the folder stays well under 1 MB); the zip bomb declares gigabytes and
holds a few hundred bytes. `tests/test_parsing.py` names, for every file, the reason its
ParseError must give, or what a recovered file must read.
"""

from __future__ import annotations

import argparse
import io
import random
import struct
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import docx
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter

ROOT = Path(__file__).resolve().parent.parent
FIXED_TIME = datetime(2024, 3, 1, 9, 0, 0, tzinfo=UTC)
DEEP_DIVS = 100_000
BOMB_DECLARED_BYTES = 0xF000_0000  # 3.75 GiB, below the 0xFFFFFFFF that means "see Zip64"


def small_pdf(pages: int = 3, text: bool = True) -> bytes:
    """A few pages in a core font (ASCII only), so each damaged copy stays a few kB."""
    pdf = FPDF()
    pdf.set_creation_date(FIXED_TIME)
    pdf.set_font("Helvetica", size=12)
    for number in range(1, pages + 1):
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 6, f"Page {number} of a small test document. " * 8)
        else:
            pdf.rect(30, 30, 100, 60)  # a scan: shapes, no text
    return bytes(pdf.output())


def broken_xref(pdf: bytes) -> bytes:
    """Every xref offset shifted and startxref pointing nowhere: readers rebuild the table."""
    head, _, tail = pdf.rpartition(b"startxref")
    xref_at = head.rindex(b"\nxref")
    table = head[xref_at:]
    shifted = b"\n".join(
        b"%010d 00000 n" % (int(line[:10]) + 13) if line.endswith(b" n") else line
        for line in table.split(b"\n")
    )
    return head[:xref_at] + shifted + b"startxref\n999999\n%%EOF\n"


def corrupt_pdf(pdf: bytes) -> bytes:
    """Header and trailer kept, everything between them replaced by noise."""
    noise = random.Random(79).randbytes(len(pdf) - 40)
    return pdf[:15] + noise + b"\nstartxref\n12\n%%EOF\n"


def encrypted_pdf(pdf: bytes) -> bytes:
    """Encrypted with a user password (RC4-128, which pypdf reads without extra packages)."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def small_docx() -> bytes:
    word = docx.Document()
    word.core_properties.created = word.core_properties.modified = FIXED_TIME.replace(tzinfo=None)
    word.add_heading("A small document", level=1)
    word.add_paragraph("Some text that a zip bomb would hide behind.")
    out = io.BytesIO()
    word.save(out)
    return out.getvalue()


def zip_bomb(docx_bytes: bytes, member: str = "word/document.xml") -> bytes:
    """The same small DOCX whose zip headers declare `member` to be 3.75 GiB uncompressed.

    Patched in both the local header and the central directory, as a crafted bomb would be;
    nothing of that size is ever written.
    """
    data = bytearray(docx_bytes)
    with zipfile.ZipFile(io.BytesIO(docx_bytes)) as package:
        target = package.getinfo(member)
        entries, at = len(package.infolist()), package.start_dir
    struct.pack_into("<I", data, target.header_offset + 22, BOMB_DECLARED_BYTES)
    for _ in range(entries):  # central directory: 46 fixed bytes, then name, extra, comment
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, at + 28)
        if data[at + 46 : at + 46 + name_len] == member.encode():
            struct.pack_into("<I", data, at + 24, BOMB_DECLARED_BYTES)
        at += 46 + name_len + extra_len + comment_len
    return bytes(data)


def not_word_zip() -> bytes:
    """A valid zip that is not a Word document."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as package:
        package.writestr(zipfile.ZipInfo("notes.txt", date_time=(2024, 3, 1, 9, 0, 0)), "hello")
    return out.getvalue()


def fixtures() -> dict[str, bytes]:
    pdf = small_pdf()
    word = small_docx()
    noise = random.Random(7).randbytes(4096)
    return {
        "corrupt.pdf": corrupt_pdf(pdf),
        "encrypted.pdf": encrypted_pdf(pdf),
        "truncated.pdf": pdf[: len(pdf) * 6 // 10],
        "broken-xref.pdf": broken_xref(pdf),
        "scanned.pdf": small_pdf(pages=2, text=False),
        "not-a-pdf.pdf": b"<html><body>An HTML page saved with the wrong name</body></html>\n",
        "empty.pdf": b"",
        "corrupt.docx": b"PK\x03\x04" + noise,
        "truncated.docx": word[: len(word) // 2],
        "not-word.docx": not_word_zip(),
        "zip-bomb.docx": zip_bomb(word),
        "empty.docx": b"",
        "binary.txt": b"\x89PNG\r\n\x1a\n" + noise,
        "control-characters.txt": bytes(range(1, 9)) * 64 + b"a few letters\n",
        "invalid-utf8.txt": "Relatório de março: ".encode()
        + b"\xe7\xe3o "
        + "está pronto.\n".encode(),
        "empty.txt": b"",
        "whitespace-only.md": b"  \n\t\n\r\n   \n",
        "front-matter-only.md": b"---\ntitle: Nothing else\n---\n\n",
        "binary.html": b"<html>\x00\x01\x02" + noise,
        "empty.html": b"",
        "deep-nesting.html": b"<!DOCTYPE html><title>Deep</title>"
        + b"<div>" * DEEP_DIVS
        + b"the bottom of a very deep page",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "bad")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in fixtures().items():
        (args.out / name).write_bytes(data)
        print(f"{name:26} {len(data):>8,} bytes")


if __name__ == "__main__":
    main()
