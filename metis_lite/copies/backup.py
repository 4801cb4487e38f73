"""Copy a base as one file, consistent while it is searched and indexed (`metis-lite copy`).

A base is in WAL mode: its latest commits may live in BASE-wal until a checkpoint moves them
into the main file, so a plain `cp BASE.db` of a live base can miss them (or, copied mid-write,
be torn). `copy_base` uses SQLite's online backup instead: it copies the pages of one read
snapshot (all of them in one step, so a writer in another process never makes it start over),
while the indexer goes on writing beside it. The copy is written under a temporary name in the
destination's folder, checked (`PRAGMA quick_check`), checkpointed and closed, so it is one
self-contained file with no -wal beside it, and only then given its name, never over an
existing file.

The FTS5 table needs the 'metis' tokenizer to be read, not to be copied: the backup copies
pages, and the copy opens and searches anywhere metis-lite runs.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from pathlib import Path

import apsw

from metis_lite.errors import BaseDamaged, DiskFull, InvalidRequest, StoreError
from metis_lite.store import Store
from metis_lite.store.connection import connect, damage, disk_full
from metis_lite.store.publication import unmark

ALL_PAGES = -1
"""backup.step() argument: copy every page in one step, inside one read transaction."""

SIDE_FILES = ("-wal", "-shm", "-journal")
"""Files SQLite keeps beside a database; a finished copy has none of them."""


def copy_base(source: Path, dest: Path) -> None:
    """Copy the base `source` to the new file `dest` (see the module docstring).

    Raises InvalidRequest when `dest` exists or its folder does not, NotABase or SchemaTooNew
    when `source` is not a base this metis-lite reads, BaseDamaged when a page of it is
    malformed, StoreError when the copy fails (the partial file is removed). The source is
    opened read-only: nothing is written to it, and a writer holding it (even the `sqlite3`
    shell inside a write transaction) neither stops the copy nor is waited for.
    """
    source, dest = Path(source), Path(dest)
    _check_destination(source, dest)
    partial = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    _remove(partial)
    try:
        snapshot_into(source, partial)
        _place(partial, dest)
    except (apsw.Error, OSError, DiskFull) as exc:
        raise copy_failure(exc, source, dest, "copy") from exc
    finally:
        _remove(partial)


def copy_failure(exc: BaseException, source: Path, dest: Path, doing: str) -> StoreError:
    """What a failed copy (or publication) of `source` to `dest` means: BASE_DAMAGED for a
    malformed page of the source; DISK_FULL when the destination's disk had no room for the
    copy, its -wal or its -shm (SQLite's backup then reports SQLITE_FULL with the message
    "not an error", which says nothing to a person); else STORE_ERROR with the cause."""
    damaged = damage(exc, source)
    if damaged is not None:
        return damaged
    if _no_room(exc, dest):
        return DiskFull(
            f"cannot {doing} {source} to {dest}: the disk holding {dest.parent} is full; "
            f"nothing was left there and {source} is as it was: free some space and {doing} "
            "again"
        )
    if isinstance(exc, StoreError):
        return exc  # said already (a full disk under the source, its own -shm)
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
    return StoreError(f"cannot {doing} {source} to {dest}: {reason}")


def _no_room(exc: BaseException, dest: Path) -> bool:
    """Whether the failure, or one it was raised from, is the destination's disk being full
    (an I/O error is one only when that disk has no room left: it may be the source's)."""
    cause: BaseException | None = exc
    seen: list[BaseException] = []
    while cause is not None and all(cause is not s for s in seen):
        seen.append(cause)
        if isinstance(cause, apsw.FullError):
            return True  # only the copy is written: the source is opened read-only
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(cause, DiskFull | apsw.IOError):
            return disk_full(dest.parent)  # the copy's disk, not the source's
        cause = cause.__cause__ or cause.__context__
    return False


def snapshot_into(source: Path, partial: Path) -> None:
    """Every page of one snapshot of the base `source` into the new file `partial`, checked
    and folded into one file (no -wal beside it); the source is opened read-only. copy_base
    and publish.py build on it; their caller removes `partial` when it fails."""
    with Store(source, readonly=True) as store:  # nothing is written to the source
        _backup(store.db, partial)
    _finish(partial, source)


def _check_destination(source: Path, dest: Path) -> None:
    if dest.exists() or dest.is_symlink():
        raise InvalidRequest(f"{dest} already exists: copy to a new file (nothing is overwritten)")
    if not dest.parent.is_dir():
        raise InvalidRequest(f"{dest.parent} is not a folder: cannot copy {source} there")
    stray = [dest.name + suffix for suffix in SIDE_FILES if Path(str(dest) + suffix).exists()]
    if stray:
        raise InvalidRequest(
            f"{dest.parent} holds {', '.join(stray)}, left by another database of that name: "
            "remove it or copy to another name"
        )


def _backup(source: apsw.Connection, partial: Path) -> None:
    """Every page of one snapshot of `source` into the new file `partial`."""
    target = apsw.Connection(str(partial))
    try:
        with target.backup("main", source, "main") as backup:
            backup.step(ALL_PAGES)
            if not backup.done:
                raise StoreError(f"the backup to {partial} stopped before its last page")
        unmark(target)  # a copy of a published copy is a base to write, until published
    finally:
        target.close()


def _finish(partial: Path, source: Path) -> None:
    """Check the copy with the base's own connection policy, fold its WAL in and close it.
    The backup copies pages as they are, so a copy that fails its check holds a damaged page
    of `source` (one no command had read yet): BASE_DAMAGED."""
    copy = connect(partial)
    try:
        verdict = [row[0] for row in copy.execute("PRAGMA quick_check")]
        if verdict != ["ok"]:
            raise BaseDamaged(
                f"{source} is damaged: its copy fails SQLite's check "
                f"({'; '.join(verdict[:3])}); copies made before the damage still open"
            )
        copy.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        copy.close()
    left = [suffix for suffix in SIDE_FILES if Path(str(partial) + suffix).exists()]
    if left:
        raise StoreError(f"the copy is not one file: {', '.join(left)} remain beside it")
    with partial.open("rb") as handle:
        os.fsync(handle.fileno())


def _place(partial: Path, dest: Path) -> None:
    """Give the finished copy its name; a link fails rather than replace a file that appeared."""
    try:
        os.link(partial, dest)
    except FileExistsError:
        raise InvalidRequest(f"{dest} already exists: copy to a new file") from None
    except OSError:  # a file system without hard links
        if dest.exists():
            raise InvalidRequest(f"{dest} already exists: copy to a new file") from None
        os.replace(partial, dest)
    _fsync_folder(dest.parent)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the file itself is synced
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    for name in (str(path), *(str(path) + suffix for suffix in SIDE_FILES)):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass


# -- the CLI command (`metis-lite copy BASE DEST`), wired by cli/copy.py --------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", help="the base to copy (may be searched and indexed meanwhile)")
    parser.add_argument("dest", help="the new file (never overwritten)")
    parser.add_argument("--json", action="store_true", help="print what was copied as JSON")


def run_from_args(args: argparse.Namespace) -> int:
    """Copy, then say what was copied; errors are MetisErrors for the CLI to translate."""
    source, dest = Path(args.base), Path(args.dest)
    copy_base(source, dest)
    size = dest.stat().st_size
    if args.json:
        json.dump({"base": str(source), "copy": str(dest), "bytes": size}, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(f"copied {source} to {dest} ({size:,} bytes, one file)")
    return 0
