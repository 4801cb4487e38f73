"""One connection to a base and its transactions: what every part of the Store stands on.

A write is one transaction that takes the write lock before it reads (`writing`), so writers
in several processes take turns and none acts on what another's commit made stale; nested,
it is a savepoint of the one open. The parts of the Store (schema, documents, vectors, facts,
runs) are mixins of `StoreCore`, each in its own module, joined in store/__init__.py.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw

from metis_lite import connection as policy
from metis_lite.errors import BaseBusy, StoreError

BUSY_RETRY_S = (0.005, 0.05)
"""A write refused at once (a stale snapshot, a WAL being recovered: SQLite calls no busy
handler then) is tried again after a random pause in this range, until the busy timeout
(connection.BUSY_TIMEOUT_MS)."""


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def one(cursor: apsw.Cursor) -> Any:
    """The row a query always returns (an aggregate's, a PRAGMA's); StoreError if none came."""
    row = cursor.fetchone()
    if row is None:
        raise StoreError("a query that always returns a row returned none")
    return row


class StoreCore:
    """The connection, its write transactions and its read snapshots."""

    path: Path
    db: apsw.Connection
    _depth: int  # write transactions open on this connection (writing())

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> StoreCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """One write transaction that takes the write lock before it reads anything (BEGIN
        IMMEDIATE), so no other writer's commit can make what it read stale; waits for another
        writer up to the busy timeout (then BASE_BUSY). Inside an open transaction it is a
        savepoint of it. A full disk or a read-only base is said as such."""
        try:
            if self._depth or self.db.in_transaction:
                self._depth += 1
                try:
                    with self.db:
                        yield
                finally:
                    self._depth -= 1
                return
            self._begin()
            self._depth = 1
            try:
                yield
            except BaseException:
                self._rollback()
                raise
            finally:
                self._depth = 0
            try:
                self.db.execute("COMMIT")
            except apsw.Error:
                self._rollback()
                raise
        except apsw.Error as exc:
            failure = policy.write_failure(exc, self.path)
            if failure is None:
                raise
            raise failure from exc

    _transaction = writing

    def _begin(self) -> None:
        deadline = time.monotonic() + policy.BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self.db.execute("BEGIN IMMEDIATE")  # the busy timeout applies here
                return
            except apsw.BusyError as exc:
                if time.monotonic() >= deadline:
                    raise BaseBusy(
                        f"{self.path}: another process kept the base locked for writing for "
                        f"{policy.BUSY_TIMEOUT_MS / 1000:g} s; nothing was written, try again"
                    ) from exc
                time.sleep(random.uniform(*BUSY_RETRY_S))

    def _rollback(self) -> None:
        """Roll back what is open; SQLite may have rolled back already (SQLITE_FULL)."""
        if self.db.in_transaction:
            try:
                self.db.execute("ROLLBACK")
            except apsw.Error:
                pass
