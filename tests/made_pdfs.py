"""PDFs made byte by byte for the tests: small files that stand for large or hostile ones."""

from __future__ import annotations

import base64
import zlib


def pdf_with_stream(stream_bytes: int, text: bytes = b"bomb", *, ascii85: bool = False) -> bytes:
    """A one-page PDF whose content stream shows `text`, then `stream_bytes` of spaces, all
    Flate-compressed (a 1 GiB stream compresses to 1 MB) and, with `ascii85`, then written in
    ASCII85 (a filter chain PDF readers undo in turn)."""
    packer = zlib.compressobj(9)
    parts = [packer.compress(b"BT /F1 12 Tf 72 720 Td (" + text + b") Tj ET\n")]
    block = b" " * (1 << 20)
    parts += [packer.compress(block) for _ in range(stream_bytes >> 20)]
    stream = b"".join(parts) + packer.flush()
    filters = b"/FlateDecode"
    if ascii85:
        stream = base64.a85encode(stream) + b"~>"
        filters = b"[/ASCII85Decode /FlateDecode]"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter %s >>\nstream\n" % (len(stream), filters) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % at for at in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
