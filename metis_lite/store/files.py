"""Opening a file of a source folder so that what is read is what was checked.

A symlink is followed only when its target lies inside the folder, anything else is opened with
O_NOFOLLOW, never waiting on a FIFO (O_NONBLOCK), and the opened descriptor itself must be a
regular file whose real path lies inside the folder: a file swapped for a link, or a folder for
a link, between the check and the open is refused. The indexer reads documents through it
(ingest.py), and so does the service when it hands a cited document back (documents.py).

A database this process has open with SQLite (its file, -wal, -shm or journal, whatever the name
or link that leads to it) is never opened here: closing any other descriptor of a file drops
every POSIX lock the process holds on it, SQLite's included, and another client (the `sqlite3`
shell) may then checkpoint and delete the -wal under the process's own connections. Such a
file is told by its device and inode, and on Linux before anything opens it for reading: the
entry is opened with O_PATH (a descriptor that reads nothing and whose closing drops no lock),
checked through fstat, and only then opened for reading through /proc/self/fd, which opens the
very file checked. connection.py records each database it opens, for as long as its
connection lives (`hold_database`).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

READ_BLOCK_BYTES = 1 << 20
"""A file is read in blocks of 1 MiB from its one open descriptor."""

OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
"""O_NONBLOCK: opening a FIFO (or a device) must never wait; it is refused once opened."""

FILE_TYPES = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


SQLITE_FILES = ("", "-wal", "-shm", "-journal")
"""A database's own files, by the suffix SQLite adds to its name."""

O_PATH = getattr(os, "O_PATH", 0)
"""Linux's O_PATH: a descriptor of the entry itself, to fstat it before reading it (0 elsewhere,
where a stat of the path is the check, just before the open)."""

PROC_FD = "/proc/self/fd"
_HAS_PROC_FD = os.path.isdir(PROC_FD)

IS_A_DATABASE = (
    "is the file of a base this process has open (or its -wal, -shm or journal), which only "
    "SQLite opens"
)

_databases: dict[str, int] = {}
"""The database files this process has open with SQLite, by name: how many connections."""
_databases_lock = threading.Lock()

_released: list[tuple[str, ...]] = []
"""Names released and not yet taken off `_databases`. A release is called by a connection's
finalizer, which the garbage collector runs wherever this thread allocates, even while it holds
`_databases_lock` (inside another release, a hold, a look): so a release never waits for the
lock. It appends here (atomic) and applies the list only if it gets the lock at once; whoever
holds the lock applies it before letting go, and every reader applies it first."""


@contextmanager
def _holding() -> Iterator[None]:
    """`_databases_lock`, held with every release made so far applied, on entry and on exit."""
    with _databases_lock:
        _apply_released()
        try:
            yield
        finally:
            _apply_released()


def _apply_released() -> None:
    """Take off `_databases` the names released (`_databases_lock` held)."""
    while _released:
        for name in _released.pop():
            if _databases.get(name, 0) > 1:
                _databases[name] -= 1
            else:
                _databases.pop(name, None)


def hold_database(path: str | os.PathLike[str]) -> Callable[[], None]:
    """Record a database file this process opens with SQLite (connection.connect, before the
    open), so that no source file that is it, or its -wal, -shm or journal, is ever opened;
    returns what releases it once its connection is gone (once, whatever the calls, from any
    thread or from the garbage collector: it never waits, see `_released`)."""
    names = tuple({os.path.abspath(path), os.path.realpath(path)})
    with _holding():
        for name in names:
            _databases[name] = _databases.get(name, 0) + 1
    once = threading.Lock()

    def release() -> None:
        if not once.acquire(blocking=False):
            return  # released already
        _released.append(names)
        if _databases_lock.acquire(blocking=False):
            try:
                _apply_released()
            finally:
                _databases_lock.release()

    return release


def database_ids() -> set[tuple[int, int]]:
    """(device, inode) of every file of the databases this process opens, as they are now."""
    with _holding():
        names = tuple(_databases)
    ids = set()
    for name in names:
        for suffix in SQLITE_FILES:
            try:
                found = os.stat(name + suffix)
            except OSError:
                continue
            ids.add((found.st_dev, found.st_ino))
    return ids


def _check_not_held(found: os.stat_result, held: set[tuple[int, int]]) -> None:
    """Unreadable for a file of a database this process has open (database_ids: `held`)."""
    if (found.st_dev, found.st_ino) in held:
        raise Unreadable(IS_A_DATABASE)


