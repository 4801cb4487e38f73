"""A source listed by the paths that changed, not walked: the run of an `index --watch` batch.

A watch batch names the files that changed (indexing/watch.py); a run limited to them
(ingest.index's `only`) lists those files alone, so a save in a folder of 100,000 files
costs the one file, not a walk that stats them all (benchmarks/bench_watch.py). Each path
is judged as a walk would (walk.py): hidden ones and those of no kind a base reads are left
out, and those the folder's rules exclude (ignore.py: the ignore files of its folder and of
each folder above it, and the source's --exclude patterns), an excluded folder above a file
excluding it too. A path that is gone removes its document, and the documents below it (a
folder deleted or moved out leaves only its own name behind).

What a path alone cannot say falls back to walking the whole source: an ignore file changed
(what the rules leave out changes everywhere below it), a folder that appeared (moved in,
its files made no event of their own), the source folder itself, a name that is not UTF-8,
or an ignore file on the way that cannot be read (the walk holds its folder, and says why).
The periodic full rescan (`--rescan`) still walks everything, catching what no event said.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from metis_lite import parsing
from metis_lite.indexing.ignore import (
    IGNORE_FILES,
    RULE_NAMES,
    SPHINX_BUILD_MARKS,
    SPHINX_SOURCES,
    Patterns,
    Rules,
)
from metis_lite.indexing.walk import Listing, Skip, SourceFile, shown, walk
from metis_lite.records import MetisWarning
from metis_lite.store import At, StoredDocument

Only = Mapping[str, frozenset[str] | None]
"""The sources a run reads, by name, each with the paths that changed (absolute; None: the
whole source, walked). A base whose documents wait to be cut again by newer chunking rules is
read whole all the same (ingest.py)."""

Stacks = dict[str, tuple[Patterns, ...] | None]
"""Each folder's patterns in force ('' or 'work/'), read once a listing; None: held."""

FOLDER_NAMES = (*RULE_NAMES, SPHINX_SOURCES)
"""The names of a folder that its rules depend on (Rules.folder): its ignore files, a Sphinx
build's marks and its `_sources`."""


@dataclass(frozen=True)
class Changed(Listing):
    """A source's changed files (`files`), and the documents the run may replace or remove:
    those named (`names`) and those below a path that is gone (`gone`, 'work/'-ended)."""

    names: frozenset[str] = frozenset()
    gone: tuple[str, ...] = ()


def among(folders: Sequence[tuple[int, str, str]], only: Only | None) -> list[tuple[int, str, str]]:
    """The folder sources (id, name, path) a run reads: those `only` names (None: all)."""
    return [f for f in folders if only is None or f[1] in only]


def list_source(
    root: Path,
    skipped: list[Skip],
    source: str,
    *,
    excludes: tuple[str, ...],
    no_ignore: bool,
    warnings: list[MetisWarning],
    paths: frozenset[str] | None,
) -> Listing:
    """A source folder's files to read: those of `paths` (absolute; see the module), or all
    of them, walked (`paths` None, or a change a path alone cannot say)."""
    if paths is not None:
        rules = Rules(root, source, excludes, read_files=not no_ignore, warnings=warnings)
        listed = _changed(root, source, paths, rules)
        if listed is not None:
            return listed
    return walk(root, skipped, source, excludes=excludes, no_ignore=no_ignore, warnings=warnings)


def scoped(
    listing: Listing, stored_of: Callable[[At | None], dict[str, StoredDocument]], root: Path
) -> tuple[dict[str, StoredDocument], tuple[SourceFile, ...] | None]:
    """The documents a run of `listing` may replace or remove (`stored_of(at)`: the source's
    stored documents at `at`, None: all; all for a walk, else those its paths name, read alone:
    a source of 100,000 documents costs ~1 s to read whole), and the HTML pages a site's title
    suffix is found from (site_titles.py; None: the listing's own): for changed pages, the
    source's pages as indexed, so a page re-indexed alone is cut as its site's others were."""
    if not isinstance(listing, Changed):
        return stored_of(None), None
    pages = None
    if any(file.kind == "html" for file in listing.files):
        pages = tuple(
            SourceFile(root / name, name, "html")
            for name in stored_of(None)
            if parsing.kind_of(Path(name)) == "html"
        )
    return stored_of((listing.names, listing.gone)), pages


def _changed(root: Path, source: str, paths: frozenset[str], rules: Rules) -> Changed | None:
    """The Changed listing of `paths`; None where the source must be walked (the module)."""
    stacks: Stacks = {}
    files, names, gone = [], set(), []
    for path in sorted(paths):
        try:
            parts = Path(path).relative_to(root).parts
        except ValueError:
            continue  # not of this source
        if not parts or shown(path) != path:  # the source itself, or a name not UTF-8
            return None
        *folders, name = parts
        if any(part.startswith(".") for part in folders):
            continue
        if name.startswith("."):
            if name in IGNORE_FILES and rules.read_files:
                return None
            continue
        if name in SPHINX_BUILD_MARKS and rules.read_files:
            return None  # a folder that becomes a Sphinx build, or is one no more
        relative = "/".join(parts)
        try:
            mode: int | None = os.lstat(path).st_mode
        except OSError:
            mode = None  # gone (a walk would not list it either)
        if mode is not None and stat.S_ISDIR(mode):
            return None
        names.add(relative)
        if mode is None:
            gone.append(relative + "/")
            continue
        kind = parsing.kind_of(Path(name))
        if kind is None:
            continue
        left_out = excluded(rules, folders, name, False, root, stacks) if rules.active else False
        if left_out is None:
            return None
        if not left_out:
            files.append(SourceFile(Path(path), relative, kind))
    return Changed(tuple(files), source=source, names=frozenset(names), gone=tuple(gone))


def excluded(
    rules: Rules,
    folders: Sequence[str],
    name: str,
    folder: bool,
    root: Path,
    stacks: Stacks,
) -> bool | None:
    """Whether the folder's rules leave out `folders/name` (or a folder above it), as a walk
    reads them (walk.py): each folder's ignore files stacked on those of the folders above.
    None when an ignore file on the way cannot be read (a walk holds its folder: ignore.py)."""
    stack: tuple[Patterns, ...] | None = ()
    here = ""
    parts = (*folders, name)
    for n, part in enumerate(parts):
        if here not in stacks:
            present = [n for n in FOLDER_NAMES if os.path.lexists(root / here / n)]
            stacks[here] = None if stack is None else rules.folder(here, present, stack)
        stack = stacks[here]
        if stack is None:
            return None
        last = n == len(parts) - 1
        if rules.verdict(stack, here + part, folder=folder or not last).excluded:
            return True
        here += part + "/"
    return False
