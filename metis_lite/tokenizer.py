"""The words of a text, as the spec's "By words" defines them, and the FTS5 tokenizer built on them.

A word is a run of letters and digits, compared in lower case with accents folded
(`configuracao` finds `Configuração`); one letter alone is left out, one digit kept (`step 2`);
no stemming, no stop words. The question goes through the same function and becomes a safe
FTS5 query: each word double-quoted, joined by OR, so no user text is ever parsed as FTS5
syntax (`x-ray`, `don't`, `AND NOT`, `NEAR(` are just words).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

import apsw

TOKENIZER_NAME = "metis"
"""The name schema.sql's FTS5 table is declared with (`tokenize='metis'`)."""

_WORD = re.compile(r"[^\W_]+")
_MARKS = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")
_FOLD_TABLE = str.maketrans(
    {"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ł": "l", "ı": "i"}
)


def fold(text: str) -> str:
    """Lower case (casefold) with accents removed: 'Configuração' → 'configuracao'."""
    text = text.casefold()
    if text.isascii():
        return text
    # Compatibility forms (𝐀, ﬁ, ①) decompose to letters that need folding once more.
    text = unicodedata.normalize("NFKD", text).casefold().translate(_FOLD_TABLE)
    return _MARKS.sub("", text)


def _keep(word: str) -> bool:
    return len(word) > 1 or word.isdigit()


def tokens(text: str) -> list[str]:
    """The words of `text` in order, folded; a single letter is dropped, a single digit kept."""
    return [w for w in _WORD.findall(fold(text)) if _keep(w)]


def token_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, folded word) for each word of `text`, offsets into the original string."""
    for match in _WORD.finditer(text):
        for word in _WORD.findall(fold(match.group())) or ():
            if _keep(word):
                yield match.start(), match.end(), word
                break


def fts_query(question: str) -> str | None:
    """A safe FTS5 MATCH expression for a question: its distinct words, quoted, OR-ed.

    None when the question has no word at all (an empty or punctuation-only question).
    """
    return fts_match(list(dict.fromkeys(tokens(question))))


def fts_match(words: list[str]) -> str | None:
    """Words (already tokens: letters and digits only) as a quoted OR; None for no word."""
    return " OR ".join(f'"{word}"' for word in words) or None


def _fts5_tokenizer(connection: apsw.Connection, args: list[str]) -> apsw.Tokenizer:
    """FTS5 tokenizer factory: bare tokens for documents (faster, MEASURED.md), offsets for queries."""

    def tokenize(utf8: bytes, flags: int, locale: str | None):  # noqa: ANN202 - apsw protocol
        text = utf8.decode("utf-8", "replace")
        if flags & apsw.FTS5_TOKENIZE_DOCUMENT:
            return tokens(text)
        return _with_byte_offsets(text)

    return tokenize


def _with_byte_offsets(text: str) -> list[tuple[int, int, str]]:
    out = []
    for start, end, word in token_spans(text):
        byte_start = len(text[:start].encode("utf-8"))
        out.append((byte_start, byte_start + len(text[start:end].encode("utf-8")), word))
    return out


def register(connection: apsw.Connection) -> None:
    """Register the tokenizer on a connection (needed by every statement touching the FTS table)."""
    connection.register_fts5_tokenizer(TOKENIZER_NAME, _fts5_tokenizer)
