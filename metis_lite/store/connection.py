"""A base file's connection policy: how every connection to it is opened, what a failed
read or write means, and the lock that lets one indexer run at a time.

One policy for every connection (apsw bestpractice): WAL mode, a busy timeout, foreign keys,
the FTS5 tokenizer registered. Only SQLite opens a base, its -wal and its -shm: closing any
other descriptor of a database file drops every POSIX lock the process holds on it, and another
client (the `sqlite3` shell) may then checkpoint and delete the WAL under the process's own
connections. So a file is recognised as a base by SQLite itself (`PRAGMA application_id`,
APPLICATION_ID, and the `meta` table), never by reading its bytes, and one that is damaged,
read-only or another program's database is said as such (errors.py). Each file opened is
recorded first, for as long as its connection lives (files.hold_database), so that nothing of
this process reads it as a source's file, whatever name or link leads to it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import apsw

from metis_lite.errors import (
    BaseBusy,
    BaseDamaged,
    BaseNotFound,
    BaseReadOnly,
    DiskFull,
    NotABase,
    StoreError,
)
from metis_lite.store import files
from metis_lite.text import tokenizer

BUSY_TIMEOUT_MS = 5_000
"""How long a statement waits for another connection's write to end before failing; a write
transaction that cannot take the write lock within it fails as BASE_BUSY."""

APPLICATION_ID = 0x4D455449
"""`PRAGMA application_id` of every metis-lite base: the bytes "METI" (1296389193), set when a
base is made, so `file BASE` and any SQLite client can tell a base from another program's
database. A base made before it was set has 0 and is known by its `meta` table; it gets the id
on its next write."""


@dataclass(frozen=True)
class Identity:
    """What SQLite says a file is: its application id and whether it holds tables at all."""

    application_id: int
    objects: int
    has_meta: bool
    published: bool = False
    """A published copy (publish.py): never written, by metis-lite or anything it runs."""

    @property
    def is_base(self) -> bool:
        """A metis-lite base (by its id, or, made before the id, by its meta table)."""
        if self.application_id == APPLICATION_ID:
            return True
        return self.application_id == 0 and self.has_meta

    @property
    def is_empty(self) -> bool:
        return self.application_id == 0 and self.objects == 0


def identify(connection: apsw.Connection) -> Identity:
    """Read what the file is (the first read of a connection: a damaged file fails here)."""
    row = connection.execute(
        "SELECT (SELECT application_id FROM pragma_application_id),"
        " (SELECT count(*) FROM sqlite_schema),"
        " (SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'meta')"
    ).fetchone()
    assert row is not None  # an aggregate always returns a row
    published = bool(row[2]) and bool(
        connection.execute("SELECT 1 FROM meta WHERE key = 'published_id'").fetchone()
    )
    return Identity(int(row[0]), int(row[1]), bool(row[2]), published)


def connect(
    path: str | os.PathLike[str],
    *,
    readonly: bool = False,
    create: bool = True,
    immutable: bool = False,
) -> apsw.Connection:
    """Open a connection with the base's policy (apsw bestpractice: WAL, busy timeout, FKs).

    Without `create`, a missing file is BASE_NOT_FOUND (SQLite is asked not to create it,
    rather than told after a look that it is there). The file's identity is read first, so a
    damaged file says so; only a base or a new file is put in WAL mode, never another program's
    database. A published copy (publish.py), and a base where nothing can be written (a
    read-only file system, file or folder), are opened read-only; such a base, asked to be
    read-only or not, is opened immutable when SQLite cannot open it otherwise and no -wal lies
    beside it (it could not create the -shm it needs): it is still searched, and writing to
    it fails as BASE_READ_ONLY.

    `immutable` opens it read-only as a file nothing will ever write (SQLite's immutable=1: no
    locks, no -shm, no look for changes), which is safe only for such a file: a published copy
    (publish.py), replaced by a rename and never written in place.
    """
    release = files.hold_database(path)  # never opened but by SQLite while it is (files.py)
    try:
        connection = _connect(path, readonly=readonly, create=create, immutable=immutable)
    except BaseException:
        release()
        raise
    weakref.finalize(connection, release)
    return connection


def _connect(
    path: str | os.PathLike[str], *, readonly: bool, create: bool, immutable: bool
) -> apsw.Connection:
    """connect, once the file is recorded as a database this process has open."""
    _check_kind(Path(path))
    unwritable = not immutable and _unwritable(Path(path))  # asked read-only or not
    opened: list[apsw.Connection] = []  # each one SQLite opened, closed when it fails
    try:
        return _opened(
            path,
            opened,
            readonly=readonly or unwritable or immutable,
            create=create,
            immutable=immutable,
            unwritable=unwritable,
        )
    except apsw.NotADBError as exc:
        _close(opened)
        raise NotABase(
            f"{path} is not a metis-lite base (not an SQLite file, or its first page is damaged)"
        ) from exc
    except apsw.CorruptError as exc:
        _close(opened)
        raise BaseDamaged(f"{path} is damaged ({exc}): it cannot be read as a base") from exc
    except apsw.ReadOnlyError as exc:
        _close(opened)
        raise BaseReadOnly(f"{path} is read-only: {exc}") from exc
    except (apsw.CantOpenError, apsw.IOError, apsw.FullError) as exc:
        system_errno = opened[-1].system_errno if opened else 0  # what the OS told SQLite
        _close(opened)
        raise _open_failure(
            Path(path), exc, create=create, unwritable=unwritable, system_errno=system_errno
        ) from exc
    except BaseException:
        _close(opened)
        raise


def _opened(
    path: str | os.PathLike[str],
    opened: list[apsw.Connection],
    *,
    readonly: bool,
    create: bool,
    immutable: bool,
    unwritable: bool,
) -> apsw.Connection:
    """The connection, its identity read and its policy set; each connection it opens is
    put in `opened` first, for the caller to close if this fails."""
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE
    if create and not readonly:
        flags |= apsw.SQLITE_OPEN_CREATE
    try:
        if immutable:
            connection = _open(_immutable_uri(path), flags | apsw.SQLITE_OPEN_URI, opened)
        else:
            connection = _open(str(path), flags, opened)
        identity = identify(connection)
    except (apsw.CantOpenError, apsw.IOError):
        if immutable or not unwritable or os.path.lexists(f"{path}-wal"):
            raise
        if not os.access(path, os.R_OK):
            raise  # said as a file that cannot be read (_open_failure), not read-only
        # SQLite could not make the -shm in a read-only folder, and no -wal holds commits
        # the main file lacks: read the main file as it is.
        connection = _open(
            _immutable_uri(path), apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI, opened
        )
        identity = identify(connection)
    if identity.published and not readonly:
        connection.close()  # a published copy is opened read-only, even by root
        return connect(path, readonly=True, create=False)
    tokenizer.register(connection)
    connection.execute("PRAGMA foreign_keys = ON")
    if not readonly and (identity.is_base or identity.is_empty):
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
    return connection


def _close(opened: list[apsw.Connection]) -> None:
    for connection in opened:
        connection.close()


def _check_kind(path: Path) -> None:
    """NOT_A_BASE, before SQLite opens it, for a path that names something other than a
    regular file: SQLite would open a FIFO or a device as a database (and /dev/null reads as
    an empty one). Looked at by stat, which opens nothing (no lock of SQLite's is at risk);
    a link to a base is followed, as SQLite follows it."""
    try:
        found = os.stat(path)
    except OSError:
        return  # not there (made, or BASE_NOT_FOUND) or not reachable: SQLite's open says
    if not stat.S_ISREG(found.st_mode):
        what = next((name for test, name in files.FILE_TYPES if test(found.st_mode)), None)
        raise NotABase(f"{path} is {what or 'not a regular file'}, not a base file")


def _immutable_uri(path: str | os.PathLike[str]) -> str:
    return f"file:{quote(str(Path(path).resolve()))}?immutable=1"


def _open(name: str, flags: int, opened: list[apsw.Connection]) -> apsw.Connection:
    connection = apsw.Connection(name, flags=flags)
    opened.append(connection)
    connection.set_busy_timeout(BUSY_TIMEOUT_MS)
    return connection


def _open_failure(
    path: Path, exc: apsw.Error, *, create: bool, unwritable: bool, system_errno: int = 0
) -> StoreError:
    """What SQLite's refusal to open `path` means (looked at only after it refused), by what
    the OS told SQLite (`system_errno`, 0 when unknown) and what the file and its disk are."""
    if path.is_dir():
        return NotABase(f"{path} is a folder, not a base file")
    if not create and not os.path.lexists(path):
        return BaseNotFound(
            f"no base at {path}: create it with `metis-lite index {path} FOLDER`"
            f" (a memory base needs no folder: `metis-lite index {path} --kind memory`)"
        )
    denied = _denied(path, system_errno)
    if denied is not None:
        return denied
    if unwritable and system_errno != errno.ENOSPC:
        return BaseReadOnly(
            f"{path} is read-only and its -wal holds commits not yet in the file: open it "
            "once where it can be written (or copy it with metis-lite copy)"
        )
    return read_failure(exc, path, system_errno) or StoreError(f"cannot open {path}: {exc}")


def _denied(path: Path, system_errno: int) -> StoreError | None:
    """A permission refused, naming what may not be read: the file, or a folder on its way."""
    if os.path.exists(path) and not os.access(path, os.R_OK):
        return StoreError(f"{path} cannot be read: permission denied ({_owner(path)})")
    folder = path.parent
    if not os.access(folder, os.X_OK):
        return StoreError(f"{path} cannot be reached: permission denied on {folder}")
    if system_errno in (errno.EACCES, errno.EPERM):
        return StoreError(
            f"{path}: permission denied on it, its -wal or -shm (or its folder, which must "
            f"hold them): {os.strerror(system_errno)}"
        )
    return None


def _owner(path: Path) -> str:
    try:
        found = path.stat()
    except OSError:
        return "its mode or owner"
    return f"owner uid {found.st_uid}, mode {stat.S_IMODE(found.st_mode):03o}"


DISK_ROOM_BYTES = 1 << 20
"""Free space below which an I/O error is taken for a full disk when SQLite cannot say why:
making the -shm takes 32 KiB, a WAL frame a page."""


def disk_full(folder: Path) -> bool:
    """Whether the file system holding `folder` has (next to) no room left."""
    try:
        found = os.statvfs(folder)
    except OSError:
        return False
    return found.f_bavail * found.f_frsize < DISK_ROOM_BYTES


def full_disk(path: Path, what: str) -> DiskFull:
    """DISK_FULL for `path`, whose disk cannot hold `what`."""
    return DiskFull(
        f"{path}: the disk is full: it cannot hold {what}; nothing was written; free some "
        "space and try again"
    )


def read_failure(exc: BaseException, path: Path, system_errno: int = 0) -> StoreError | None:
    """The StoreError a failed read means (BASE_DAMAGED, or an I/O error with its likely
    cause: a full disk, a permission, a -wal deleted), or None for an error of another
    kind. `system_errno`: what the OS told SQLite, where the caller knows it."""
    found = damage(exc, path)
    if found is not None:
        return found
    chain = _chain(exc)
    failed = next((c for c in chain if isinstance(c, apsw.IOError | apsw.FullError)), None)
    if failed is None:
        return None
    if (
        system_errno == errno.ENOSPC
        or isinstance(failed, apsw.FullError)
        or (system_errno == 0 and disk_full(path.parent))
    ):
        return full_disk(path, f"the base's -shm and -wal ({failed})")
    denied = _denied(path, system_errno)
    if denied is not None:
        return denied
    return StoreError(
        f"{path}: {failed}. Was its -wal or -shm deleted while a process had it open? Restart "
        "the processes that serve or index it: each folds the WAL it holds into the base when "
        "it closes"
    )


def _chain(exc: BaseException) -> list[BaseException]:
    """An exception and those it was raised from or while handling (a failed rollback after
    an I/O error is apsw's SQLError, the I/O error its cause), each once."""
    found: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and all(cause is not seen for seen in found):
        found.append(cause)
        cause = cause.__cause__ or cause.__context__
    return found


def _unwritable(path: Path) -> bool:
    """True for an existing base SQLite could not write: the file, or the folder that must
    hold its -wal and -shm, is read-only (a read-only mount says so even to root)."""
    return path.is_file() and not (
        os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
    )


def damage(exc: BaseException, path: Path) -> BaseDamaged | None:
    """BASE_DAMAGED for SQLite's word that a base's file is damaged (a read or write met a
    malformed page, or the header was overwritten while it was open), else None."""
    for cause in _chain(exc):
        if isinstance(cause, BaseDamaged):
            return cause
        if isinstance(cause, apsw.CorruptError | apsw.NotADBError):
            return BaseDamaged(
                f"{path} is damaged ({cause}): it cannot be read as a base; copies made "
                "before the damage (metis-lite copy) still open"
            )
    return None


def write_failure(exc: apsw.Error, path: Path) -> StoreError | None:
    """The StoreError a failed write means, or None. SQLite rolls a transaction back itself
    on SQLITE_FULL, and apsw's own rollback then fails: the cause is in the chain."""
    for cause in _chain(exc):
        if isinstance(cause, apsw.FullError):
            return DiskFull(
                f"{path}: the disk is full (or the base reached its size limit): the unfinished "
                "write was not kept and what was written before is whole; free some space and "
                "run again"
            )
        if isinstance(cause, apsw.ReadOnlyError):
            return BaseReadOnly(f"{path} is read-only: it can be searched, not written")
    return damage(exc, path)


LOOK_WAIT_S = 0.2
"""How long an indexer retries a lock held for a look: a status or search elsewhere asks
whether an indexer runs by holding the lock shared for a moment (held_elsewhere), which must
not turn away the indexer starting then; a lock still held after this is another indexer's."""

LOCK_MODE = 0o600
"""BASE.lock is readable by its owner only: flock needs no more than a descriptor open for
reading, so any user who could open it could hold it and keep every indexer out."""

LOCK_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""BASE.lock is never followed as a link, and never waited on: opening a FIFO put in its place
would block every command and every worker of the service that asks whether an indexer runs."""

PROC_LOCKS = Path("/proc/locks")
HOLDER_CHARS = 200
"""At most this much of the holder's command line is said."""


class IndexerLock:
    """One indexer at a time per base: an advisory lock on BASE.lock, released by the OS even
    when the indexer is killed. (Not on the base file itself: closing any descriptor of a
    database file drops SQLite's POSIX locks held by the process.)"""

    def __init__(self, base_path: Path) -> None:
        self.path = Path(str(base_path) + ".lock")
        self.base = Path(base_path)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock: BASE_BUSY, naming the holder where it can be known, while another
        process holds it; STORE_ERROR at once for a lock file that is not a regular file."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | LOCK_FLAGS, LOCK_MODE)
        except OSError as exc:
            raise self._open_failure(exc) from exc
        try:
            found = self._checked(fd)
            if found.st_uid == os.geteuid() and stat.S_IMODE(found.st_mode) & 0o077:
                os.fchmod(fd, LOCK_MODE)  # made readable by others by an older metis-lite
        except BaseException:
            os.close(fd)
            raise
        deadline = time.monotonic() + LOOK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:  # a look (held_elsewhere) lasts microseconds
                    time.sleep(LOOK_WAIT_S / 50)
                    continue
                holder = lock_holder(os.fstat(fd), os.getpid())
                os.close(fd)
                raise BaseBusy(
                    f"{self.base} is being indexed by another process"
                    f"{f' ({holder})' if holder else ''}; searches still work, try indexing "
                    "again when it ends"
                ) from None
        self._fd = fd

    def check(self) -> None:
        """STORE_ERROR at once when the lock file is a link, a FIFO or a device, which no
        indexer can take (acquire refuses it): a pass asked for now could not run. Looked at
        by lstat, which opens nothing."""
        try:
            found = os.lstat(self.path)
        except OSError:
            return  # not there (made by the indexer), or not reachable: acquire says
        if not stat.S_ISREG(found.st_mode):
            raise self._not_a_lock(found.st_mode)

    def _not_a_lock(self, mode: int) -> StoreError:
        if stat.S_ISLNK(mode):
            what = "a symlink (never followed)"
        else:
            kind = next((name for test, name in files.FILE_TYPES if test(mode)), None)
            what = kind or "not a regular file"
        return StoreError(
            f"{self.path} is {what}, not a lock file: remove it (no indexer holds it) and "
            f"index {self.base} again"
        )

    def _open_failure(self, exc: OSError) -> StoreError:
        if exc.errno == errno.ELOOP:
            return self._not_a_lock(stat.S_IFLNK)
        if exc.errno == errno.EACCES and os.path.lexists(self.path):
            return StoreError(
                f"cannot lock {self.base} for indexing: {self.path} belongs to another user "
                f"({_owner(self.path)}): index as that user"
            )
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return BaseReadOnly(f"{self.base} is read-only: it can be searched, not indexed")
        if exc.errno == errno.ENOSPC:
            return full_disk(self.base, f"its lock file {self.path.name}")
        return StoreError(f"cannot lock {self.base} for indexing: {exc.strerror or exc}")

    def _checked(self, fd: int) -> os.stat_result:
        """The open lock file's stat; STORE_ERROR when it is not a regular file."""
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise self._not_a_lock(found.st_mode)
        return found

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def held_elsewhere(self) -> bool:
        """True while another process indexes this base (the service's Indexing state).
        Never waits: a lock file that is a link, a FIFO or a device is held by no indexer
        (acquire refuses it), so the answer is False at once, as for one this user may not
        read."""
        try:  # opened as it is: no look first that a removal could make stale
            fd = os.open(self.path, os.O_RDONLY | LOCK_FLAGS)
        except OSError:
            return False  # no lock file (never indexed, or removed), or not one to hold
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
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


def lock_holder(found: os.stat_result, me: int) -> str:
    """Who holds a lock on the file `found` (a process other than `me`), as `pid N: its
    command line`, from /proc/locks; "" where that cannot be known (not Linux, another PID
    namespace, a process of another user whose command line is hidden). Best effort."""
    ids = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    try:
        lines = PROC_LOCKS.read_text("ascii", "replace").splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or "->" in fields or fields[5] != ids or not fields[4].isdigit():
            continue
        pid = int(fields[4])
        if pid in (me, 0):
            continue
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return f"pid {pid}"
        words = command.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
        if len(words) > HOLDER_CHARS:
            words = words[:HOLDER_CHARS] + "…"
        return f"pid {pid}: {words}" if words else f"pid {pid}"
    return ""
