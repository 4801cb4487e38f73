"""A document's title, as honest as its file allows: what a person would call the document.

A PDF's or a Word file's metadata title is often not one: "Microsoft Word - report.docx",
"untitled", the name of the file it was made from, or nothing. A PDF's first line of text is
often not one either: a running header, a page number, or a line cut from the middle of a
sentence ("position is that it permits the definition of new functional"). So a title is
chosen in order from:

1. the metadata title, when it is a real one (`real_metadata`);
2. what the document shows as its title: the largest-font line of a PDF's first page (with the
   lines after it in that font: a title that wraps), a Word file's Title or first heading —
   when it reads as a title (`title_like`);
3. the file's name without its suffix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

TITLE_CHARS_MAX = 200
"""A line longer than this is a paragraph, not a title."""

TITLE_WORDS_MAX = 25

_MADE_BY = re.compile(
    r"^(microsoft (word|powerpoint|excel)|word|powerpoint)\s*-\s*|\.(docx?|pptx?|xlsx?|odt|rtf|"
    r"pdf|tex|dvi|ps|indd|pages|key|txt|md|html?)$",
    re.I,
)
"""What a tool writes as the title of a file it converted: "Microsoft Word - x.docx", "x.tex"."""

_PLACEHOLDERS = {
    "untitled",
    "untitled document",
    "title",
    "document",
    "document1",
    "no title",
    "powerpoint presentation",
    "presentation",
    "slide 1",
    "none",
    "unknown",
    "new document",
}

_STRAY_END = re.compile(r"[-‐,;:(\[{/&]$|\b(and|or|the|of|a|an|to|in|for|with|that|is|are)$", re.I)
"""A line ending so was cut from a sentence, not written as a title."""


def real_metadata(title: str | None) -> str:
    """The metadata title with its whitespace collapsed, or "" when it is not a real one:
    empty, a placeholder, a file's name, or a converter's label."""
    text = " ".join((title or "").split())
    if not text or text.lower() in _PLACEHOLDERS or _MADE_BY.search(text):
        return ""
    if not any(ch.isalpha() for ch in text) or len(text) > TITLE_CHARS_MAX:
        return ""
    return text


def title_like(line: str) -> bool:
    """Whether a line of the document reads as a title: a few words with letters, not begun
    in lower case nor ended mid-sentence, not a paragraph."""
    text = " ".join(line.split())
    letters = sum(ch.isalpha() for ch in text)
    if letters < 3 or len(text) > TITLE_CHARS_MAX or len(text.split()) > TITLE_WORDS_MAX:
        return False
    first = next((ch for ch in text if ch.isalpha()), "")
    if first.islower():
        return False
    return _STRAY_END.search(text) is None


def choose(metadata: str | None, shown: Iterable[str], name: str) -> str:
    """The title: the metadata's when real, else the first of `shown` (what the document shows
    as its title, best first) that reads as one, else `name`."""
    real = real_metadata(metadata)
    if real:
        return real
    for line in shown:
        if title_like(line):
            return " ".join(line.split())
    return name
