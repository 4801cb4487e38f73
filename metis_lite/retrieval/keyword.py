"""By words: BM25 over the FTS5 index, the question turned into a safe OR of its words.

The index has two columns, the chunk's text and its context (title and headings), so a
section's topic counts even when the passage does not name it, as it does for the embedding.
SQLite's bm25() is negated (lower is better); scores here are positive, higher better.
A base held open answers from its words in memory (bm25.py: the same scores, ~20× faster at
100,000 chunks) once they are loaded; FTS5 answers until then.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from metis_lite.records import Filters, Hit, MetisWarning, QuestionWords
from metis_lite.settings import (
    COMMON_WORD_MIN_CHUNKS,
    COMMON_WORD_SHARE,
    CONTEXT_WEIGHT,
    MIN_IDF,
    TEXT_WEIGHT,
)
from metis_lite.store import Store, filter_clause
from metis_lite.text.tokenizer import fts_match, tokens

if TYPE_CHECKING:  # NumPy only where the words in memory answer (bm25.py): FTS5 needs none
    import numpy as np

    from metis_lite.retrieval.bm25 import WordIndex


_SEARCH = (
    f"SELECT rowid, -bm25(chunks_fts, {TEXT_WEIGHT}, {CONTEXT_WEIGHT}) AS score FROM chunks_fts"
    f" WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts, {TEXT_WEIGHT}, {CONTEXT_WEIGHT}), rowid"
    " LIMIT ?"
)

_SCORES_OF = (
    f"SELECT rowid, -bm25(chunks_fts, {TEXT_WEIGHT}, {CONTEXT_WEIGHT}) FROM chunks_fts"
    " WHERE chunks_fts MATCH ? AND +rowid IN (SELECT value FROM json_each(?))"
)
"""`+rowid`: the ids filter the matches FTS5 finds in one pass; a plain `rowid IN` hands them to
FTS5 one at a time, each a new evaluation of the query (0.5 ms an id, 30 × the one pass)."""

_SEARCH_FILTERED = (
    f"SELECT f.rowid, -bm25(chunks_fts, {TEXT_WEIGHT}, {CONTEXT_WEIGHT}) AS score FROM chunks_fts f"
    " JOIN chunks c ON c.id = f.rowid JOIN documents d ON d.id = c.document_id"
    " JOIN sources s ON s.id = d.source_id"
    " WHERE chunks_fts MATCH ? AND {where}"
    f" ORDER BY bm25(chunks_fts, {TEXT_WEIGHT}, {CONTEXT_WEIGHT}), f.rowid LIMIT ?"
)


WORDS_INDEX_OUTDATED = MetisWarning(
    "WORDS_INDEX_OUTDATED",
    "the words' index was built by an older tokenizer: run `metis-lite index BASE` to rebuild "
    "it (Chinese, Japanese and Korean are found by words only after that)",
)


def index_warnings(store: Store) -> list[MetisWarning]:
    """[WORDS_INDEX_OUTDATED] for a base whose words index predates today's word rules (it is
    searched by its own rules meanwhile, so nothing is found that was not before); else []."""
    return [WORDS_INDEX_OUTDATED] if store.words_outdated else []


def question_words(
    store: Store, question: str, *, words: tuple[str, ...] | None = None
) -> QuestionWords:
    """The question's distinct words by the base's word rules, with how many chunks hold each
    (FTS5's own vocabulary) and whether each is common there (COMMON_WORD_SHARE). `words`: the
    question's distinct words by those rules, when the caller has read them already."""
    if words is None:
        words = tuple(dict.fromkeys(tokens(question, version=store.words_version)))
    if not words:
        return QuestionWords()
    total, frequency = store.document_frequencies(words)
    held = tuple(frequency[w] for w in words)
    floor = COMMON_WORD_SHARE * total if total >= COMMON_WORD_MIN_CHUNKS else math.inf
    return QuestionWords(words, total, held, tuple(n >= floor for n in held))


def search_words(store: Store, question: str, asked: QuestionWords | None = None) -> list[str]:
    """The question's distinct words that can change a BM25 score (`asked`: the question's
    words as question_words read them, when the caller has them).

    FTS5's bm25() gives a word held by half the chunks or more an idf of 1e-6: it adds nothing
    to any score, yet FTS5 would read its whole posting list (most of the base). Such words are
    left out of the query unless the question has no other word.
    """
    if asked is None:
        asked = question_words(store, question)
    telling = [w for w, n in zip(asked.words, asked.held, strict=True) if 2 * n < asked.chunks]
    return telling if len(asked.words) > 1 and telling else list(asked.words)


def best_possible(store: Store, question: str, asked: QuestionWords | None = None) -> float:
    """The BM25 score of a chunk of average length holding each of the question's words once,
    in its text: the sum of their idfs, as FTS5's bm25() computes them (log((N - n + 0.5) /
    (n + 0.5)) for a word held by n of N chunks, at least 1e-6). A word no chunk holds counts
    in full: the words found less of the question. `relative` fusion divides by it. `asked`:
    the question's words as question_words read them, when the caller has them."""
    if asked is None:
        asked = question_words(store, question)
    return TEXT_WEIGHT * sum(_idf(asked.chunks, n) for n in asked.held)


def scores_of(
    store: Store,
    question: str,
    chunk_ids: Sequence[int],
    *,
    asked: QuestionWords | None = None,
    index: WordIndex | None = None,
) -> dict[int, float]:
    """The BM25 score, as `search` scores it, of each of `chunk_ids` that holds a word of the
    question: `relative` fusion scores a chunk the list by meaning found but the list by words
    did not reach."""
    words = search_words(store, question, asked)
    if not words or not chunk_ids:
        return {}
    if index is not None:
        import numpy as np

        wanted = np.asarray(sorted(set(chunk_ids)), dtype=np.int64)
        hits = index.search(store, words, len(wanted), allowed=wanted)
        if hits is not None:
            return {hit.chunk_id: hit.score for hit in hits}
    rows = store.db.execute(_SCORES_OF, (fts_match(words), json.dumps(list(chunk_ids))))
    return {row[0]: row[1] for row in rows}


def _idf(total: int, held: int) -> float:
    # While another connection writes, the words' counts may be ahead of the chunk count.
    ratio = (total - held + 0.5) / (held + 0.5)
    return math.log(ratio) if ratio > 1.0 else MIN_IDF


def search(
    store: Store,
    question: str,
    n: int,
    *,
    filters: Filters | None = None,
    asked: QuestionWords | None = None,
    index: WordIndex | None = None,
    allowed: np.ndarray | None = None,
) -> list[Hit]:
    """The n chunks that best match the question's words, best first (equal scores by chunk
    id); [] when it has none. `asked`: the question's words as question_words read them, when
    the caller has them; `index`: the base's words in memory (bm25.py), which answers when it
    holds what the store's snapshot holds (FTS5 answers otherwise, with the same list);
    `allowed`: the ids the filters keep, when the caller has them."""
    words = search_words(store, question, asked)
    if not words or n <= 0:
        return []
    if index is not None:
        if allowed is None and filters is not None and filters.active:
            allowed = store.filtered_chunk_ids(filters)
        hits = index.search(store, words, n, allowed=allowed)
        if hits is not None:
            return hits
    match = fts_match(words)
    if filters is not None and filters.active:
        where, params = filter_clause(filters)
        rows = store.db.execute(_SEARCH_FILTERED.format(where=where), (match, *params, n))
    else:
        rows = store.db.execute(_SEARCH, (match, n))
    return [Hit(chunk_id=row[0], score=row[1], rank=rank) for rank, row in enumerate(rows, start=1)]
