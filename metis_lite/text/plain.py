"""A chunk's text as a reader sees it: what a snippet shows, its Markdown syntax dropped.

A Markdown chunk keeps its source's lines as written (parsing/markdown.py), so that every
line of it is the file's own; its snippet, one line to read, should read as text. Here,
line by line: code fences, table delimiter rows, thematic breaks, setext underlines and link
reference definitions go; a heading's and a quote's markers go; a bullet becomes "•"; a table
row becomes its cells joined by " · ", ended as a sentence (so a snippet can start at a row);
inline code, emphasis, strikethrough, links and images keep their text; backslash escapes and
character references become the character. Code (fenced, or between backticks) is kept as
written. Text of every other kind is already text and is returned unchanged.

The rules are CommonMark's and GitHub's where a line can be read alone, which is all a chunk
allows (it may start inside a table or a fence): an emphasis marker must touch its text, `_`
inside a word (snake_case) stays, a table row is a line that starts with `|` or a line of a
block whose second line is a delimiter row.
"""

from __future__ import annotations

import html
import re

BULLET = "•"
"""What a list item's marker (-, *, +) becomes: it reads as a bullet, not as syntax."""

CELL_SEPARATOR = " · "
"""Between a table row's cells in a snippet (a pipe reads as syntax)."""

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_DELIMITER_ROW = re.compile(r"^ {0,3}\|?(?: *:?-+:? *\|)+(?: *:?-+:? *)?$|^ {0,3}\|? *:?-+:? *\|$")
_BREAK = re.compile(r"^ {0,3}(?:(?:\* *){3,}|(?:- *){3,}|(?:_ *){3,}|=+ *)$")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]: *\S+.*$")
_HEADING = re.compile(r"^ {0,3}#{1,6}(?: +|$)(.*?)(?: +#+)? *$")
_QUOTE = re.compile(r"^( {0,3}> ?)+")
_BULLET_ITEM = re.compile(r"^( *)[-*+] +(?:\[[ xX]\] +)?")
_END = re.compile(r"[.!?…:;。！？]$")

_PROTECTED = re.compile(
    # Left to right, as CommonMark reads them: an escaped character (so \` opens no code), or a
    # code span, in which a backslash is itself.
    r"\\([!-/:-@\[-`{-~])|(`+)(.+?)(?<!`)\2(?!`)"
)
# Inline markup, in order. No inner part may hold its own closing mark, so each try ends at the
# next mark and reading a line is linear in its length, whatever it holds (a 100,000-character
# chunk of "*a " or "[" included).
_LINK_TEXT = r"\[([^\[\]]*)\]"
_TARGET = r"\([^()\s]*(?:\s+\"[^\"]*\")?\)"
_INLINE = (
    (re.compile(rf"!{_LINK_TEXT}{_TARGET}"), r"\1"),
    (re.compile(rf"{_LINK_TEXT}{_TARGET}"), r"\1"),
    (re.compile(rf"!?{_LINK_TEXT}\[[^\[\]]*\]"), r"\1"),
    (re.compile(r"<((?:https?|mailto|ftp):[^<>\s]+)>"), r"\1"),
    (re.compile(r"\*\*(?=\S)((?:[^*]|\*(?!\*))+?)(?<=\S)\*\*"), r"\1"),
    (re.compile(r"__(?=\S)((?:[^_]|_(?!_))+?)(?<=\S)__"), r"\1"),
    (re.compile(r"~~(?=\S)((?:[^~]|~(?!~))+?)(?<=\S)~~"), r"\1"),
    (re.compile(r"(?<![\w*])\*(?=[^\s*])([^*]+?)(?<=[^\s*])\*(?![\w*])"), r"\1"),
    (re.compile(r"(?<![\w_])_(?=[^\s_])([^_]+?)(?<=[^\s_])_(?![\w_])"), r"\1"),
)
_REFERENCE_CHARACTER = re.compile(
    r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"
)
_KEPT = "\ue000"
"""Marks where a piece kept as written (code, an escaped character) stands while the rest is
read; a line that already holds it is read without keeping anything apart."""
_KEPT_AT = re.compile(_KEPT + r"(\d+)" + _KEPT)
_CELL = "\ue001"
"""Stands between a table row's cells while the row is read."""
_MARKUP = re.compile(r"[`\\\[<*_~&]")
"""A character that may start inline markup: a text without one is read as it is."""


