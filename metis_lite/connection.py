"""A base file's connection policy: how every connection to it is opened, what a failed write
means, and the lock that lets one indexer run at a time.

One policy for every connection (apsw bestpractice): WAL mode, a busy timeout, foreign keys,
the FTS5 tokenizer registered. A file is checked to be SQLite before SQLite opens it, and one
that is damaged, read-only or another program's database is said as such (errors.py).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from urllib.parse import quote

import apsw

from metis_lite import tokenizer
from metis_lite.errors import BaseBusy, BaseReadOnly, DiskFull, NotABase, StoreError

BUSY_TIMEOUT_MS = 5_000
"""How long a statement waits for another connection's write to end before failing; a write
transaction that cannot take the write lock within it fails as BASE_BUSY."""

SQLITE_MAGIC = b"SQLite format 3\x00"


def connect(path: str | os.PathLike[str], *, readonly: bool = False) -> apsw.Connection:
    """Open a connection with the base's policy (apsw bestpractice: WAL, busy timeout, FKs).

    The schema is read first, so a damaged file says so. Only a base or a new file is put in
    WAL mode, never another program's database. A base where nothing can be written (a
    read-only file system, file or folder) is opened read-only, and immutable when no -wal
    lies beside it (SQLite could not create the -shm it needs otherwise): it is still searched,
    and writing to it fails as BASE_READ_ONLY.
    """
    unwritable = not readonly and _unwritable(Path(path))
    readonly = readonly or unwritable
    name, flags = str(path), apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    if readonly:
        flags = apsw.SQLITE_OPEN_READONLY
        if unwritable and not Path(f"{path}-wal").exists():
            name = f"file:{quote(str(Path(path).resolve()))}?immutable=1"
            flags |= apsw.SQLITE_OPEN_URI
    try:
        connection = apsw.Connection(name, flags=flags)
        connection.set_busy_timeout(BUSY_TIMEOUT_MS)
        row = connection.execute(
            "SELECT count(*), count(*) FILTER (WHERE name = 'meta') FROM sqlite_schema"
        ).fetchone()
        assert row is not None  # count(*) always returns a row
        objects, is_base = row
        tokenizer.register(connection)
        connection.execute("PRAGMA foreign_keys = ON")
        if not readonly and (is_base or not objects):
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = NORMAL")
    except apsw.NotADBError as exc:
        raise NotABase(f"{path} is not a metis-lite base (not an SQLite file)") from exc
    except apsw.CorruptError as exc:
        raise NotABase(f"{path} is damaged ({exc}): it cannot be read as a base") from exc
    except apsw.ReadOnlyError as exc:
        raise BaseReadOnly(f"{path} is read-only: {exc}") from exc
    except apsw.CantOpenError as exc:
        if unwritable:
            raise BaseReadOnly(
                f"{path} is read-only and its -wal holds commits not yet in the file: open it "
                "once where it can be written (or copy it with metis-lite copy)"
            ) from exc
        raise StoreError(f"cannot open {path}: {exc}") from exc
    return connection


def _unwritable(path: Path) -> bool:
    """True for an existing base SQLite could not write: the file, or the folder that must
    hold its -wal and -shm, is read-only (a read-only mount says so even to root)."""
    return path.is_file() and not (
        os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
    )


def write_failure(exc: apsw.Error, path: Path) -> StoreError | None:
    """The StoreError a failed write means, or None. SQLite rolls a transaction back itself
    on SQLITE_FULL, and apsw's own rollback then fails: the cause is in the chain."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, apsw.FullError):
            return DiskFull(
                f"{path}: the disk is full (or the base reached its size limit): the unfinished "
                "write was not kept and what was written before is whole; free some space and "
                "run again"
            )
        if isinstance(cause, apsw.ReadOnlyError):
            return BaseReadOnly(f"{path} is read-only: it can be searched, not written")
        cause = cause.__context__
    return None


def check_is_sqlite(path: Path) -> None:
    if path.is_dir():
        raise NotABase(f"{path} is a folder, not a base file")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror}") from exc
    if head and head != SQLITE_MAGIC:
        raise NotABase(f"{path} is not a metis-lite base (not an SQLite file)")


class IndexerLock:
    """One indexer at a time per base: an advisory lock on BASE.lock, released by the OS even
    when the indexer is killed. (Not on the base file itself: closing any descriptor of a
    database file drops SQLite's POSIX locks held by the process.)"""

    def __init__(self, base_path: Path) -> None:
        self.path = Path(str(base_path) + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            base = self.path.with_suffix("")
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise BaseReadOnly(f"{base} is read-only: it can be searched, not indexed") from exc
            raise StoreError(f"cannot lock {base} for indexing: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BaseBusy(
                f"{self.path.with_suffix('')} is being indexed by another process; "
                "searches still work, try indexing again when it ends"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def held_elsewhere(self) -> bool:
        """True while another process indexes this base (the service's Indexing state)."""
        if not self.path.exists():
            return False
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def __enter__(self) -> IndexerLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
