"""A base's vectors: float32 little-endian blobs (the layout sqlite-vec reads), one per chunk,
each tagged with its model; `seq` and the removals log let a reader catch up with only what
changed (dense.VectorIndex.sync)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from metis_lite.records import contextualize
from metis_lite.store.core import StoreCore, one


def vector_blob(vector: np.ndarray) -> bytes:
    """float32 little-endian, the layout sqlite-vec's functions read."""
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


class VectorsMixin(StoreCore):
    """Writing vectors, and reading what changed since a reader last looked."""

    def chunks_lacking_vectors(
        self, model: str, limit: int, *, after: int = 0
    ) -> list[tuple[int, str]]:
        """(chunk id, text to embed) for chunks past `after` with no vector of `model`, by id."""
        rows = self.db.execute(
            "SELECT c.id, c.title, c.headings, c.text FROM chunks c"
            " LEFT JOIN vectors v ON v.chunk_id = c.id AND v.model = ?"
            " WHERE c.id > ? AND v.chunk_id IS NULL ORDER BY c.id LIMIT ?",
            (model, after, limit),
        )
        return [(r[0], contextualize(r[1], json.loads(r[2]), r[3])) for r in rows]

    def put_vectors(self, model: str, items: Iterable[tuple[int, np.ndarray]]) -> int:
        """Store vectors for chunks, replacing any earlier one; chunks removed meanwhile are skipped."""
        written = 0
        with self._transaction():
            for chunk_id, vector in items:
                self.db.execute("DELETE FROM vectors WHERE chunk_id = ?", (chunk_id,))
                self.db.execute(
                    "INSERT INTO vectors (chunk_id, model, embedding)"
                    " SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?)",
                    (chunk_id, model, vector_blob(vector), chunk_id),
                )
                written += self.db.changes()
        return written

    def drop_vectors(self, *, except_model: str | None = None) -> int:
        with self._transaction():
            if except_model is None:
                self.db.execute("DELETE FROM vectors")
            else:
                self.db.execute("DELETE FROM vectors WHERE model != ?", (except_model,))
            return self.db.changes()

    def chunks_with_vector(self, model: str) -> int:
        return int(
            one(self.db.execute("SELECT count(*) FROM vectors WHERE model = ?", (model,)))[0]
        )

    def vectors_since(self, seq: int, model: str) -> tuple[np.ndarray, np.ndarray, int]:
        """(chunk ids, float32 blob bytes joined, last seq) of `model`'s vectors written after
        `seq`. One `b"".join` and one `np.frombuffer` by the caller: no per-row arrays (a
        100,000-chunk base loads in one copy)."""
        rows: list[Any] = self.db.execute(
            "SELECT seq, chunk_id, embedding FROM vectors WHERE seq > ? AND model = ? ORDER BY seq",
            (seq, model),
        ).fetchall()
        if not rows:
            last = one(self.db.execute("SELECT coalesce(max(seq), 0) FROM vectors"))[0]
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint8), max(int(last), seq)
        ids = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        blob = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.uint8)
        return ids, blob, int(rows[-1][0])

    def removals_since(self, seq: int) -> tuple[list[int], int]:
        rows: list[Any] = self.db.execute(
            "SELECT seq, chunk_id FROM vector_removals WHERE seq > ? ORDER BY seq", (seq,)
        ).fetchall()
        if not rows:
            return [], seq
        return [r[1] for r in rows], int(rows[-1][0])

    def last_removal_seq(self) -> int:
        return int(one(self.db.execute("SELECT coalesce(max(seq), 0) FROM vector_removals"))[0])
