"""By meaning: exact cosine between the question and every chunk's vector, held in memory.

The vectors of the base's model are read into one float32 matrix by the first search by
meaning (one `b"".join`, one `np.frombuffer`; a base opened and searched by words only never
reads them, nor imports NumPy) and brought up to date with only what changed when another
connection writes: new rows appended, removed chunks masked, the matrix compacted when a
quarter of it is dead. Rows are L2-normalised, so a dot product is the cosine.

One cosine per chunk, the one that orders and the one shown: a float32 product over the whole
matrix is fast, but BLAS sums a row by blocks of rows, so two identical vectors in different rows
can get cosines a rounding apart (and tie-break by their place). The product only finds the
candidates: every row within ROUNDING of the n-th best, and each of them is then summed alone in
float64 (`exact_cosines`), the same sum `cosines` gives fusion, to the bit. The list is ordered
by those, ties by the lower chunk id.

A search may read its list deeper than it first did (fusion.deepened): the cosines of its last
question are kept until the next question or change of the matrix, so reading deeper costs a
partition of them, never a second pass over the matrix.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from metis_lite.records import Hit
from metis_lite.store import Store

if TYPE_CHECKING:  # imported where it computes: a search by words never imports NumPy
    import numpy as np

COMPACT_DEAD_FRACTION = 0.25
"""Compact the matrix when this share of its rows belongs to removed chunks."""

GROWTH = 1.5
"""Capacity grows by this factor, so appends are amortised O(1)."""

PARTITION_AHEAD = 4
"""A question's best rows are found PARTITION_AHEAD × as deep as asked, so the deeper reads
that fusion makes of the same question (twice as deep each time) are mostly a slice of them:
one partition of the cosines (~1 ms at 100,000 rows) for two reads."""

NORM_ROWS = 1024
"""Rows whose norms are summed at once (`_largest_norm`): a float64 block of 3 MB at 384
dimensions, reused from the allocator, where the whole matrix's at once (37 MB at 12,000 rows)
is fresh memory to fault in (~6 ms of CPU of a fresh process's first search)."""

ROUNDING = 2.0**-23
"""A float32 dot product of d terms lies within d × ROUNDING × |query| × |row| of the exact one
(twice float32's unit roundoff per term: whatever order BLAS sums in, with room for the float64
sum it is compared with). Rows whose product is further than twice that below the n-th best
cannot be among the n best by their exact cosine."""


class VectorIndex:
    """The base's vectors of one model as a matrix, and the exact top-n search over it.

    Made empty, of nothing but Python's objects: its arrays are made by the first sync that
    reads a vector (`_append`, under the lock), and every other reader of them looks at them
    only once `_size` or `_row_of` says they hold a row."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._lock = threading.Lock()
        self._matrix: np.ndarray  # (capacity, dimension) float32, made by the first _append
        self._ids: np.ndarray  # the chunk id of each row (int64)
        self._alive: np.ndarray  # whether each row is a chunk's vector now (bool)
        self._size = 0
        self._row_of: dict[int, int] = {}
        self._vector_seq = 0
        self._removal_seq = 0
        self._centroid: np.ndarray | None = None  # mean of the live rows (float64), made lazily
        self._version = 0  # changes with every change of the rows (the kept cosines' key)
        self._kept: tuple[bytes, int, np.ndarray | None, np.ndarray, np.ndarray | None] | None
        self._kept = None  # the last question's cosines: (query, version, allowed, scores, rows)
        self._kept_order: np.ndarray  # their best rows by product, best first (made by _scores)
        self._kept_finite = 0  # how many of the kept cosines are of live rows (finite)
        self._norm_max = 0.0  # the largest norm of a row ever held (ROUNDING's |row|)
        self._cosines_of: tuple[bytes, int] | None = None  # the question `cosines` answered
        self._cosines: dict[int, float] = {}  # and each chunk's cosine it computed, float64
        self.dimension: int | None = None

    @property
    def count(self) -> int:
        """Chunks that have a vector of this model."""
        return len(self._row_of)

    def sync(self, store: Store) -> None:
        """Bring the matrix up to date with the base as `store` sees it: masks first, then
        appends, read and applied under one hold of the lock, so two syncs never interleave
        (one could otherwise apply an older read after a newer one, and bring back a removed
        chunk's vector for good). Within a search's snapshot, the reads are of that snapshot;
        a sync never moves the matrix back to an older one (its seqs only grow)."""
        with self._lock, store.db:  # one read snapshot for removals and additions
            removed, removal_seq = store.removals_since(self._removal_seq)
            ids, blob, vector_seq = store.vectors_since(self._vector_seq, self.model)
            for chunk_id in removed:
                row = self._row_of.pop(chunk_id, None)
                if row is not None:
                    self._alive[row] = False
            if len(ids):
                self._append(ids, blob)
            self._removal_seq, self._vector_seq = removal_seq, vector_seq
            if removed or len(ids):
                self._centroid = None
                self._version += 1
            dead = self._size - len(self._row_of)
            if self._size and dead / self._size > COMPACT_DEAD_FRACTION:
                self._compact()

    def _append(self, ids: np.ndarray, blob: np.ndarray) -> None:
        import numpy as np

        dimension = blob.size // 4 // len(ids)
        if self.dimension is None:
            self.dimension = dimension
            self._matrix = np.empty((0, dimension), dtype=np.float32)
            self._ids = np.empty(0, dtype=np.int64)
            self._alive = np.empty(0, dtype=bool)
        vectors = blob.view("<f4").reshape(len(ids), dimension)
        self._norm_max = max(self._norm_max, _largest_norm(vectors))
        needed = self._size + len(ids)
        if self._size == 0 and vectors.dtype == np.float32:
            # The first read: the blob is the matrix (read-only, exactly full: the next append
            # grows a copy), not copied (~5 ms of CPU at 12,000 rows, its pages faulted in).
            row_of = dict(zip(ids.tolist(), range(needed), strict=True))
            if len(row_of) == needed:  # no chunk twice (as the base holds them)
                self._matrix, self._ids, self._row_of = vectors, ids, row_of
                self._alive = np.ones(needed, dtype=bool)
                self._size = needed
                return
        if needed > len(self._matrix):
            capacity = max(needed, int(len(self._matrix) * GROWTH), 1024)
            self._matrix = _grown(self._matrix, capacity, self._size)
            self._ids = np.resize(self._ids, capacity)
            self._alive = np.resize(self._alive, capacity)
        rows = slice(self._size, needed)
        self._matrix[rows] = vectors
        self._ids[rows] = ids
        self._alive[rows] = True
        for offset, chunk_id in enumerate(ids.tolist()):
            old = self._row_of.get(chunk_id)
            if old is not None:  # re-embedded without a removal seen yet
                self._alive[old] = False
            self._row_of[chunk_id] = self._size + offset
        self._size = needed

    def _compact(self) -> None:
        import numpy as np

        self._version += 1
        keep = np.flatnonzero(self._alive[: self._size])
        self._matrix = np.ascontiguousarray(self._matrix[keep])
        self._ids = self._ids[keep]
        self._alive = np.ones(len(keep), dtype=bool)
        self._size = len(keep)
        self._row_of = {chunk_id: row for row, chunk_id in enumerate(self._ids.tolist())}

    def search(self, query: np.ndarray, n: int, *, allowed: np.ndarray | None = None) -> list[Hit]:
        """The n chunks closest to `query` (cosine), best first, among `allowed` chunk ids if
        given: ordered by their exact cosines (`exact_cosines`), ties by the lower chunk id."""
        import numpy as np

        with self._lock:
            if self._size == 0 or n <= 0:
                return []
            query = np.asarray(query, dtype=np.float32)
            scores, rows = self._scores(query, allowed)
            if not len(scores):
                return []
            best, exact = self._best(scores, rows, query, n)
            chunk_ids = self._ids[best if rows is None else rows[best]]
            return [
                Hit(chunk_id=c, score=s, rank=rank)
                for rank, (c, s) in enumerate(
                    zip(chunk_ids.tolist(), exact.tolist(), strict=True), start=1
                )
            ]

    def _best(
        self, scores: np.ndarray, rows: np.ndarray | None, query: np.ndarray, n: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(the indexes into `scores` of the n best by exact cosine, best first, ties by chunk
        id; those cosines): the float32 product's best, and every row whose product is within
        twice ROUNDING's bound of the n-th of them, summed again one row at a time. The product's
        order is kept PARTITION_AHEAD × as deep as asked, so a deeper read of the same question
        is mostly a slice of it (the lock is held)."""
        import numpy as np

        n = min(n, self._kept_finite)
        if n <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        if len(self._kept_order) < n:
            order = top_n(scores, PARTITION_AHEAD * n)
            self._kept_order = order[np.isfinite(scores[order])]  # never a dead row, nor NaN
        kept = self._kept_order
        slack = len(query) * ROUNDING * float(np.linalg.norm(query)) * self._norm_max
        floor = scores[kept[n - 1]] - 2.0 * slack
        within = int(np.searchsorted(-scores[kept], -floor, side="right"))
        if within < len(kept) or len(kept) == self._kept_finite:
            pool = kept[:within]
        else:  # the kept order ends within the bound: every row near it counts
            pool = np.flatnonzero(scores >= floor)
        matrix_rows = pool if rows is None else rows[pool]
        exact = exact_cosines(self._matrix[matrix_rows], query)
        best = np.lexsort((self._ids[matrix_rows], -exact))[:n]
        return pool[best], exact[best]

    def _scores(
        self, query: np.ndarray, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(cosine of every row, or of the `allowed` chunks' rows; those rows), the same
        question's kept from its last read while the rows are unchanged (the lock is held)."""
        import numpy as np

        key = query.tobytes()
        kept = self._kept
        if kept is not None and kept[0] == key and kept[1] == self._version and kept[2] is allowed:
            return kept[3], kept[4]
        rows: np.ndarray | None = None
        if allowed is None:
            scores = self._matrix[: self._size] @ query
            if len(self._row_of) < self._size:
                scores[~self._alive[: self._size]] = -np.inf
        else:
            rows = np.fromiter(
                (r for r in map(self._row_of.get, allowed.tolist()) if r is not None),
                dtype=np.int64,
            )
            scores = self._matrix[rows] @ query if len(rows) else np.empty(0, np.float32)
        self._kept = (key, self._version, allowed, scores, rows)
        self._kept_order = np.empty(0, dtype=np.int64)
        self._kept_finite = int(np.count_nonzero(np.isfinite(scores)))
        return scores, rows

    def cosines(self, query: np.ndarray, chunk_ids: Sequence[int]) -> dict[int, float]:
        """The cosine of each of `chunk_ids` that has a vector (`exact_cosines`): a chunk's
        cosine is the same to the last bit whatever the other chunks, and the one `search`
        lists it with (fusion scores a chunk alike in any window, and in a base alone or among
        several)."""
        import numpy as np

        with self._lock:
            key = (np.asarray(query, dtype=np.float32).tobytes(), self._version)
            if self._cosines_of != key:  # those of the last question are kept, as its scores
                self._cosines_of, self._cosines = key, {}
            known = self._cosines
            found = [
                (c, r)
                for c in chunk_ids
                if c not in known and (r := self._row_of.get(c)) is not None
            ]
            if found:
                rows = self._matrix[[r for _, r in found]]
                values = exact_cosines(rows, np.asarray(query, dtype=np.float32))
                known.update(zip((c for c, _ in found), values.tolist(), strict=True))
            return {c: known[c] for c in chunk_ids if c in known}

    def mean_cosine(self, query: np.ndarray) -> float:
        """The question's mean cosine over every chunk with a vector (its cosine with their
        mean vector): what a chunk unrelated to the question scores in this base; 0.0 when
        no chunk has one."""
        import numpy as np

        with self._lock:
            if not self._row_of:
                return 0.0
            if self._centroid is None:
                used = self._matrix[: self._size]
                total = used.sum(axis=0, dtype=np.float64)
                dead = ~self._alive[: self._size]
                if dead.any():
                    total -= used[dead].sum(axis=0, dtype=np.float64)
                self._centroid = total / len(self._row_of)
            return float(self._centroid @ np.asarray(query, dtype=np.float64))


def exact_cosines(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each float32 row's dot product with the float32 `query`, in float64, each row summed on
    its own (NumPy's pairwise sum along one row depends on that row alone): identical vectors
    get identical cosines wherever they lie in the matrix, and a chunk the same cosine in the
    list by meaning as in fusion's look-ups."""
    import numpy as np

    return np.multiply(rows, query.astype(np.float64), dtype=np.float64).sum(axis=1)


def top_n(scores: np.ndarray, n: int) -> np.ndarray:
    """Indexes of the n highest scores, highest first (argpartition, then sort only those)."""
    import numpy as np

    if n >= len(scores):
        return np.argsort(-scores, kind="stable")
    part = np.argpartition(-scores, n - 1)[:n]
    return part[np.argsort(-scores[part], kind="stable")]


def _largest_norm(vectors: np.ndarray) -> float:
    """The largest L2 norm of the rows, each summed in float64: NORM_ROWS rows at a time, the
    same sums (a row's sum depends on that row alone), the same largest."""
    import numpy as np

    blocks = range(0, len(vectors), NORM_ROWS)
    return float(
        np.max(
            [
                np.sqrt(np.square(vectors[a : a + NORM_ROWS], dtype=np.float64).sum(axis=1)).max()
                for a in blocks
            ]
        )
    )


def _grown(matrix: np.ndarray, capacity: int, used: int) -> np.ndarray:
    import numpy as np

    grown = np.empty((capacity, matrix.shape[1]), dtype=np.float32)
    grown[:used] = matrix[:used]
    return grown
