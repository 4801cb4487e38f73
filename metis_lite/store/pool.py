"""A bounded pool of Stores of one base: lent to one borrower at a time, kept open for the next.

An apsw connection serves one thread at a time, so a base read by many threads needs several;
the pool keeps their number bounded whatever the threads (a caller that makes fresh threads
for each search reuses the same few connections, rather than leaving one open per thread it
ever had). A borrower past the bound waits for a connection to come back.

Every pool of the process also shares one budget of file descriptors (`Budget`): a connection
costs two (the base file and its -wal), and the process may open only RLIMIT_NOFILE of them.
Of FD_SHARE of that limit, each base first gets FDS_PER_BASE for what it holds outside its pool
(its words index's own connection, its -shm, …); what is left is the pools', shared evenly. So a
service of a few bases keeps up to `size` (16) connections of each open, and one of 200 bases
under `ulimit -n 1024` keeps none idle (each search opens one and closes it after: ~3 ms)
rather than run out of descriptors and fail every request. Past the budget a pool still opens
one connection when it has none open, or when the thread asking already holds one of it (a
borrow inside a borrow must never wait on itself); otherwise its borrowers wait for one of its
own to come back. A pool of a read-only copy keeps one connection open whatever the budget:
once its path names a newer copy, it can open no other (publish.reopen), and the requests
still reading it need one.
"""

from __future__ import annotations

import os
import resource
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from metis_lite.errors import StoreError
from metis_lite.store import Store

FD_SHARE = 0.75
"""The share of the process's descriptor limit that the bases' connections may use; the rest
is for the service's sockets, the files it reads, its models and Python itself."""

FDS_PER_CONNECTION = 2
"""Descriptors of one connection to a base in WAL mode: the file and its -wal (a published copy
read immutable needs one: the budget errs on the safe side)."""

FDS_PER_BASE = 4
"""Descriptors each open base holds outside its pool: its words index's connection (two), the
-shm every connection of the process shares, and the descriptor of a closed connection that
SQLite keeps open while another connection holds a lock on the file (closing it would drop
that lock), for the next connection to reuse."""

UNLIMITED_FDS = 1 << 20
"""What an unlimited RLIMIT_NOFILE counts as."""


