"""By words: BM25 over the FTS5 index, the question turned into a safe OR of its words.

The index has two columns, the chunk's text and its context (title and headings), so a
section's topic counts even when the passage does not name it, as it does for the embedding.
SQLite's bm25() is negated (lower is better); scores here are positive, higher better.
"""

from __future__ import annotations

from metis_lite.records import Filters, Hit
from metis_lite.store import Store, filter_clause
from metis_lite.tokenizer import fts_query

TEXT_WEIGHT = 1.0
CONTEXT_WEIGHT = 0.5
"""bm25() column weights: a word of the title or headings counts half a word of the text."""

_SEARCH = (
    f"SELECT rowid, -bm25(chunks_fts, {TEXT_WEIGHT}, {CONTEXT_WEIGHT}) AS score FROM chunks_fts"
    f" WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts, {TEXT_WEIGHT}, {CONTEXT_WEIGHT}) LIMIT ?"
)

_SEARCH_FILTERED = (
    f"SELECT f.rowid, -bm25(chunks_fts, {TEXT_WEIGHT}, {CONTEXT_WEIGHT}) AS score FROM chunks_fts f"
    " JOIN chunks c ON c.id = f.rowid JOIN documents d ON d.id = c.document_id"
    " JOIN sources s ON s.id = d.source_id"
    " WHERE chunks_fts MATCH ? AND {where}"
    f" ORDER BY bm25(chunks_fts, {TEXT_WEIGHT}, {CONTEXT_WEIGHT}) LIMIT ?"
)


def search(store: Store, question: str, n: int, *, filters: Filters | None = None) -> list[Hit]:
    """The n chunks that best match the question's words, best first; [] when it has none."""
    match = fts_query(question)
    if match is None or n <= 0:
        return []
    if filters is not None and filters.active:
        where, params = filter_clause(filters)
        rows = store.db.execute(_SEARCH_FILTERED.format(where=where), (match, *params, n))
    else:
        rows = store.db.execute(_SEARCH, (match, n))
    return [Hit(chunk_id=row[0], score=row[1], rank=rank) for rank, row in enumerate(rows, start=1)]
