"""Helpers shared by the per-kind parsers: text decoding, line-exact sections, failure reasons.

Text and Markdown sections keep their raw lines so that a chunk's line can be computed from an
offset alone: the line of the character at offset `i` of `Section.text` is
`start_line + text.count("\\n", 0, i)`. Lines are split the way Python's universal newlines split
them (`\\r\\n`, `\\r` and `\\n` each end a line), and nothing else ends one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from metis_lite.errors import ParseError
from metis_lite.parsing.charset import decode_plain, wide_encoding
from metis_lite.records import Document, Section

BINARY_CONTROL_SHARE = 0.10
"""Text in which more than this share of characters are control characters is binary data."""

REASON_CHARS = 120
"""A failure reason quotes at most this much of a library's own message."""

HTML_ELEMENTS_MAX = 1_000_000
"""The most elements an HTML page may open (counted from its bytes before it is parsed): ten
times the largest page of Python's documentation (98,000 tags). lexbor's tree costs ~300 bytes
an element and the walk of it ~100 more: 49 MB of `<p>` (17 million) took a worker past 4 GB,
a million `<p>x` take ~400 MiB, within a parse worker's least share (PARSE_MEMORY_MIN)."""

# Control characters that do not occur in text: everything below space except tab, line feed,
# form feed, carriage return and escape (ANSI colours in logs), plus DEL and the C1 range.
_CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
_NEWLINES = re.compile(r"\r\n?")


def decode_text(data: bytes) -> str:
    """Decode a plain-text file (text, Markdown) by `charset.decode_plain`: its byte-order mark
    (UTF-8, UTF-16 or UTF-32), else UTF-8 where the bytes are valid and Windows-1252 for each
    run that is not — so a Windows-1252 file reads as Windows-1252 (`Relatório` stays one word)
    and a UTF-8 file with one stray byte keeps the rest of its accents.
    Line ends come back as `\\n`. Raises ParseError for empty and binary files.
    """
    if not data.strip():
        raise ParseError("empty file")
    wide = wide_encoding(data)
    if not wide and b"\x00" in data:
        raise ParseError("binary file, not text")
    try:
        text = decode_plain(data)
    except UnicodeDecodeError as exc:
        raise ParseError(f"not valid {wide} text") from exc
    if not text.strip():
        raise ParseError("empty file")
    if len(_CONTROL.findall(text)) > BINARY_CONTROL_SHARE * len(text):
        raise ParseError("binary file, not text")
    return _NEWLINES.sub("\n", text)


def line_section(
    lines: Sequence[str], start: int, end: int, headings: tuple[str, ...]
) -> Section | None:
    """The section made of `lines[start:end]` (0-based), or None when they are all blank.

    Leading and trailing blank lines are left out; the lines kept are the source's own, with
    trailing whitespace removed (which changes no line number), joined by `\\n`.
    """
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    if start == end:
        return None
    text = "\n".join(line.rstrip() for line in lines[start:end])
    return Section(text=text, headings=headings, start_line=start + 1)


def collapse(text: str) -> str:
    """Collapse every run of whitespace (non-breaking spaces too) to one space, and trim."""
    return " ".join(text.split())


ONLY_LINKS = "only links to other pages (an index or a table of contents): nothing of its own"
"""Why a web page whose text was all in lists of links is not indexed (html.py)."""

NOTHING_TO_READ = frozenset({"empty file", "no text", ONLY_LINKS})
"""Reasons that say what a file holds now, not that it could not be read: a file that gives
one of them has its indexed version removed (a file whose parse failed keeps it: it may read
whole again)."""


def document(title: str, kind: str, sections: Sequence[Section]) -> Document:
    """The Document, refusing one with no text at all (nothing of it could be searched)."""
    if not sections:
        raise ParseError("no text")
    return Document(title=title, kind=kind, sections=tuple(sections))


def count_elements(data: bytes) -> int:
    """A bound of the elements and comments a parser builds from markup (HTML, XML), at C
    speed from the bytes alone: every `<` that does not begin an end tag (a `<` in text counts
    too, so it errs high)."""
    return data.count(b"<") - data.count(b"</")


def check_elements(count: int, limit: int, kind: str) -> None:
    """Refuse markup of `count` elements (count_elements) past `limit`, before anything parses
    it."""
    if count > limit:
        raise ParseError(
            f"{kind} with more than {limit:,} elements ({count:,} tags; a tag bomb?): "
            "too many to parse within memory"
        )


def reason(exc: BaseException) -> str:
    """A short human reason from a library's exception: its first line, or its type's name."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    message = text.strip().splitlines()[0] if text.strip() else ""
    if len(message) > REASON_CHARS:
        message = message[: REASON_CHARS - 1] + "…"
    return message or type(exc).__name__
