"""One connection to a base and its transactions: what every part of the Store stands on.

A write is one transaction that takes the write lock before it reads (`writing`), so writers
in several processes take turns and none acts on what another's commit made stale; nested,
it is a savepoint of the one open. The parts of the Store (schema, documents, vectors, facts,
runs) are mixins of `StoreCore`, each in its own module, joined in store/__init__.py.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw

from metis_lite.errors import BaseBusy, BaseDamaged, StoreError
from metis_lite.store import connection as policy

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
    _upgrade_due: bool  # an older base: its first write brings it up to date (_upgrade)
    _wal_files: tuple[tuple[int, int], ...] | None  # the -wal and -shm it opened (_check_wal)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> StoreCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: every read inside sees the base as it was when the block
        began, whatever other connections commit meanwhile (WAL readers never wait for a
        writer). Inside an open transaction it is that transaction's."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN DEFERRED")
        try:
            one(self.db.execute("SELECT count(*) FROM sqlite_schema"))  # the snapshot starts here
            yield
        except BaseException:
            self._rollback()
            raise
        if self.db.in_transaction:
            try:
                self.db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    @contextmanager
    def writing(self, *, wait: bool = True) -> Iterator[None]:
        """One write transaction that takes the write lock before it reads anything (BEGIN
        IMMEDIATE), so no other writer's commit can make what it read stale; waits for another
        writer up to the busy timeout (then BASE_BUSY). Inside an open transaction it is a
        savepoint of it. Without `wait`, BASE_BUSY at once when another connection holds the
        write lock. A full disk or a read-only base is said as such."""
        try:
            if self._depth or self.db.in_transaction:
                self._depth += 1
                try:
                    with self.db:
                        yield
                finally:
                    self._depth -= 1
                return
            self._begin() if wait else self._begin_now()
            self._depth = 1
            upgraded = self._upgrade_due
            try:
                self._check_wal()
                if upgraded:
                    self._upgrade()
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
            if upgraded:
                self._upgrade_due = False
        except apsw.Error as exc:
            failure = policy.write_failure(exc, self.path)
            if failure is None:
                raise
            raise failure from exc

    _transaction = writing

    def _begin(self) -> None:
        deadline = time.monotonic() + policy.BUSY_TIMEOUT_MS / 1000
        self.db.set_busy_timeout(
            policy.BUSY_TIMEOUT_MS
        )  # the policy now, on a long-open connection
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

    def _begin_now(self) -> None:
        """BEGIN IMMEDIATE without waiting: BASE_BUSY when the write lock is taken."""
        self.db.set_busy_timeout(0)
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except apsw.BusyError as exc:
            raise BaseBusy(f"{self.path}: another connection is writing") from exc
        finally:
            self.db.set_busy_timeout(policy.BUSY_TIMEOUT_MS)

    def _remember_wal(self) -> None:
        """Record the -wal and -shm this connection opened (a base in WAL mode, once read), or
        None (not in WAL mode, or nothing to write: no check)."""
        self._wal_files = None if self.db.readonly("main") else self._wal_now()

    def _wal_now(self) -> tuple[tuple[int, int], ...] | None:
        """(device, inode) of the files now named BASE-wal and BASE-shm; None if one is gone."""
        found = []
        for name in (self.db.filename_wal, f"{self.db.filename}-shm"):
            try:
                state = os.stat(name)
            except FileNotFoundError:
                return None
            found.append((state.st_dev, state.st_ino))
        return tuple(found)

    def _check_wal(self) -> None:
        """BASE_DAMAGED when the -wal or -shm this connection opened is no longer the file of
        that name (deleted by hand, or by a client that found no lock of this process): what
        it writes would then go where no other connection reads it, and another process's
        commits could be overwritten. SQLite never removes them while a connection has the
        base open, so a change is never SQLite's own doing."""
        if self._wal_files is None or self._wal_now() == self._wal_files:
            return
        raise BaseDamaged(
            f"{self.path}: its -wal or -shm was deleted or replaced while this process had the "
            "base open, so nothing more is written here (other processes would not see it, and "
            "what they write could be lost). Restart the processes that have it open: each "
            "folds the WAL it holds into the base when it closes"
        )

    def _forget_wal(self) -> None:
        """Out of WAL mode (SQLite removed its -wal and -shm itself): nothing to check."""
        self._wal_files = None

    def _upgrade(self) -> None:
        """What an older base lacks, written inside its first write transaction (schema.py)."""

    def _rollback(self) -> None:
        """Roll back what is open; SQLite may have rolled back already (SQLITE_FULL)."""
        if self.db.in_transaction:
            try:
                self.db.execute("ROLLBACK")
            except apsw.Error:
                pass

    def leave_wal(self) -> bool:
        """Switch the base out of WAL mode, which SQLite does (deleting the -wal and -shm) only
        while this is the one connection open to it; False when another one is."""
        try:
            mode = self.db.execute("PRAGMA journal_mode = DELETE").fetchone()
        except apsw.Error:
            return False
        left = mode is not None and str(mode[0]).lower() == "delete"
        if left:
            self._forget_wal()
        return left
