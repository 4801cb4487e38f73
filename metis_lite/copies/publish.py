"""Publish a base for read-only readers (`metis-lite publish BASE DEST`), and open what was
published as the one file it is.

One indexer writes a base; readers (`metis-lite serve --read-only`) answer from published
copies of it. `publish` writes a consistent copy with SQLite's online backup (backup.py) under
a temporary name in DEST's folder, marks it (store/publication.py: a new `published_id`, its
time, rollback-journal mode so that no -wal or -shm belongs to it), syncs it, makes it
read-only (mode 0444) and renames it over DEST in one step. A reader that opens DEST sees the
old file or the new one, never half of either; one that already has the old file open goes on
reading it (an open file outlives its name) until it lets it go.

A reader opens a file as `immutable` (SQLite reads it without locks, without a -shm, without
looking for changes) only where nothing can write it: a published copy, in rollback-journal
mode, with no -wal or -journal beside it and no write permission. Anything else (a live base,
or a published copy someone made writable) is opened read-only, and SQLite sees what its writer
commits. Either way a reader opens every connection it will use at once, between two looks at
the path (`open_copy`), so that they are all of one file: a reader never mixes two copies.
How a reader notices a new copy and switches to it is service/follow.py; it switches only to a
file `published_file` says `publish` made, looked at without a lock and without a file made
beside it (an ordinary base put there would otherwise get a -wal and -shm from the reader).

A published copy carries no log of removed vectors (store/vectors.py): its readers all start
from nothing. `publish` also recovers its place: a -wal, -shm or -journal left beside a DEST
that is gone (what a reader of an ordinary base put there made, or a writer killed) is removed
just before the new copy is renamed in, since SQLite would read a -wal or roll back a
-journal into the new file; beside a DEST that is there, they are a writer's, and refused.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path

import apsw

from metis_lite.copies.backup import SIDE_FILES, copy_failure, snapshot_into
from metis_lite.errors import BaseNotFound, DiskFull, InvalidRequest, StoreError
from metis_lite.store import Publication, Store, now_iso
from metis_lite.store.pool import connections_to_open

PUBLISHED_MODE = 0o444
"""A published copy's permissions: read-only for everyone, as nothing may write it."""

OPEN_TRIES = 3
"""How many times a reader opens a file that is replaced while its connections open, before
it says so (a publisher renames a copy in a few microseconds; three in a row is not chance)."""