def plain_text(text: str, kind: str) -> str:
    """`text` as a reader sees it: a Markdown chunk's syntax dropped (see the module); a chunk
    of any other kind unchanged."""
    return markdown_text(text) if kind == "md" else text


def markdown_text(text: str) -> str:
    """The text of Markdown, line by line (see the module)."""
    lines = text.split("\n")
    tables = _table_lines(lines)
    out: list[str] = []
    fence: str | None = None
    for n, line in enumerate(lines):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            else:
                out.append(line)
            continue
        if opened:
            fence = opened.group(1)
            continue
        if n in tables:
            if not _DELIMITER_ROW.match(line):
                out.append(_row(line))
            continue
        if _BREAK.match(line) or _REFERENCE.match(line):
            continue
        out.append(_block_line(line))
    return "\n".join(out)


def _table_lines(lines: list[str]) -> set[int]:
    """The lines that are table rows: those starting with `|`, and each line holding a `|` of a
    block (lines between blank ones) whose second line is a delimiter row."""
    rows = {n for n, line in enumerate(lines) if line.lstrip().startswith("|")}
    start = 0
    for n in range(len(lines) + 1):
        if n == len(lines) or not lines[n].strip():
            block = range(start, n)
            if len(block) >= 2 and _DELIMITER_ROW.match(lines[start + 1]) and "|" in lines[start]:
                rows.update(i for i in block if "|" in lines[i])
            start = n + 1
    return rows


def _row(line: str) -> str:
    """A table row as text: its cells, read as inline Markdown, joined; ended as a sentence."""
    cells = re.split(r"(?<!\\)\|", line.strip())
    if cells and not cells[0].strip():
        cells = cells[1:]
    if cells and not cells[-1].strip():
        cells = cells[:-1]
    # The row is read at once, its cells apart (one read per row, not per cell, whatever their
    # number); a pipe inside code is a cell's end, as in GitHub's tables.
    cells = _inline(_CELL.join(cell.strip() for cell in cells)).split(_CELL)
    row = CELL_SEPARATOR.join(cell for cell in cells if cell)
    return row + "." if row and not _END.search(row) else row


def _block_line(line: str) -> str:
    """One line's block markers (heading, quote, bullet) dropped or made text, then its inline
    markup."""
    heading = _HEADING.match(line)
    if heading:
        line = heading.group(1)
    line = _QUOTE.sub("", line)
    line = _BULLET_ITEM.sub(lambda m: f"{m.group(1)}{BULLET} ", line)
    if line.endswith("\\"):
        line = line[:-1]  # a hard line break
    return _inline(line)


def _inline(text: str) -> str:
    """Inline Markdown's text: code spans and escaped characters kept as written, links and
    images as their text, emphasis without its markers, character references decoded."""
    if not _MARKUP.search(text):
        return text
    kept: list[str] = []

    def keep(piece: str) -> str:
        kept.append(piece)
        return f"{_KEPT}{len(kept) - 1}{_KEPT}"

    if _KEPT not in text:
        text = _PROTECTED.sub(lambda m: keep(m.group(1) if m.group(1) else _code(m.group(3))), text)
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    text = _REFERENCE_CHARACTER.sub(lambda m: html.unescape(m.group(0)), text)
    if kept:
        text = _KEPT_AT.sub(lambda m: kept[int(m.group(1))], text)
    return text


def _code(content: str) -> str:
    """A code span's content: one space on each side is dropped when both are there."""
    if len(content) > 2 and content[0] == content[-1] == " " and content.strip():
        return content[1:-1]
    return content
