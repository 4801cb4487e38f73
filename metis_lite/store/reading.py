"""What a search and a status read of a base: chunk rows to cite, the chunks a filter keeps,
counts, word frequencies, and the marks that say another connection wrote."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from metis_lite.records import Filters
from metis_lite.store.core import StoreCore, one

if TYPE_CHECKING:  # imported where it computes: a search by words never needs NumPy
    import numpy as np


@dataclass(frozen=True)
class ChunkRow:
    id: int
    text: str
    title: str
    headings: tuple[str, ...]
    page: int | None
    line: int | None
    document: str
    kind: str
    source: str
    anchor: str | None = None
    ocr: bool = False


class ReadingMixin(StoreCore):
    """Reads of chunks, counts and word frequencies."""

    _df_cache: dict[str, int]  # document_frequencies: chunks holding each word

    def chunk_rows(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self.db.execute(
            "SELECT c.id, c.text, c.title, c.headings, c.page, c.line, d.path, d.kind, s.name,"
            " p.anchor, p.ocr FROM chunks c JOIN documents d ON d.id = c.document_id"
            " JOIN sources s ON s.id = d.source_id LEFT JOIN chunk_places p ON p.chunk_id = c.id"
            f" WHERE c.id IN ({marks})",
            tuple(ids),
        )
        return {
            r[0]: ChunkRow(
                r[0],
                r[1],
                r[2],
                tuple(json.loads(r[3])),
                r[4],
                r[5],
                r[6],
                r[7],
                r[8],
                r[9],
                bool(r[10]),
            )
            for r in rows
        }

    def existing_chunks(self, ids: Sequence[int]) -> set[int]:
        """Those of the chunk ids the base holds (one primary-key lookup each)."""
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        rows = self.db.execute(f"SELECT id FROM chunks WHERE id IN ({marks})", tuple(ids))
        return {row[0] for row in rows}

    def data_version(self) -> int:
        """Changes when another connection commits (PRAGMA data_version)."""
        return int(one(self.db.execute("PRAGMA data_version"))[0])

    def chunks_generation(self) -> tuple[int, int]:
        """(chunks, last chunk id ever given): changes whenever a chunk is added or removed
        (ids are never reused); cached until this or another connection writes."""
        key = (self.data_version(), self.db.total_changes())
        if getattr(self, "_generation_key", None) != key:
            self._generation_key = key
            self._generation = one(
                self.db.execute(
                    "SELECT (SELECT count(*) FROM chunks),"
                    " coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'chunks'), 0)"
                )
            )
        return self._generation

    def chunk_sample(self, n: int, chars: int) -> list[str]:
        """The first `chars` characters of up to n chunks spread evenly over the ids (one
        index seek each, however large the base)."""
        return [
            row[0]
            for row in self.db.execute(
                "WITH RECURSIVE"
                " bounds(lo, hi) AS (SELECT min(id), max(id) FROM chunks),"
                " k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i + 1 < ?),"
                " picked(id) AS (SELECT DISTINCT (SELECT c.id FROM chunks c"
                "   WHERE c.id >= lo + i * (hi - lo + 1) / ? ORDER BY c.id LIMIT 1)"
                "   FROM k, bounds WHERE lo IS NOT NULL)"
                " SELECT substr(c.text, 1, ?) FROM picked JOIN chunks c ON c.id = picked.id",
                (n, n, chars),
            )
        ]

    def filtered_chunk_ids(self, filters: Filters) -> np.ndarray:
        """Ids of the chunks the filters keep (sorted)."""
        import numpy as np

        where, params = filter_clause(filters)
        rows = self.db.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
            f" JOIN sources s ON s.id = d.source_id WHERE {where} ORDER BY c.id",
            params,
        )
        return np.fromiter((r[0] for r in rows), dtype=np.int64)

    def counts(self) -> dict[str, int]:
        row = one(
            self.db.execute(
                "SELECT (SELECT count(*) FROM sources), (SELECT count(*) FROM documents),"
                " (SELECT count(*) FROM chunks), (SELECT count(*) FROM vectors)"
            )
        )
        return dict(zip(("sources", "documents", "chunks", "vectors"), map(int, row), strict=True))

    def kinds(self) -> dict[str, int]:
        return dict(
            self.db.execute("SELECT kind, count(*) FROM documents GROUP BY kind ORDER BY kind")
        )

    def document_frequencies(self, words: Sequence[str]) -> tuple[int, dict[str, int]]:
        """(chunks in the base, chunks holding each word), from FTS5's own vocabulary; cached
        until this or another connection writes."""
        key = (self.data_version(), self.db.total_changes())
        if getattr(self, "_df_key", None) != key:
            self._df_key, self._df_cache = key, {}
            self._df_total = int(one(self.db.execute("SELECT count(*) FROM chunks"))[0])
            self.db.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_vocab"
                " USING fts5vocab(main, chunks_fts, row)"
            )
        missing = [w for w in words if w not in self._df_cache]
        if missing:
            found = dict(
                self.db.execute(
                    f"SELECT term, doc FROM temp.chunks_vocab WHERE term IN ({','.join('?' * len(missing))})",
                    tuple(missing),
                )
            )
            self._df_cache.update({w: int(found.get(w, 0)) for w in missing})
        return self._df_total, {w: self._df_cache[w] for w in words}


def filter_clause(filters: Filters) -> tuple[str, tuple[Any, ...]]:
    """SQL over aliases d (documents) and s (sources) keeping what the filters keep."""
    parts: list[str] = []
    params: list[Any] = []
    if filters.path_prefix:
        # As results show it ("source/path/") or inside the source ("path/").
        parts.append("(substr(d.path, 1, ?) = ? OR substr(s.name || '/' || d.path, 1, ?) = ?)")
        params += [len(filters.path_prefix), filters.path_prefix] * 2
    if filters.kinds:
        parts.append(f"d.kind IN ({','.join('?' * len(filters.kinds))})")
        params += list(filters.kinds)
    if filters.sources:
        parts.append(f"s.name IN ({','.join('?' * len(filters.sources))})")
        params += list(filters.sources)
    return (" AND ".join(parts) or "1"), tuple(params)
