"""A base's models and its count of searches: what a Base holds besides its connections.

- BaseModels: the embedding model and the reranker a base's spec names, made when first needed
  and shared by every search and index run of the Base (an embedded model is loaded once per
  Base); a newer copy of a served base takes them over rather than load them again.
- SearchCount: searches are counted per day into the base (never what was asked), written at
  most every COUNT_FLUSH_S and only when the write lock is free at once, so a search never
  waits on a writer; a count that could not be written waits for the next flush. A flush
  that is due at once (the base's status, its close) never waits either: at close, a count
  the write lock does not let in at once is dropped, since nothing will flush it later (a
  count of searches is not worth making `metis-lite search` wait on a writer for).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from metis_lite.models import registry
from metis_lite.models.base import Embedder, Reranker
from metis_lite.models.prefixes import prefixes_for
from metis_lite.store import Store
from metis_lite.store.spec import BaseSpec

COUNT_FLUSH_S = 5.0
"""Search counts are written at most this often (and when the base closes), not per search;
a flush that finds another connection writing keeps its count for the next one."""


class BaseModels:
    """The models of one Base, each made on first use; `workers`: the cores an embedded model
    runs on (None: every core the process may run on)."""

    def __init__(self, workers: int | None) -> None:
        self.workers = workers
        self.lock = threading.Lock()
        self.embedder: Embedder | None = None
        self.reranker: Reranker | None = None
        self._handed: list[object] = []  # models a newer copy took over (take_from)

    def embedder_of(self, spec: BaseSpec) -> Embedder:
        with self.lock:
            if self.embedder is None:
                self.embedder = new_embedder(spec, self.workers)
            return self.embedder

    def check_embedder(self, spec: BaseSpec) -> None:
        """Raise the ModelError that making the embedding model would raise when it is not
        there (not installed: how to install it), without loading it (registry.check_embedder):
        what status and a search without vectors need to know, for a few file checks."""
        with self.lock:
            if self.embedder is not None:
                return
        registry.check_embedder(spec.embedding)

    def reranker_of(self, spec: BaseSpec) -> Reranker | None:
        with self.lock:
            if self.reranker is None and spec.reranker:
                self.reranker = registry.reranker_from_spec(spec.reranker, workers=self.workers)
            return self.reranker

    def forget(self) -> None:
        """Close both models: the base's spec changed, the next use makes them again."""
        with self.lock:
            for model in (self.embedder, self.reranker):
                if model is not None:
                    model.close()
            self.embedder = self.reranker = None

    def close(self) -> None:
        """Close the models this Base still owns (not those a newer copy took over)."""
        for model in (self.embedder, self.reranker):
            if model is not None and model not in self._handed:
                model.close()

    def take_from(self, older: BaseModels, mine: BaseSpec, theirs: BaseSpec) -> None:
        """Use `older`'s models where `mine` names the same ones as `theirs` (a newer copy of
        the base `older` serves), so a switch loads none again; `older` leaves them open."""
        with older.lock, self.lock:
            same = (mine.embedding, mine.dimension) == (theirs.embedding, theirs.dimension)
            if same and older.embedder is not None and self.embedder is None:
                self.embedder = older.embedder
                older._handed.append(older.embedder)
            if mine.reranker == theirs.reranker and older.reranker is not None:
                if self.reranker is None:
                    self.reranker = older.reranker
                    older._handed.append(older.reranker)


def new_embedder(spec: BaseSpec, workers: int | None) -> Embedder:
    """The base's embedding model; one that takes a `dimension` (an HTTP one) is told the
    dimension the base's vectors have, so one wrong answer is refused rather than learnt (and
    every right one after it refused in turn)."""
    return registry.embedder_from_spec(spec.embedding, workers=workers, dimension=spec.dimension)


def prefixes(spec: BaseSpec) -> tuple[str, str]:
    """(query prefix, document prefix) of the base's embedding model (models/prefixes.py)."""
    embedding = spec.embedding
    return prefixes_for(
        embedding.get("model") or spec.model_label,
        query_prefix=embedding.get("query_prefix"),
        document_prefix=embedding.get("document_prefix"),
    )


class SearchCount:
    """Searches counted since the last flush (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = 0
        self._last_flush = time.monotonic()

    def add(self) -> None:
        with self._lock:
            self._pending += 1

    @property
    def pending(self) -> int:
        """Searches counted and not yet written (a status adds them to today's)."""
        with self._lock:
            return self._pending

    def flush(
        self,
        store: Store | None,
        borrow: Callable[[], AbstractContextManager[Store]],
        *,
        force: bool = False,
    ) -> None:
        """Write the searches counted since the last flush, on `store` (or one borrowed), only
        when no other connection is writing (never waiting for it): after a search once
        COUNT_FLUSH_S has passed, and at once when `force`d (status, close). What could not be
        written is kept for the next flush (at close there is none: it is dropped).

        A write that fails for any other reason (a disk I/O error, a -wal deleted under the
        process) raises nothing either: the flush runs after a search whose answer is already
        made, and a count is not worth losing that answer for. The count is kept, as when
        another connection holds the write lock, and the failure is met again, and said, by
        the next write that matters (a fact, an indexing run)."""
        with self._lock:
            due = force or time.monotonic() - self._last_flush >= COUNT_FLUSH_S
            if not due or not self._pending:
                return
            pending, self._pending = self._pending, 0
            self._last_flush = time.monotonic()
        try:
            if store is not None:
                written = store.count_searches(pending)
            else:
                with borrow() as borrowed:
                    written = borrowed.count_searches(pending)
        except Exception:  # never the search's failure: the docstring says why
            written = False
        if not written:
            with self._lock:
                self._pending += pending
