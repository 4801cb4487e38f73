"""A source as `Base.add_source` takes it: its path checked, its kind found, its name chosen."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from metis_lite.errors import InvalidRequest


def checked(
    folder: str | Path, excludes: Sequence[str] | None, no_ignore: bool | None
) -> tuple[Path, str, tuple[str, ...] | None]:
    """The source's resolved path, its kind (folder or file) and its own patterns checked
    (None: keep what it had); a file given a folder's rules, or a path that is not UTF-8, is
    refused."""
    from metis_lite.indexing import ingest

    path = Path(folder).expanduser().resolve()
    kind = ingest.source_kind(path, folder)
    patterns = None if excludes is None else ingest.check_excludes(excludes)
    if kind == "file" and (patterns or no_ignore):
        raise InvalidRequest(
            f"{folder} is a file: --exclude and --no-ignore are a folder's rules (name the "
            "file in a command of its own)"
        )
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(f"{folder!r}: a source's path must be valid UTF-8") from None
    return path, kind, patterns


def name_for(known: Mapping[str, str | None], path: Path, kind: str, name: str | None) -> str:
    """The name of the source at `path` among the `known` ones (name → path): its own when it
    is one already, else `name`, the folder's name or the file's stem, made unique (-2, -3…);
    metis-… names are the notes'."""
    same = [existing for existing, at in known.items() if at == str(path)]
    if same:
        return same[0]
    name = name or (path.stem if kind == "file" else path.name) or "root"
    if name.startswith("metis-"):
        raise InvalidRequest("source names starting with metis- are reserved for a base's notes")
    chosen, n = name, 2
    while chosen in known:
        chosen, n = f"{name}-{n}", n + 1
    return chosen
