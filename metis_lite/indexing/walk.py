"""The files of a source folder that a base reads, listed without opening any of them.

An index run (ingest.py) lists each folder source here first, so that it knows how many files
the whole run reads before it reads one (its progress says `files 120/530`) and whether there
is enough to parse to start worker processes (parse_pool.py). Nothing here opens a file:
ingest.py opens each file once, through files.open_inside, and checks what it opened.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from metis_lite import parsing
from metis_lite.store.files import Unreadable

NOT_UTF8 = "its name is not valid UTF-8 (rename it to index it)"


@dataclass(frozen=True)
class Skip:
    """A file (or folder, its path ending in '/') a run left out, and why, for a person."""

    path: str
    reason: str


@dataclass(frozen=True)
class SourceFile:
    """A file a run reads: its path, its name inside its source ('/'-separated), its kind."""

    path: Path
    name: str
    kind: str


def walk(root: Path, skipped: list[Skip], source: str) -> list[SourceFile]:
    """The files of a source folder a base reads, by name, in a stable order (hidden ones
    left out). A name that is not valid UTF-8, or a folder inside that cannot be listed, is
    skipped with its reason; folders behind symlinks are not followed. Unreadable when the
    source folder itself cannot be listed (its documents are then kept, as for a missing
    folder)."""

    def unlisted(exc: OSError) -> None:
        where = Path(exc.filename or root)
        if where == root:
            raise Unreadable(f"source folder cannot be read: {exc.strerror or exc}")
        reason = f"folder cannot be read: {exc.strerror or exc}; its documents are removed"
        skipped.append(Skip(f"{source}/{shown(where.relative_to(root).as_posix())}/", reason))

    files = []
    for folder, dirs, names in os.walk(root, followlinks=False, onerror=unlisted):
        for name in [d for d in dirs if not d.startswith(".") and not _utf8(d)]:
            relative = Path(folder, name).relative_to(root).as_posix()
            skipped.append(Skip(f"{source}/{shown(relative)}/", NOT_UTF8))
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and _utf8(d))
        for name in sorted(names):
            kind = parsing.kind_of(Path(name))
            if name.startswith(".") or kind is None:
                continue
            path = Path(folder, name)
            relative = path.relative_to(root).as_posix()
            if not _utf8(relative):
                skipped.append(Skip(f"{source}/{shown(relative)}", NOT_UTF8))
                continue
            files.append(SourceFile(path, relative, kind))
    return files


def _utf8(name: str) -> bool:
    """False for a name that os.walk decoded with surrogate escapes (not valid UTF-8)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(name: str) -> str:
    """A name as text, its bytes that are not UTF-8 written \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
