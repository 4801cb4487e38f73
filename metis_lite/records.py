"""Frozen dataclasses that cross module lines: Document → Chunk → Hit → Result → Answer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    """A run of text under one chain of headings; never cut across by the chunker.

    `start_line` is the 1-based line of the section's first text line (text and Markdown);
    `page` is the 1-based page (PDF, and a PowerPoint's slide). `anchor` is the id of the
    section's heading in its page (HTML, EPUB: `page.html#anchor` opens there); `ocr` says its
    text was read from an image of the page, not from a text layer. Paragraphs are separated
    by blank lines ("\\n\\n").
    """

    text: str
    headings: tuple[str, ...] = ()
    page: int | None = None
    start_line: int | None = None
    anchor: str | None = None
    ocr: bool = False


@dataclass(frozen=True)
class Document:
    """What a parser reads from one file: its title and its sections in order; `unread_pages`:
    pages with no text layer OCR did not read (none here, its time spent: `unread_why`)."""

    title: str
    kind: str
    sections: tuple[Section, ...]
    unread_pages: int = 0
    unread_why: str = ""


@dataclass(frozen=True)
class Chunk:
    """A passage of at most chunk_size characters, inside one section, with its citation
    (its section's page or line, heading's anchor, and whether it was read by OCR)."""

    text: str
    title: str
    headings: tuple[str, ...]
    page: int | None = None
    line: int | None = None
    anchor: str | None = None
    ocr: bool = False

    def embedding_text(self) -> str:
        """The form docs/how-search-works.md gives, "Title > Heading > Heading\\n\\ntext", read
        by embedder and reranker."""
        return contextualize(self.title, self.headings, self.text)


def contextualize(title: str, headings: tuple[str, ...] | list[str], text: str) -> str:
    trail = [title] if title else []
    trail += [h for h in headings if h and h != title]
    return (" > ".join(trail) + "\n\n" + text) if trail else text


@dataclass(frozen=True)
class Filters:
    """Keep only some documents, before anything is ranked ("Filters")."""

    path_prefix: str | None = None
    kinds: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.path_prefix or self.kinds or self.sources)


@dataclass(frozen=True)
class Hit:
    """One chunk found by one retriever: its id, its raw score and its 1-based rank."""

    chunk_id: int
    score: float
    rank: int


@dataclass(frozen=True)
class Citation:
    source: str
    document: str
    title: str
    kind: str
    headings: tuple[str, ...]
    snippet: str
    page: int | None = None
    line: int | None = None
    anchor: str | None = None  # the cited heading's id in an HTML or EPUB page
    ocr: bool = False  # the passage was read from an image by OCR


@dataclass(frozen=True)
class Scores:
    """A result's score at every stage; None where the stage did not see it (absent in JSON)."""

    fused: float | None = None
    dense: float | None = None
    dense_rank: int | None = None
    keyword: float | None = None
    keyword_rank: int | None = None
    rerank: float | None = None


@dataclass(frozen=True)
class Fact:
    """A fact of a memory base (memory.py): what was stated when, and what replaced it."""

    id: int
    text: str
    stated_at: str
    subject: str | None
    key: str | None
    replaced_by: int | None
    replaced_at: str | None

    @property
    def holds(self) -> bool:
        return self.replaced_by is None


@dataclass(frozen=True)
class QuestionWords:
    """A question's distinct words as a base's words index reads them, with how many of the
    base's `chunks` hold each (`held`) and whether each is `common` there: read once per search
    (keyword.question_words), for the search by words, the snippets and each result's words."""

    words: tuple[str, ...] = ()
    chunks: int = 0
    held: tuple[int, ...] = ()
    common: tuple[bool, ...] = ()

    @property
    def telling(self) -> tuple[str, ...]:
        """The words that are not common in the base: those a snippet is chosen by and marks."""
        return tuple(w for w, common in zip(self.words, self.common, strict=True) if not common)


@dataclass(frozen=True)
class WordMatch:
    """A word of the question that a result holds, as its base's words index reads it.

    `exact`: the chunk holds the word itself (in its text, title or headings), so a search by
    words matches it; `forms`: the words of its text that are the word, or the word with an
    ending (gets for get, snippet.holds), which the snippet counts and the console marks.
    `chunks`: how many of the base's chunks hold the word; `common`: so many that it tells a
    passage from the rest by little (settings.COMMON_WORD_SHARE)."""

    word: str
    chunks: int
    common: bool
    exact: bool
    forms: tuple[str, ...] = ()


@dataclass(frozen=True)
class Place:
    """Another place of a result's text: a passage nearly the same, ranked after it
    (retrieval/collapse.py), in its base (None: the one searched) and its citation."""

    chunk_id: int
    citation: Citation
    base: str | None = None


@dataclass(frozen=True)
class Result:
    chunk_id: int
    score: float
    text: str
    citation: Citation
    scores: Scores
    base: str | None = None
    fact: Fact | None = None  # the fact a memory's note states (its date, whether it holds)
    words: tuple[WordMatch, ...] = ()  # the question's words it holds, in the question's order
    also_in: tuple[Place, ...] = ()
    """The other places of this text, in their rank order: passages nearly the same that are
    not results of their own (one result per text)."""

    @property
    def place(self) -> Place:
        return Place(self.chunk_id, self.citation, self.base)


@dataclass(frozen=True)
class MetisWarning:
    code: str
    message: str


@dataclass(frozen=True)
class Took:
    """Milliseconds spent in each step of a search."""

    embed: float = 0.0
    dense: float = 0.0
    keyword: float = 0.0
    fuse: float = 0.0
    rerank: float = 0.0
    total: float = 0.0


@dataclass(frozen=True)
class Answer:
    mode: str
    reranked: bool
    warnings: tuple[MetisWarning, ...]
    took: Took
    results: tuple[Result, ...]


@dataclass(frozen=True)
class SourceInfo:
    """A source of a base: its name, its folder or file (None for the base's notes,
    metis-<base>), what of it is indexed, and how it is read (docs/indexing.md)."""

    name: str
    path: str | None
    documents: int = 0
    chunks: int = 0
    added_at: str | None = None
    kind: str = "folder"
    """folder, file (one file, read alone) or notes (the base's facts)."""
    excludes: tuple[str, ...] = ()
    """A folder's own patterns, gitignore syntax, in order (`index --exclude`)."""
    no_ignore: bool = False
    """True: the folder's .gitignore, .ignore and .metisignore are not read (`--no-ignore`)."""
    ocr_languages: str = ""
    """The languages OCR reads its scanned pages and images in (`--ocr-languages eng+deu`);
    "": the language packs installed."""
    copies: int = 0
    """Its files that are byte for byte a document indexed already (of this source or
    another), listed as copies of it rather than indexed again."""
