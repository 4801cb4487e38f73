"""A base's vectors: float32 little-endian blobs (the layout sqlite-vec reads), one per chunk,
each tagged with its model; `seq` and the removals log let a reader catch up with only what
changed (dense.VectorIndex.sync).

The removals log (`vector_removals`, a row for every vector deleted: a chunk removed or
embedded again) would grow with every edit, and a new reader reads it from its start. So a
write of vectors prunes it: past 2 × REMOVALS_KEPT rows, all but the newest REMOVALS_KEPT go,
and `meta` says up to which seq (`vector_removals_pruned`). A reader that has seen every removal
up to there is served from the log as before; one that had not (it last looked before the rows
it still needed were pruned, or it is new) is told instead every chunk id up to the highest
ever made that has no vector now (`_gone`): a superset of what it may hold wrongly, read in one
pass over the vectors' index, and correct whatever it missed (a chunk embedded again in the
meantime comes back with its new vector, which replaces its old row). A published copy has no
log at all (`clear_removals`, which publish calls): its readers are all new.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from metis_lite.records import contextualize
from metis_lite.store.core import StoreCore, one

if TYPE_CHECKING:  # imported by what computes with it: a search by words never needs NumPy
    import numpy as np

REMOVALS_KEPT = 1024
"""Rows of the removals log kept when it is pruned (the module says how): a reader that syncs
before this many vectors more are deleted (at every search of a served base) catches up from the
log; one further behind is told every chunk without a vector (a pass over the vectors' index:
milliseconds per 100,000 chunks)."""

PRUNED_KEY = "vector_removals_pruned"
"""The `meta` key of the highest seq pruned from the removals log (absent: none was)."""


Digested = tuple[int, "np.ndarray | bytes", bytes]
"""(chunk id, vector or its float32 blob, digest of what it was embedded from): put_vectors."""


def vector_blob(vector: np.ndarray) -> bytes:
    """float32 little-endian, the layout sqlite-vec's functions read."""
    import numpy as np

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

    def put_vectors(self, model: str, items: Iterable[tuple[int, np.ndarray] | Digested]) -> int:
        """Store vectors for chunks, replacing any earlier one; chunks removed meanwhile are
        skipped. An item may carry the digest of what its vector was embedded from (kept in
        `chunk_digests`: indexing/shared_vectors.py), its vector then a float32 blob already
        (one copied from a chunk with the same text) or an array."""
        written = 0
        with self._transaction():
            for chunk_id, vector, *digest in items:
                blob = vector if isinstance(vector, bytes) else vector_blob(vector)
                self.db.execute("DELETE FROM vectors WHERE chunk_id = ?", (chunk_id,))
                self.db.execute(
                    "INSERT INTO vectors (chunk_id, model, embedding)"
                    " SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?)",
                    (chunk_id, model, blob, chunk_id),
                )
                inserted = self.db.changes()
                if inserted and digest:
                    self.db.execute(
                        "INSERT INTO chunk_digests (chunk_id, digest) VALUES (?, ?)"
                        " ON CONFLICT (chunk_id) DO UPDATE SET digest = excluded.digest",
                        (chunk_id, digest[0]),
                    )
                written += inserted
            self._prune_removals()
        return written

    def drop_vectors(self, *, except_model: str | None = None) -> int:
        with self._transaction():
            if except_model is None:
                self.db.execute("DELETE FROM vectors")
            else:
                self.db.execute("DELETE FROM vectors WHERE model != ?", (except_model,))
            dropped = self.db.changes()
            self._prune_removals()
            return dropped

    def chunks_with_vector(self, model: str) -> int:
        return int(
            one(self.db.execute("SELECT count(*) FROM vectors WHERE model = ?", (model,)))[0]
        )

    def vectors_since(self, seq: int, model: str) -> tuple[np.ndarray, np.ndarray, int]:
        """(chunk ids, float32 blob bytes joined, last seq) of `model`'s vectors written after
        `seq`. One `b"".join` and one `np.frombuffer` by the caller: no per-row arrays (a
        100,000-chunk base loads in one copy)."""
        import numpy as np

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
        """(chunk ids whose vector went away after `seq`, the last seq now): from the log, or,
        when the log no longer reaches back to `seq`, every chunk id that has no vector now
        (the module says why that is enough)."""
        if seq < self.removals_pruned():
            return self._gone(), self.last_removal_seq()
        rows: list[Any] = self.db.execute(
            "SELECT seq, chunk_id FROM vector_removals WHERE seq > ? ORDER BY seq", (seq,)
        ).fetchall()
        if not rows:
            return [], seq
        return [r[1] for r in rows], int(rows[-1][0])

    def last_removal_seq(self) -> int:
        """The seq of the newest removal, pruned or not (0: none ever)."""
        last = one(self.db.execute("SELECT coalesce(max(seq), 0) FROM vector_removals"))[0]
        return max(int(last), self.removals_pruned())

    def removals_pruned(self) -> int:
        """The highest seq pruned from the removals log (0: none was)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (PRUNED_KEY,)).fetchone()
        return int(row[0]) if row else 0

    def removal_rows(self) -> int:
        """Rows the removals log holds now."""
        return int(one(self.db.execute("SELECT count(*) FROM vector_removals"))[0])

    def clear_removals(self) -> None:
        """Empty the log and forget it was pruned: for a new copy that no reader has read yet
        (a published one), whose readers all start from nothing."""
        with self._transaction():
            self.db.execute("DELETE FROM vector_removals")
            self.db.execute("DELETE FROM meta WHERE key = ?", (PRUNED_KEY,))

    def _prune_removals(self) -> None:
        """Inside a write: keep the newest REMOVALS_KEPT rows once the log holds twice that."""
        last = int(one(self.db.execute("SELECT coalesce(max(seq), 0) FROM vector_removals"))[0])
        pruned = self.removals_pruned()
        if last - pruned <= 2 * REMOVALS_KEPT:
            return
        cut = last - REMOVALS_KEPT
        self.db.execute("DELETE FROM vector_removals WHERE seq <= ?", (cut,))
        self.db.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (PRUNED_KEY, str(cut)),
        )

    def _gone(self) -> list[int]:
        """Every chunk id up to the highest ever given (chunks.id is AUTOINCREMENT: never
        reused) that has no vector now, ascending."""
        row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
        highest = int(row[0]) if row else 0
        if highest <= 0:
            return []
        import numpy as np

        kept = np.fromiter(
            (r[0] for r in self.db.execute("SELECT chunk_id FROM vectors")), dtype=np.int64
        )
        every = np.arange(1, highest + 1, dtype=np.int64)
        return [int(c) for c in np.setdiff1d(every, kept, assume_unique=True)]