class Budget:
    """The pools of this process and the connections they hold in all (the module says how
    they are shared)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pools: weakref.WeakSet[StorePool] = weakref.WeakSet()
        self.open = 0

    def limit(self) -> int:
        """Connections every pool together may keep open now (at least one)."""
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY or soft > UNLIMITED_FDS:
            soft = UNLIMITED_FDS
        spare = int(soft * FD_SHARE) - len(self.pools) * FDS_PER_BASE
        return max(1, spare // FDS_PER_CONNECTION)

    def share(self) -> int:
        """Connections one pool may keep open and idle (0 when the bases are many)."""
        with self.lock:
            return self.limit() // max(1, len(self.pools))

    def has_room(self) -> bool:
        with self.lock:
            return self.open < self.limit()

    def count(self, change: int) -> None:
        with self.lock:
            self.open += change


BUDGET = Budget()
"""The one budget of this process (file descriptors are the process's)."""


def connections_to_open(asked: int) -> int:
    """How many of `asked` connections a base opening now should open at once: its pool's
    share of the budget, and one more for its words index (at least one of each)."""
    return max(2, min(asked, BUDGET.share() + 1))


class StorePool:
    """Up to `size` Stores of the base at `path`, each opened by `opener` (by default a plain
    Store of the path; a read-only Base opens only connections to the one file it serves)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        size: int,
        opener: Callable[[], Store] | None = None,
        budget: Budget = BUDGET,
    ) -> None:
        self.path = Path(path)
        self.size = size
        self._opener = opener or (lambda: Store(self.path))
        self._budget = budget
        self._idle: list[Store] = []
        self._open = 0
        self._waiting = 0
        self._keep_one = False
        self._adopted: set[int] = set()  # the first adopted Store's id, until it is lent
        self._adopted_any = False
        self._holders: Counter[int] = Counter()  # thread id → Stores of this pool it holds
        self._closed = False
        self._changed = threading.Condition()
        with budget.lock:
            budget.pools.add(self)
            others = [pool for pool in budget.pools if pool is not self]
        for pool in others:  # one more pool: every other one's share shrinks
            pool._trim()

    @property
    def open_connections(self) -> int:
        with self._changed:
            return self._open

    def adopt(self, store: Store) -> None:
        """Keep an already open Store as idle; past the pool's share, it is closed when the pool
        is trimmed, except the first adopted, which its caller made or checked the base with
        and may still read from: that one only once it comes back from a borrower. A Store opened read-only marks the pool as one that keeps a connection
        whatever the budget (the module says why)."""
        with self._changed:
            if store.db.readonly("main"):
                self._keep_one = True
            self._open += 1
            self._idle.append(store)
            if not self._adopted_any:
                self._adopted_any = True
                self._adopted.add(id(store))
            self._changed.notify()
        self._budget.count(+1)

    @contextmanager
    def borrow(self) -> Iterator[Store]:
        """A Store for this borrower alone until the block ends (then back to the pool)."""
        store = self._take()
        me = threading.get_ident()
        with self._changed:
            self._holders[me] += 1
        try:
            yield store
        finally:
            with self._changed:
                self._holders[me] -= 1
                if not self._holders[me]:
                    del self._holders[me]
            self._give(store)

    def _take(self) -> Store:
        while True:
            with self._changed:
                idle = self._reserve()
                if idle is not None:
                    return idle
            try:
                return self._opener()
            except StoreError:  # a read-only copy whose path names a newer one opens no more
                with self._changed:
                    self._unreserve()
                    if not self._keep_one or self._open == 0 or self._holds():
                        raise  # a live base's error is its own; or nothing will come back
                    self._wait()
            except BaseException:
                with self._changed:
                    self._unreserve()
                raise

    def _reserve(self) -> Store | None:
        """An idle Store (the most recently used: its caches are warm), or None once a new one
        may be opened and is counted; waits until either (its Condition held)."""
        while True:
            if self._closed:
                raise StoreError(f"{self.path} was closed")
            if self._idle:
                store = self._idle.pop()
                self._adopted.discard(id(store))
                return store
            if self._open < self.size and (
                self._open == 0 or self._holds() or self._budget.has_room()
            ):
                self._open += 1
                self._budget.count(+1)
                return None
            self._wait()

    def _wait(self) -> None:
        """Wait for a Store of this pool to come back (its Condition held)."""
        self._waiting += 1
        try:
            self._changed.wait()
        finally:
            self._waiting -= 1

    def _unreserve(self) -> None:
        self._open -= 1
        self._budget.count(-1)
        self._changed.notify()

    def _holds(self) -> bool:
        """Whether the calling thread holds a Store of this pool (a borrow inside a borrow)."""
        return self._holders[threading.get_ident()] > 0

    def _keep(self) -> int:
        """Connections this pool keeps open when they are not lent: its share of the budget,
        at most `size`, at least one for a read-only copy."""
        share = min(self.size, self._budget.share())
        return max(share, 1) if self._keep_one else share

    def _give(self, store: Store) -> None:
        with self._changed:
            keep = not self._closed and not store.db.in_transaction
            if keep and (self._waiting or self._open <= self._keep()):
                self._idle.append(store)
                self._changed.notify()
                return
            self._unreserve()
        store.close()  # past its share, closed, or a transaction left open: never lent again

    def _trim(self) -> None:
        """Close the idle Stores past this pool's share of the budget, the least recently used
        first (not the first adopted before it is lent: adopt says why)."""
        with self._changed:
            extra = max(0, self._open - self._keep())
            closing = [s for s in self._idle if id(s) not in self._adopted][:extra]
            self._idle = [s for s in self._idle if all(s is not c for c in closing)]
            for _ in closing:
                self._unreserve()
        for store in closing:
            store.close()

    def close(self) -> None:
        """Close the idle Stores now, and each borrowed one when it comes back."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            self._adopted.clear()
            self._open -= len(idle)
            self._changed.notify_all()
        self._budget.count(-len(idle))
        with self._budget.lock:
            self._budget.pools.discard(self)
        for store in idle:
            store.close()


class ThreadStore:
    """Holds one thread's Store (in a Base's threading.local): when the thread ends, the holder
    goes and its connection is closed with it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        weakref.finalize(self, store.close)
