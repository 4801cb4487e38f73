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

A web page's title is real, but a site appends its own name to every page's: "argparse — … —
Python 3.11.2 documentation", "Install | Docusaurus", "Vec in std::vec - Rust". `site_suffix`
finds such an ending shared by most of a site's pages, and `cut_suffix` takes it off a title.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

TITLE_CHARS_MAX = 200
"""A line longer than this is a paragraph, not a title."""

TITLE_WORDS_MAX = 25

SUFFIX_SEPARATORS = (" — ", " – ", " | ", " - ", " · ", " :: ", " » ")
"""What sites put between a page's title and their own name: Sphinx " — ", Docusaurus and
Hugo themes " | ", MkDocs and rustdoc " - "; Javadoc's " (Java SE 17 & JDK 17)" is matched
apart (`_candidates`)."""

SUFFIX_PAGES_MIN = 3
"""The fewest pages that must share an ending for it to be a site's suffix: two pages alike
by chance ("… - Part 1", "… - Part 1") are not a site."""

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
    """The title: the metadata's when real (and not the file's name `name` again), else the
    first of `shown` (what the document shows as its title, best first) that reads as one,
    else `name`."""
    real = real_metadata(metadata)
    if real and real.casefold() != name.casefold():
        return real
    for line in shown:
        if title_like(line):
            return " ".join(line.split())
    return name


def site_suffix(titles: Iterable[str]) -> str:
    """The ending a site appends to its pages' titles, separator included (" — Python 3.11.2
    documentation"), or "": the longest ending after a separator (SUFFIX_SEPARATORS) that more
    than half of `titles` share, SUFFIX_PAGES_MIN of them at least, with letters in it.
    Depends only on the titles, not their order, so the same pages give the same suffix."""
    pages = 0
    shared: dict[str, int] = {}
    for title in titles:
        pages += 1
        for ending in _candidates(title):
            shared[ending] = shared.get(ending, 0) + 1
    needed = max(SUFFIX_PAGES_MIN, pages // 2 + 1)
    found = [ending for ending, count in shared.items() if count >= needed]
    return max(found, key=lambda ending: (len(ending), ending), default="")


def cut_suffix(title: str, suffix: str) -> str:
    """`title` without the site's `suffix` when it ends so and something is left ("Python
    3.11.2 documentation", the site's own front page, keeps its name)."""
    if suffix and title.endswith(suffix) and (left := title[: -len(suffix)].rstrip()):
        return left
    return title


def _candidates(title: str) -> set[str]:
    """The endings of `title` that could be a site's: from each separator on, and a last
    parenthesis (Javadoc's "String (Java SE 17 & JDK 17)")."""
    text = " ".join(title.split())
    if len(text) > TITLE_CHARS_MAX:
        return set()
    found = set()
    for separator in SUFFIX_SEPARATORS:
        at = text.find(separator)
        while at > 0:
            found.add(text[at:])
            at = text.find(separator, at + 1)
    if text.endswith(")") and (at := text.rfind(" (")) > 0:
        found.add(text[at:])
    return {ending for ending in found if sum(ch.isalpha() for ch in ending) >= 2}
