"""Markdown (.md): sections cut at ATX (`# …`) and setext (`===`/`---`) headings, lines kept.

Only the block structure that decides where sections start is read: front matter, fenced code
(a `#` line inside a fence is code, not a heading), ATX and setext headings. Everything else —
lists, tables, emphasis, links — stays in the section text as written, so that every line of a
section is the source's own line (see `common` for the line rule).
"""

from __future__ import annotations

import re

from metis_lite.parsing.common import collapse, decode_text, document, line_section
from metis_lite.records import Document, Section

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}(?=[^`]*$)|~{3,})")
_FENCE_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
# A line that starts a list item, quote, table row or indented code is not a setext heading's text.
_NOT_PARAGRAPH = re.compile(r"^(?: {0,3}(?:[-*+][ \t]|\d{1,9}[.)][ \t]|>|\|)| {4}|\t)")
_FRONT_MATTER = {"---": ("---", "..."), "+++": ("+++",)}
_FRONT_TITLE = re.compile(r"^title[ \t]*[:=][ \t]*(.*?)[ \t]*$", re.IGNORECASE)

# Inline markup removed from heading text, in order: images and links keep their text.
_HEADING_MARKUP = (
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),
    (re.compile(r"!?\[([^\]]*)\]\[[^\]]*\]"), r"\1"),
    (re.compile(r"`+([^`]*)`+"), r"\1"),
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),
    (re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])"), r"\1"),
)


def parse(data: bytes, *, name: str) -> Document:
    """Read a Markdown file into one section per heading, each with its chain of headings.

    The title is the front matter's `title:`, else the first level-1 heading, else `name`.
    A section's `start_line` is the 1-based line of its first non-blank body line.
    """
    lines = decode_text(data).split("\n")
    front_title, body_from = _front_matter(lines)
    sections: list[Section] = []
    chain: list[tuple[int, str]] = []
    first_h1: str | None = None
    section_from = body_from
    fence: tuple[str, int] | None = None
    run_from: int | None = None  # first line of the current run of non-blank lines
    run_plain = False  # whether that run is a plain paragraph (may become a setext heading)

    def close(end: int) -> None:
        headings = tuple(text for _, text in chain if text)
        section = line_section(lines, section_from, end, headings)
        if section:
            sections.append(section)

    def open_heading(level: int, text: str) -> None:
        nonlocal first_h1
        while chain and chain[-1][0] >= level:
            chain.pop()
        chain.append((level, text))
        if level == 1 and first_h1 is None and text:
            first_h1 = text

    for i in range(body_from, len(lines)):
        line = lines[i]
        if fence:
            closing = _FENCE_CLOSE.match(line)
            if closing and closing[1][0] == fence[0] and len(closing[1]) >= fence[1]:
                fence = None
            continue
        if opening := _FENCE_OPEN.match(line):
            fence = (opening[1][0], len(opening[1]))
            run_from = None
            continue
        if atx := _ATX.match(line):
            close(i)
            open_heading(len(atx[1]), _heading_text(atx[2] or ""))
            section_from, run_from = i + 1, None
            continue
        if run_from is not None and run_plain and (underline := _SETEXT.match(line)):
            close(run_from)
            text = _heading_text(" ".join(lines[run_from:i]))
            open_heading(1 if underline[1][0] == "=" else 2, text)
            section_from, run_from = i + 1, None
            continue
        if not line.strip():
            run_from = None
        elif run_from is None:
            run_from, run_plain = i, not _NOT_PARAGRAPH.match(line)
    close(len(lines))
    return document(front_title or first_h1 or name, "md", sections)


def _front_matter(lines: list[str]) -> tuple[str | None, int]:
    """The front matter's title and the index of the first body line (0 without front matter).

    Front matter is a YAML (`---`) or TOML (`+++`) block opening the file's first line and
    closed by a matching line; an opening line never closed is body text (a thematic break).
    """
    closers = _FRONT_MATTER.get(lines[0].rstrip()) if lines else None
    if not closers:
        return None, 0
    for end in range(1, len(lines)):
        if lines[end].rstrip() in closers:
            break
    else:
        return None, 0
    title = None
    for line in lines[1:end]:
        if (found := _FRONT_TITLE.match(line)) and title is None:
            title = _unquote(found[1]) or None
    return title, end + 1


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1].replace('\\"', '"') if value[0] == '"' else value[1:-1]
    return collapse(value)


def _heading_text(raw: str) -> str:
    """A heading as a reader sees it: inline markup (links, code, emphasis) removed."""
    for pattern, replacement in _HEADING_MARKUP:
        raw = pattern.sub(replacement, raw)
    return collapse(raw)