@dataclass(frozen=True)
class FileState:
    """What a stat of a base's path says: which file it names, as it is now."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    mode: int
    beside: tuple[str, ...]
    """Which of -wal and -journal lie beside it (a writer's files)."""

    def same_file(self, other: FileState) -> bool:
        return (self.device, self.inode) == (other.device, other.inode)

    @property
    def writable(self) -> bool:
        return bool(self.mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def file_state(path: str | os.PathLike[str]) -> FileState:
    """Stat the path (a link is followed to the file it names): FileNotFoundError when nothing
    is there. Only the path is looked at: the file is not opened."""
    found = os.stat(path)
    beside = tuple(s for s in ("-wal", "-journal") if os.path.lexists(f"{path}{s}"))
    return FileState(
        found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_mode, beside
    )


@dataclass(frozen=True)
class Copy:
    """The file a reader serves, as it was when the reader opened it."""

    path: Path
    state: FileState
    immutable: bool
    publication: Publication | None
    last_run: int | None = None
    """The id of the last indexing run the file holds (when asked: Base.served_copy)."""

    def serves(self, now: FileState) -> bool:
        """Whether the path still names this copy, unchanged: the same file, and, for one read
        immutable, the same size, time and no writer's files beside it (anything else means it
        was written after all, and must be opened again)."""
        if not self.state.same_file(now):
            return False
        return not self.immutable or now == self.state


@dataclass(frozen=True)
class Published:
    """What `publish` did."""

    source: Path
    dest: Path
    bytes: int
    chunks: int
    last_run: int | None
    publication: Publication
    seconds: float


def publish(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Published:
    """Publish the base `source` at `dest` (see the module docstring); returns what it did.

    `dest` must be absent or a copy published before (never a base that is written, nor
    another file: INVALID_REQUEST), in an existing folder, not a link. The source may be
    searched and indexed meanwhile; it is opened read-only. A failure leaves `dest` as it was
    and removes the temporary file (StoreError; NOT_A_BASE, BASE_DAMAGED for the source;
    DISK_FULL when DEST's disk has no room for it).
    """
    source, dest = Path(source), Path(dest)
    started = time.monotonic()
    _check_destination(source, dest)
    partial = dest.with_name(f".{dest.name}.publish-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        snapshot_into(source, partial)
        publication = Publication(secrets.token_hex(16), now_iso())
        with Store(partial) as copy:
            copy.clear_removals()
            copy.mark_published(publication)
            chunks = copy.counts()["chunks"]
            last = copy.last_run()
        left = [s for s in SIDE_FILES if os.path.lexists(f"{partial}{s}")]
        if left:
            raise StoreError(f"the copy is not one file: {', '.join(left)} remain beside it")
        os.chmod(partial, PUBLISHED_MODE)
        _fsync(partial, os.O_RDONLY)
        _check_destination(source, dest)  # again: what is there may have changed meanwhile
        _remove_orphans(dest)
        os.replace(partial, dest)
        _fsync(dest.parent, os.O_RDONLY | os.O_DIRECTORY)
    except (apsw.Error, OSError, DiskFull) as exc:
        raise copy_failure(exc, source, dest, "publish") from exc
    finally:
        for name in (str(partial), *(f"{partial}{s}" for s in SIDE_FILES)):
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass
    return Published(
        source=source,
        dest=dest,
        bytes=dest.stat().st_size,
        chunks=chunks,
        last_run=int(last["id"]) if last else None,
        publication=publication,
        seconds=time.monotonic() - started,
    )


def _check_destination(source: Path, dest: Path) -> None:
    """Refuse what a rename over `dest` would lose or break (INVALID_REQUEST, saying why)."""
    if dest.is_symlink():
        raise InvalidRequest(
            f"{dest} is a link: publish to the file itself (a rename would replace the link)"
        )
    if dest.is_dir():
        raise InvalidRequest(f"{dest} is a folder: name the file to publish to")
    if not dest.parent.is_dir():
        raise InvalidRequest(f"{dest.parent} is not a folder: cannot publish there")
    if dest.exists() and source.exists() and os.path.samefile(source, dest):
        raise InvalidRequest(f"{dest} is the base itself: publish it to another path")
    written = [f"{dest.name}{s}" for s in ("-wal", "-journal") if os.path.lexists(f"{dest}{s}")]
    if written and os.path.lexists(dest):  # beside no file, they are orphans: _remove_orphans
        raise InvalidRequest(
            f"{', '.join(written)} lies beside {dest}: a base is written there; publish to a "
            "path that only readers open"
        )
    if not dest.exists():
        return
    try:
        with Store(dest, immutable=True) as there:  # no lock, no -shm, nothing written
            published = there.publication() is not None
    except StoreError as exc:
        raise InvalidRequest(
            f"{dest} cannot be replaced: it is not a published copy ({exc.code}: {exc.message});"
            " remove it first if it may go"
        ) from None
    if not published:
        raise InvalidRequest(
            f"{dest} is a base that was not published: publish replaces only a copy published"
            " before (remove it first if it may go)"
        )


def _remove_orphans(dest: Path) -> None:
    """Remove what lies beside a DEST that is not there (the module says why), so that the
    copy renamed in is read as the one file it is."""
    if os.path.lexists(dest):
        return
    for suffix in SIDE_FILES:
        try:
            os.unlink(f"{dest}{suffix}")
        except FileNotFoundError:
            pass


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    except OSError:
        if not flags & os.O_DIRECTORY:
            raise  # some file systems cannot sync a folder; the file itself is synced
    finally:
        os.close(fd)


# -- readers ---------------------------------------------------------------------------------


def published_file(path: str | os.PathLike[str]) -> tuple[FileState, Publication]:
    """The file at `path` and its publication mark, when `publish` made it: marked, with no
    writer's file (-wal, -journal) beside it. Looked at as an immutable file (no lock, no
    -shm, nothing made beside it, whatever the file is). StoreError saying why otherwise;
    BASE_NOT_FOUND when nothing is there; the errors of a file that is no usable base."""
    path = Path(path)
    try:
        before = file_state(path)
    except FileNotFoundError:
        raise BaseNotFound(f"{path} is gone") from None
    if before.beside:
        raise StoreError(
            f"{', '.join(path.name + s for s in before.beside)} lies beside {path}: a writer "
            "has it, and a reader switches only to a copy `metis-lite publish` made"
        )
    with Store(path, immutable=True) as peek:
        publication = peek.publication()
    if publication is None:
        raise StoreError(
            f"{path} is a base that was not published: a reader switches only to a copy "
            "`metis-lite publish` made (remove it, then publish there again)"
        )
    return before, publication


def immutable_safe(state: FileState, store: Store) -> bool:
    """Whether a reader may open the file immutable: a published copy in rollback-journal mode,
    no writer's file beside it, no write permission (the module docstring says why)."""
    return (
        store.publication() is not None
        and store.journal_mode() == "delete"
        and not state.beside
        and not state.writable
    )


def open_copy(path: str | os.PathLike[str], connections: int) -> tuple[Copy, list[Store]]:
    """Open `connections` read-only Stores of the file at `path`, all of one file: the path is
    looked at before and after they open, and when it named another file meanwhile they are
    closed and opened again (OPEN_TRIES). Immutable where `immutable_safe` says so.

    BASE_NOT_FOUND when nothing is there; the errors of a file that is not a usable base as
    Store raises them; StoreError when the file is replaced at every try. Never more than
    the process's budget of connections lets a base keep (store/pool.py): the pool opens the
    rest when needed, each checked to be of the same file (`reopen`)."""
    path = Path(path)
    connections = connections_to_open(connections)
    for _ in range(OPEN_TRIES):
        opened = _open_all(path, connections)
        if opened is not None:
            return opened
    raise StoreError(
        f"{path} was replaced each of {OPEN_TRIES} times it was opened: is something "
        "renaming files over it without pause?"
    )


def _open_all(path: Path, connections: int) -> tuple[Copy, list[Store]] | None:
    """One try of open_copy: None (nothing left open) when the path changed meanwhile."""
    stores: list[Store] = []
    try:
        before = _state_or_none(path)
        stores.append(Store(path, readonly=True))  # BASE_NOT_FOUND, NOT_A_BASE, … said here
        if before is not None:
            immutable = immutable_safe(before, stores[0])
            publication = stores[0].publication()
            if immutable:
                stores.pop().close()
            while len(stores) < connections:
                stores.append(Store(path, readonly=True, immutable=immutable))
            after = _state_or_none(path)
            copy = Copy(path, before, immutable, publication)
            same = all(s.publication() == publication for s in stores) if immutable else True
            if after is not None and copy.serves(after) and same:
                return copy, stores
    except BaseException:
        for store in stores:
            store.close()
        raise
    for store in stores:
        store.close()
    return None


def reopen(copy: Copy) -> Store:
    """One more connection to the file `copy` is, or StoreError when its path names another
    file now (a reader never opens a newer copy under an older one's name)."""
    before = _state_or_none(copy.path)
    if before is not None and copy.serves(before):
        store = Store(copy.path, readonly=True, immutable=copy.immutable)
        after = _state_or_none(copy.path)
        if after is not None and copy.serves(after):
            if not copy.immutable or store.publication() == copy.publication:
                return store
        store.close()
    raise StoreError(f"{copy.path} was replaced: this copy opens no new connection")


def with_last_run(copy: Copy, store: Store) -> Copy:
    last = store.last_run()
    return replace(copy, last_run=int(last["id"]) if last else None)


def _state_or_none(path: Path) -> FileState | None:
    try:
        return file_state(path)
    except FileNotFoundError:
        return None