class Unreadable(Exception):
    """A file that is not, or no longer, a regular file inside its folder that can be opened;
    `reason` says which, for a person (an index run skips the file with it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def open_inside(path: Path, real_root: str) -> tuple[int, os.stat_result]:
    """Open a file to read it as what was checked: (descriptor, its fstat). A symlink is
    followed only when its target lies inside the source; the opened descriptor must be a
    regular file whose real path lies inside the source, and no file of a database this
    process has open (checked before it is opened for reading). Unreadable otherwise."""
    held = database_ids()
    try:
        seen = os.lstat(path)
    except OSError as exc:
        raise Unreadable(open_failure(exc)) from None
    follow = stat.S_ISLNK(seen.st_mode)
    if follow:
        try:
            target = os.path.realpath(path, strict=True)
        except OSError as exc:
            raise Unreadable(open_failure(exc)) from None
        if not inside(target, real_root):
            raise Unreadable("symlink leads outside the source")
    else:
        check_regular(seen.st_mode)
        _check_not_held(seen, held)
    nofollow = 0 if follow else os.O_NOFOLLOW  # no link when checked: it must not be one now
    if O_PATH and _HAS_PROC_FD:
        return _open_checked(path, nofollow, real_root, held)
    fd = _open_after_stat(path, nofollow, follow, held)
    try:
        opened = os.fstat(fd)
        check_regular(opened.st_mode)
        real = real_path(fd, path, opened)
        if not inside(real, real_root):
            raise Unreadable("now leads outside its source (a link was swapped in meanwhile)")
    except BaseException:
        os.close(fd)
        raise
    return fd, opened


def _open_checked(
    path: Path, nofollow: int, real_root: str, held: set[tuple[int, int]]
) -> tuple[int, os.stat_result]:
    """Linux: the entry opened with O_PATH, checked by fstat (a regular file, inside the
    source, no database's file), then the very file checked opened for reading through
    /proc/self/fd. Closing the O_PATH descriptor drops no lock."""
    try:
        handle = os.open(path, O_PATH | nofollow | os.O_CLOEXEC)
    except OSError as exc:
        raise Unreadable(open_failure(exc)) from None
    try:
        found = os.fstat(handle)
        if stat.S_ISLNK(found.st_mode):  # O_PATH | O_NOFOLLOW opens a link swapped in
            raise Unreadable(open_failure(OSError(errno.ELOOP, "a link")))
        check_regular(found.st_mode)
        _check_not_held(found, held)
        if not inside(real_path(handle, path, found), real_root):
            raise Unreadable("now leads outside its source (a link was swapped in meanwhile)")
        try:
            fd = os.open(f"{PROC_FD}/{handle}", OPEN_FLAGS)
        except OSError as exc:
            raise Unreadable(open_failure(exc)) from None
    finally:
        os.close(handle)
    opened = os.fstat(fd)  # the very file checked: /proc/self/fd opens what the handle holds
    if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
        os.close(fd)
        raise Unreadable("vanished before it was read (or was replaced meanwhile)")
    return fd, opened


def _open_after_stat(path: Path, nofollow: int, follow: bool, held: set[tuple[int, int]]) -> int:
    """Elsewhere: the file a link leads to is checked by stat just before the open (a link
    swapped in between the two is the one case left)."""
    try:
        if follow:
            _check_not_held(os.stat(path), held)
        return os.open(path, OPEN_FLAGS | nofollow)
    except OSError as exc:
        raise Unreadable(open_failure(exc)) from None


def check_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        what = next((name for test, name in FILE_TYPES if test(mode)), "not a file")
        raise Unreadable(f"not a regular file ({what})")


def open_failure(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symlink loop (or a link swapped in while it was read)"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "vanished before it was read (or its symlink leads nowhere)"
    if exc.errno == errno.ENXIO:
        return "not a regular file (a socket)"
    return f"cannot be read: {exc.strerror or exc}"


def real_path(fd: int, path: Path, opened: os.stat_result) -> str:
    """The real path of an open descriptor: /proc on Linux; elsewhere the path's real path,
    provided it still names the very file opened."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    real = os.path.realpath(path)
    try:
        now = os.stat(real)
    except OSError as exc:
        raise Unreadable(open_failure(exc)) from None
    if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
        raise Unreadable("vanished before it was read (or was replaced meanwhile)")
    return real


def inside(real: str, real_root: str) -> bool:
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def read_all(fd: int, size: int) -> bytes:
    """Up to size + 1 bytes (one more tells a file that grew)."""
    blocks, left = [], size + 1
    while left > 0:
        block = os.read(fd, min(left, READ_BLOCK_BYTES))
        if not block:
            break
        blocks.append(block)
        left -= len(block)
    return b"".join(blocks)
