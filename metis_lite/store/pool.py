"""A bounded pool of Stores of one base: lent to one borrower at a time, kept open for the next.

An apsw connection serves one thread at a time, so a base read by many threads needs several;
the pool keeps their number bounded whatever the threads (a caller that makes fresh threads
for each search reuses the same few connections, rather than leaving one open per thread it
ever had). A borrower past the bound waits for a connection to come back.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from metis_lite.errors import StoreError
from metis_lite.store import Store


class StorePool:
    """Up to `size` Stores of the base at `path`, each opened by `opener` (by default a plain
    Store of the path; a read-only Base opens only connections to the one file it serves)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        size: int,
        opener: Callable[[], Store] | None = None,
    ) -> None:
        self.path = Path(path)
        self.size = size
        self._opener = opener or (lambda: Store(self.path))
        self._idle: list[Store] = []
        self._open = 0
        self._closed = False
        self._changed = threading.Condition()

    @property
    def open_connections(self) -> int:
        with self._changed:
            return self._open

    def adopt(self, store: Store) -> None:
        """Keep an already open Store (the one that made or checked the base) as idle."""
        with self._changed:
            self._open += 1
            self._idle.append(store)
            self._changed.notify()

    @contextmanager
    def borrow(self) -> Iterator[Store]:
        """A Store for this borrower alone until the block ends (then back to the pool)."""
        store = self._take()
        try:
            yield store
        finally:
            self._give(store)

    def _take(self) -> Store:
        with self._changed:
            while True:
                if self._closed:
                    raise StoreError(f"{self.path} was closed")
                if self._idle:
                    return self._idle.pop()  # the most recently used: its caches are warm
                if self._open < self.size:
                    self._open += 1
                    break
                self._changed.wait()
        try:
            return self._opener()
        except BaseException:
            with self._changed:
                self._open -= 1
                self._changed.notify()
            raise

    def _give(self, store: Store) -> None:
        with self._changed:
            if not self._closed and not store.db.in_transaction:
                self._idle.append(store)
                self._changed.notify()
                return
            self._open -= 1
            self._changed.notify()
        store.close()  # the pool was closed, or a transaction was left open: never lent again

    def close(self) -> None:
        """Close the idle Stores now, and each borrowed one when it comes back."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._changed.notify_all()
        for store in idle:
            store.close()


class ThreadStore:
    """Holds one thread's Store (in a Base's threading.local): when the thread ends, the holder
    goes and its connection is closed with it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        weakref.finalize(self, store.close)
