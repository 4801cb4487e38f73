"""Document → chunks: passages of at most chunk_size characters, each inside one section.

docs/how-search-works.md ("What is searched"): a document is cut into chunks that never
cross a heading and keep their citation: the document's title, the headings above them, their page (PDF) or the
1-based line where they start (text and Markdown). A section longer than chunk_size is cut at
the best break point inside each window of chunk_size characters, in the order of `BREAKS`:
a blank line (so consecutive paragraphs are packed greedily while they fit), then a sentence
end, then a line end, then any whitespace, and only as a last resort in the middle of a word.
No cut leaves a fragment — fewer than chunk_size / FRAGMENT_PARTS characters — before it or
after it in its section: a page marker (`[[Page 115 STAT. 301]]`), a lone heading line or a
stray line before a paragraph too long to join whole is joined to that paragraph's first
sentences instead of standing alone, and a section's last line is never left alone after its
last cut. Alone, a fragment's vector is mostly its title and headings, close to any question
on the document's topic, and it would win by meaning over the passages that answer.

A section whose whole text is shorter than LONE_FRAGMENT_CHARS — a page marker under a heading
of its own (`<h3>Parte 1</h3><p>Página 3</p>`), a section that says only "See below." — has no
passage to cut it from: it joins the next section of its document that is not one (the last
section before it when none follows), in front of that section's text, with its own headings
(those the section it joins does not share) as a line before its text. The chunk then starts
with it and carries its line and page; it is cited under the headings of the section it joined.
So no chunk is a fragment unless its document holds nothing else.

A chunk is its section's text between two cuts with its surrounding whitespace stripped and
nothing else changed, so `chunk.text` is a substring of `section.text` (of the joined text when
a lone fragment joined the section) and its line is computable. Chunks are disjoint and in order; every non-whitespace character of a section
lands in exactly one chunk. Each chunk reads one window of chunk_size characters a few times
at most, never the rest of the section, so the work is linear in the text (a section of a million
tiny paragraphs or one 10 MB line included).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from metis_lite.errors import InvalidRequest
from metis_lite.records import Chunk, Document, MetisWarning, Section
from metis_lite.settings import CHUNK_CHARS

CHUNK_CHARS_MIN = 100
"""The smallest chunk_size a base accepts: below it a chunk rarely holds one sentence."""

CHUNK_CHARS_MAX = 100_000
"""The largest chunk_size a base accepts: past it a chunk is no longer a passage to cite."""

LOOKAHEAD_CHARS = 16
"""Characters read past a window so a break pattern can see the separator that follows its cut."""

FRAGMENT_PARTS = 8
"""A piece of a section shorter than chunk_size / 8 characters (150 for the default 1,200) is a
fragment, never a chunk of its own unless it is its section's whole text: a page marker is about
25 characters, a heading or a stray line under 100, a passage that answers a question a few
sentences."""


LONE_FRAGMENT_CHARS = 40
"""A section whose whole text (stripped) is shorter than this is a lone fragment, joined to a
neighbouring section of its document: a page marker is 8 to 25 characters, "See below." 10,
"This page intentionally left blank." 35; a passage that answers a question is a sentence or
more (the example handbook's shortest section holds 97)."""

RULES_VERSION = 3
"""The rules a base's chunks were read and cut by, recorded in the base (`meta.chunk_rules`):
1, no record: a page marker, a lone heading line or a stray line could be a chunk alone; 2: no
cut leaves a fragment, and a lone fragment section joins its neighbour; 3: a web page (HTML,
EPUB) is read without its site (parsing/html.py: its main content, no navigation bars,
breadcrumbs, permalink glyphs or lists of links), each section keeps its heading's anchor and
is headed by its page's parent in its book. `index` reads and cuts again the documents of a
base whose chunks are older (Store.chunks_outdated): those of the kinds the newer versions
changed (RULES_CHANGED)."""

RULES_CHANGED: dict[int, frozenset[str] | None] = {2: None, 3: frozenset({"html", "epub"})}
"""The kinds of documents each version of the rules reads or cuts otherwise (None: every
kind): a base moved from version 2 reads its web pages again, not its PDFs (nor OCR again)."""


def kinds_cut_otherwise(recorded: int) -> frozenset[str] | None:
    """The kinds of documents the rules since version `recorded` cut otherwise (None: all)."""
    kinds: set[str] = set()
    for version in range(recorded + 1, RULES_VERSION + 1):
        changed = RULES_CHANGED[version]
        if changed is None:
            return None
        kinds |= changed
    return frozenset(kinds)


CHUNKS_OUTDATED = MetisWarning(
    "CHUNKS_OUTDATED",
    "the base's passages were read and cut by older rules (a page's navigation bar, a page "
    "marker or a stray line can be a passage of its own and come first by meaning, and web "
    "pages' passages cite no heading's anchor): run `metis-lite index BASE` to cut them again "
    "(passages whose text is unchanged keep their vectors)",
)
"""Said by every search and the status of a base whose chunks are older (Store.chunks_outdated),
until `index` cuts them again."""


@dataclass(frozen=True)
class Break:
    """One kind of break point: a chunk may end where `pattern` starts to match.

    `pattern` matches the separator after the cut (it holds no capturing group); what comes
    before the cut, such as a sentence's full stop, is matched by a look-behind. `needs` is a
    character class every match holds: a window without one is not searched for this kind.
    """

    name: str
    pattern: str
    needs: str


_CLOSE = "\"'”’»)\\]"
_CJK_END, _CJK_CLOSE = "。！？｡", "」』”’）)"
_LIST_MARK = r"(?<!^\d\.)(?<!\n\d\.)(?<!^\d\d\.)(?<!\n\d\d\.)"

BREAKS: tuple[Break, ...] = (
    # A blank line (a line holding only spaces or tabs counts as blank).
    Break("paragraph", r"\n[^\S\n]*\n", r"\n"),
    # Whitespace after . ! ? … and at most one closing quote or bracket, but not after the
    # "12." that opens a numbered list's line; after 。！？ with no space, as Chinese and
    # Japanese write sentences.
    Break(
        "sentence",
        rf"(?:(?<=[.!?…])|(?<=[.!?…][{_CLOSE}])){_LIST_MARK}\s"
        rf"|(?<=[{_CJK_END}])(?![{_CJK_CLOSE}])|(?<=[{_CJK_END}][{_CJK_CLOSE}])",
        rf"[.!?…{_CJK_END}]",
    ),
    Break("line", r"\n", r"\n"),
    Break("word", r"\s", r"\s"),
)
"""Break points, most preferred first; within a kind, the last one inside the window wins."""

_SPACE = re.compile(r"\s*")


def chunk(document: Document, *, chunk_size: int = CHUNK_CHARS) -> list[Chunk]:
    """The chunks of `document`, section by section, in reading order.

    Raises InvalidRequest when chunk_size is outside CHUNK_CHARS_MIN..CHUNK_CHARS_MAX.
    """
    check_chunk_size(chunk_size)
    finders = _finders(chunk_size)
    chunks: list[Chunk] = []
    for group in _joined(document.sections):
        chunks.extend(_section_chunks(document.title, group, chunk_size, finders))
    return chunks


def _is_fragment(section: Section) -> bool:
    return len(section.text.strip()) < LONE_FRAGMENT_CHARS


def _joined(sections: tuple[Section, ...]) -> list[list[Section]]:
    """The sections with text, in order, grouped: each section that is not a lone fragment with
    the fragments before it (the fragments after the last one join that one; a document of
    fragments only is one group)."""
    groups: list[list[Section]] = []
    waiting: list[Section] = []
    for section in sections:
        if not section.text.strip():
            continue
        waiting.append(section)
        if not _is_fragment(section):
            groups.append(waiting)
            waiting = []
    if waiting and groups:
        groups[-1].extend(waiting)
    elif waiting:
        groups.append(waiting)
    return groups


def check_chunk_size(chunk_size: object) -> int:
    """`chunk_size` if it is an int within CHUNK_CHARS_MIN..CHUNK_CHARS_MAX, else InvalidRequest."""
    if (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, int)
        or not CHUNK_CHARS_MIN <= chunk_size <= CHUNK_CHARS_MAX
    ):
        raise InvalidRequest(
            f"chunk size must be a whole number of characters from {CHUNK_CHARS_MIN}"
            f" to {CHUNK_CHARS_MAX}, not {chunk_size!r}"
        )
    return chunk_size


