"""The files of a source that a base reads, listed without opening any of them.

An index run (ingest.py) lists each source here first, so that it knows how many files the
whole run reads before it reads one (its progress says `files 120/530`) and whether there is
enough to parse to start worker processes (parse_pool.py). Nothing here opens a document:
ingest.py opens each file once, through files.open_inside, and checks what it opened; only a
folder's ignore files are read here (ignore.py), through the same checks.

A folder source lists its files but hidden ones and those its rules leave out (ignore.py); a
file source is that one file, whatever its name (it was named on purpose).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from metis_lite import parsing
from metis_lite.errors import InvalidRequest
from metis_lite.indexing.ignore import (
    SPHINX_RULE_ORIGIN,
    Patterns,
    Rule,
    Rules,
    excluded_by,
)
from metis_lite.records import MetisWarning
from metis_lite.settings import KINDS
from metis_lite.store.files import Unreadable

NOT_UTF8 = "its name is not valid UTF-8 (rename it to index it)"

SPHINX_SKIPPED = (
    "a Sphinx build's copies of its pages' sources, the pages being read (--no-ignore reads "
    "them too)"
)

SOURCE_FILE_MISSING = "SOURCE_FILE_MISSING"
"""The warning of a run whose file source is gone from its folder: its document is removed
(the source stays, and reads the file again if it comes back)."""

SOURCE_NOT_A_FILE = "SOURCE_NOT_A_FILE"
"""The warning of a run whose file source is now a folder: its document is removed, and the
folder is not read until it is named again (`index BASE PATH`), which makes it a folder
source: a folder in a file's place may hold anything, and no one asked for it."""


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


@dataclass(frozen=True)
class Listing:
    """A source's files as a run reads them, and what its rules did."""

    files: tuple[SourceFile, ...]
    held: tuple[str, ...] = ()
    """Folders ('work/', '' for the whole source) whose ignore file cannot be read: their
    documents are kept as indexed, neither read again nor removed (ignore.py)."""
    excluded: tuple[Rule, ...] = ()
    """The rules that left something out, each once, in the order first used."""
    source: str = ""

    @property
    def all_excluded(self) -> str | None:
        """Why nothing of a folder is indexed when its rules left out all it holds (the
        message of the run's NO_DOCUMENTS warning); None when they did not."""
        if self.files or not self.excluded:
            return None
        return (
            f"{self.source}: nothing of it is indexed: what it holds is excluded by "
            f"{excluded_by(self.excluded)}"
        )


def walk(
    root: Path,
    skipped: list[Skip],
    source: str,
    *,
    excludes: tuple[str, ...] = (),
    no_ignore: bool = False,
    warnings: list[MetisWarning] | None = None,
) -> Listing:
    """The files of a source folder a base reads, by name, in a stable order: hidden ones left
    out, and those its rules exclude (`excludes`, and its ignore files unless `no_ignore`:
    ignore.py); an excluded folder is not entered. A name that is not valid UTF-8, or a folder
    inside that cannot be listed, is skipped with its reason; folders behind symlinks are not
    followed. Unreadable when the source folder itself cannot be listed (its documents are
    then kept, as for a missing folder)."""
    said = [] if warnings is None else warnings
    rules = Rules(root, source, excludes, read_files=not no_ignore, warnings=said)

    def unlisted(exc: OSError) -> None:
        where = Path(exc.filename or root)
        if where == root:
            raise Unreadable(f"source folder cannot be read: {exc.strerror or exc}")
        reason = f"folder cannot be read: {exc.strerror or exc}; its documents are removed"
        skipped.append(Skip(f"{source}/{shown(where.relative_to(root).as_posix())}/", reason))

    files = []
    held = []
    stacks: dict[str, tuple[Patterns, ...]] = {}
    for folder, dirs, names in os.walk(root, followlinks=False, onerror=unlisted):
        here = "" if folder == str(root) else Path(folder).relative_to(root).as_posix() + "/"
        stack = rules.folder(here, (*names, *dirs), stacks.pop(here, ())) if rules.active else ()
        if stack is None:
            held.append(here)
            dirs[:] = []
            continue
        for name in [d for d in dirs if not d.startswith(".") and not _utf8(d)]:
            skipped.append(Skip(f"{source}/{shown(here + name)}/", NOT_UTF8))
        checking = bool(stack) or rules.excludes is not None
        kept = []
        for d in sorted(dirs):
            if d.startswith(".") or not _utf8(d):
                continue
            verdict = rules.verdict(stack, here + d, folder=True) if checking else None
            if verdict is not None and verdict.excluded:
                if verdict.rule is not None and verdict.rule.origin == SPHINX_RULE_ORIGIN:
                    skipped.append(Skip(f"{source}/{shown(here + d)}/", SPHINX_SKIPPED))
                continue
            kept.append(d)
        dirs[:] = kept
        for d in dirs:
            stacks[here + d + "/"] = stack
        for name in sorted(names):
            kind = parsing.kind_of(Path(name))
            if name.startswith(".") or kind is None:
                continue
            relative = here + name
            if not _utf8(relative):
                skipped.append(Skip(f"{source}/{shown(relative)}", NOT_UTF8))
                continue
            if checking and rules.verdict(stack, relative, folder=False).excluded:
                continue
            files.append(SourceFile(Path(folder, name), relative, kind))
    return Listing(tuple(files), tuple(held), tuple(rules.used), source)


def walk_file(path: Path, source: str) -> Listing:
    """A file source: the one file, named as it is (its kind one a base reads: checked when
    it was added, and by its name, which cannot change under the same path)."""
    kind = parsing.kind_of(path)
    return Listing(() if kind is None else (SourceFile(path, path.name, kind),), source=source)


def file_gone(path: Path, name: str) -> tuple[str | None, str] | None:
    """Why a file source is not read: (warning code, why) when it is gone from its folder or
    is a folder now (its document is then removed); (None, why) when its folder is gone too
    (a drive not mounted: its document is kept, as a missing folder's); None when it is there."""
    if path.is_dir():
        return SOURCE_NOT_A_FILE, (
            f"{path} was added as a file and is now a folder, which is not read (to index it,"
            f" name it again: metis-lite index BASE {path})"
        )
    if path.exists():
        return None
    if not path.parent.is_dir():
        return None, f"the folder of {path} is missing; its document is kept"
    return SOURCE_FILE_MISSING, (
        f"{path} is gone (the source stays and reads it again if it comes back; metis-lite "
        f"sources BASE --remove {name} removes it)"
    )


def source_kind(path: Path, given: object) -> str:
    """'folder' or 'file': what a path named as a new source is; INVALID_REQUEST for a path
    that is neither, or a file of a kind no parser reads (named as `given`)."""
    if path.is_dir():
        return "folder"
    if not path.is_file():
        raise InvalidRequest(f"{given} is not a folder or a file (nothing readable is there)")
    if parsing.kind_of(path) is None:
        raise InvalidRequest(f"{given} is not a kind of file metis-lite reads ({', '.join(KINDS)})")
    return "file"


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
