"""Opening a file of a source folder so that what is read is what was checked.

A symlink is followed only when its target lies inside the folder, anything else is opened with
O_NOFOLLOW, never waiting on a FIFO (O_NONBLOCK), and the opened descriptor itself must be a
regular file whose real path lies inside the folder: a file swapped for a link, or a folder for
a link, between the check and the open is refused. The indexer reads documents through it
(ingest.py), and so does the service when it hands a cited document back (documents.py).
"""

from __future__ import annotations

import errno
import os
import stat
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


class Unreadable(Exception):
    """A file that is not, or no longer, a regular file inside its folder that can be opened;
    `reason` says which, for a person (an index run skips the file with it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def open_inside(path: Path, real_root: str) -> tuple[int, os.stat_result]:
    """Open a file to read it as what was checked: (descriptor, its fstat). A symlink is
    followed only when its target lies inside the source; the opened descriptor must be a
    regular file whose real path lies inside the source. Unreadable otherwise."""
    try:
        seen = os.lstat(path)
    except OSError as exc:
        raise Unreadable(open_failure(exc)) from None
    flags = OPEN_FLAGS
    if stat.S_ISLNK(seen.st_mode):
        try:
            target = os.path.realpath(path, strict=True)
        except OSError as exc:
            raise Unreadable(open_failure(exc)) from None
        if not inside(target, real_root):
            raise Unreadable("symlink leads outside the source")
    else:
        check_regular(seen.st_mode)
        flags |= os.O_NOFOLLOW  # it was no link when checked: it must not be one now
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise Unreadable(open_failure(exc)) from None
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