def spans(text: str, chunk_size: int) -> list[tuple[int, int]]:
    """(start, end) of each chunk of `text`: text[start:end] is a chunk, already stripped."""
    check_chunk_size(chunk_size)
    return _spans(text, chunk_size, _finders(chunk_size))


Finder = tuple[re.Pattern[str], re.Pattern[str]]
"""A break kind compiled for one chunk_size: (its `needs` class, its last-break finder)."""


def _finders(chunk_size: int) -> tuple[Finder, ...]:
    """One regex per break kind, matched at a chunk's start, that finds its last break point.

    The greedy prefix `.{1,chunk_size}` runs to the end of the window and backs off one
    character at a time until the break pattern matches: the first break found is the last one
    in the window, usually a few characters from its end, and the cut (the prefix's end) can be
    neither the chunk's start nor past chunk_size. `re` caches the compiled patterns.
    """
    shortest = max(1, chunk_size // FRAGMENT_PARTS)
    return tuple(
        (re.compile(b.needs), re.compile(rf"((?s:.){{{shortest},{chunk_size}}})(?:{b.pattern})"))
        for b in BREAKS
    )


def _spans(text: str, chunk_size: int, finders: tuple[Finder, ...]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    stop = len(text.rstrip())
    space = _SPACE.match(text)
    assert space is not None  # \s* matches anywhere
    start = space.end()
    last_cut = stop - max(1, chunk_size // FRAGMENT_PARTS)  # what follows a cut is no fragment
    while start < stop:
        if stop - start <= chunk_size:
            out.append((start, stop))
            break
        cut = _best_cut(text, start, chunk_size, finders, last_cut)
        end = cut
        while text[end - 1].isspace():
            end -= 1
        out.append((start, end))
        space = _SPACE.match(text, cut)
        assert space is not None
        start = space.end()
    return out


def _best_cut(
    text: str, start: int, chunk_size: int, finders: tuple[Finder, ...], last_cut: int
) -> int:
    """Where the chunk that starts at `start` (a non-space character) ends: its best break,
    at least a fragment's length from `start` (the finders' shortest prefix) and, where the
    window reaches that far, not past `last_cut`."""
    window_end = min(len(text), start + chunk_size + LOOKAHEAD_CHARS)
    if start + chunk_size > last_cut:  # the section's last cut: what is left stays whole
        window_end = min(window_end, last_cut)
    for needs, finder in finders:
        if needs.search(text, start, window_end) and (
            match := finder.match(text, start, window_end)
        ):
            return match.end(1)
    return _hard_cut(text, start, min(start + chunk_size, max(start + 1, last_cut)))


def _hard_cut(text: str, start: int, limit: int) -> int:
    """A cut inside a word (no whitespace in the window); it keeps accents on their letter."""
    cut = limit
    while cut > start + 1 and unicodedata.combining(text[cut]):
        cut -= 1
    return cut


@dataclass(frozen=True)
class _Piece:
    """A section's place in a group's joined text: from `start`, `lead` characters of its own
    headings' line, then its text."""

    start: int
    lead: int
    section: Section
    whole: bool  # its text as it is (the group's passage), else stripped (a lone fragment)


def _group_text(group: list[Section]) -> tuple[Section, str, list[_Piece]]:
    """The section a group is cited under (its first that is not a fragment, else its first),
    the group's text, and where each section lies in it."""
    main = next((s for s in group if not _is_fragment(s)), group[0])
    parts: list[str] = []
    pieces: list[_Piece] = []
    at = 0
    for section in group:
        if section is main:
            lead, text = "", section.text
        else:
            shared = 0
            while (
                shared < min(len(section.headings), len(main.headings))
                and section.headings[shared] == main.headings[shared]
            ):
                shared += 1
            own = section.headings[shared:]
            lead = " > ".join(own) + "\n" if own else ""
            text = section.text.strip()
        if parts:
            parts.append("\n\n")
            at += 2
        pieces.append(_Piece(at, len(lead), section, section is main))
        parts.append(lead + text)
        at += len(lead) + len(text)
    return main, "".join(parts), pieces


def _section_chunks(
    title: str, group: list[Section], chunk_size: int, finders: tuple[Finder, ...]
) -> list[Chunk]:
    """The chunks of one section, with the lone fragments joined to it (a group of one section:
    its own chunks, cut as ever)."""
    main, text, pieces = _group_text(group)
    out = []
    at = 0  # the piece the last chunk started in: chunks come in order
    counted, breaks = pieces[0].start, 0  # line breaks of the main text before `counted`
    for start, end in _spans(text, chunk_size, finders):
        while at + 1 < len(pieces) and pieces[at + 1].start <= start:
            at += 1
        section = pieces[at].section
        line = section.start_line
        if line is not None and pieces[at].whole:
            counted = max(counted, pieces[at].start)
            breaks += text.count("\n", counted, start)  # each character read once
            counted = max(counted, start)
            line += breaks
        out.append(
            Chunk(
                text=text[start:end],
                title=title,
                headings=main.headings,
                page=section.page,
                line=line,
                anchor=main.anchor,
                ocr=section.ocr or main.ocr,
            )
        )
    return out
