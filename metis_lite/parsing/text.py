"""Plain text (.txt): one section holding the file's lines as they are, titled by its name."""

from __future__ import annotations

from metis_lite.parsing.common import decode_text, document, line_section
from metis_lite.records import Document


def parse(data: bytes, *, name: str) -> Document:
    """Read a text file as one section starting at its first non-blank line.

    The title is `name` (the file's stem): a text file has no markup to name itself with.
    Raises ParseError for empty and binary files (see `decode_text`).
    """
    lines = decode_text(data).split("\n")
    section = line_section(lines, 0, len(lines), ())
    return document(name, "txt", [section] if section else [])
