"""Document → chunks → index: one indexing run of a base, and its report (`index`).

A run walks each folder source, reads what changed, parses and chunks it, stores each document
in one transaction, then embeds what lacks a vector; it is recorded in `runs` and reported as
an IndexReport. Incremental: a file whose size and modification time are unchanged is not read
again, and one whose content hash is unchanged is not parsed again; a changed file is replaced
and a deleted one removed.

What is read is what was checked: each file is opened once, without following a link it did
not check, and the opened descriptor itself must be a regular file whose real path lies inside
the source (so a file swapped for a link during the run is never read). Nothing a folder holds
stops a run: a name that is not UTF-8, a symlink loop or one leading outside, a FIFO, a socket,
a device, a file that vanishes, a permission error — each is skipped with its reason, and a
document whose file became so is removed. A file that cannot be parsed, is too large or
changes while read is skipped and its indexed version kept: it may be whole again next run.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from metis_lite import parsing
from metis_lite.chunking import chunk
from metis_lite.errors import ModelAnswerInvalid, ModelError, ParseError
from metis_lite.files import Unreadable, open_inside, read_all
from metis_lite.models.base import Embedder
from metis_lite.records import Warning
from metis_lite.settings import EMBED_BATCH
from metis_lite.spec import BaseSpec
from metis_lite.store import Store, StoredDocument

SOURCE_IS_A_LINK = "SOURCE_IS_A_LINK"
"""The warning of a run that found a source folder replaced by a symlink (never followed)."""

Progress = Callable[[str, int, int], None]
"""progress(stage, done, total): stage is "files" or "vectors"."""


@dataclass(frozen=True)
class Skip:
    path: str
    reason: str


@dataclass(frozen=True)
class IndexReport:
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: tuple[Skip, ...] = ()
    embedded: int = 0
    chunks: int = 0
    without_vector: int = 0
    seconds: float = 0.0
    warnings: tuple[Warning, ...] = ()


@dataclass
class _Tally:
    """What a run did so far (private to the run; the report is the IndexReport)."""

    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: list[Skip] = field(default_factory=list)
    warnings: list[Warning] = field(default_factory=list)


@dataclass(frozen=True)
class _File:
    path: Path
    name: str  # inside its source, '/'-separated
    kind: str


def index(
    store: Store,
    spec: BaseSpec,
    embedder: Callable[[], Embedder],
    *,
    document_prefix: str,
    reembed: bool = False,
    progress: Progress | None = None,
) -> IndexReport:
    """One indexing run on `store` (a writer connection; the caller holds the IndexerLock):
    bring every folder source's documents up to date, then embed the chunks lacking a vector.

    The run is recorded in `runs` (failed when it raised). A words index built by older word
    rules is first built again by today's (Store.rebuild_words); `reembed` drops every vector
    first, else only those of another model.
    """
    started = time.perf_counter()
    run = store.start_run()
    tally = _Tally()
    embedded = 0
    state = "failed"
    try:
        if store.words_outdated:
            store.rebuild_words()
        store.drop_vectors(except_model=None if reembed else spec.model_label)
        _index_sources(
            store,
            tally,
            chunk_size=spec.chunk_size,
            max_file_bytes=spec.max_file_bytes,
            progress=progress,
        )
        embedded, dimension, warnings = embed_missing(
            store,
            embedder,
            model=spec.model_label,
            document_prefix=document_prefix,
            dimension=spec.dimension,
            progress=progress,
        )
        tally.warnings += warnings
        if dimension is not None and dimension != spec.dimension:
            store.set_spec({"dimension": dimension})
        state = "done"
    finally:
        counts = (
            {
                "added": tally.added,
                "updated": tally.updated,
                "removed": tally.removed,
                "unchanged": tally.unchanged,
                "skipped": len(tally.skipped),
                "embedded": embedded,
            }
            if state == "done"
            else {}
        )
        store.finish_run(run, state=state, **counts)
    chunks = store.counts()["chunks"]
    return IndexReport(
        added=tally.added,
        updated=tally.updated,
        removed=tally.removed,
        unchanged=tally.unchanged,
        skipped=tuple(tally.skipped),
        embedded=embedded,
        chunks=chunks,
        without_vector=chunks - store.chunks_with_vector(spec.model_label),
        seconds=round(time.perf_counter() - started, 3),
        warnings=tuple(tally.warnings),
    )


def _index_sources(
    store: Store, tally: _Tally, *, chunk_size: int, max_file_bytes: int, progress: Progress | None
) -> None:
    """Bring every folder source's documents up to date (no embedding)."""
    folders = [(i, n, p) for i, n, p in store.sources() if p is not None]  # not the notes
    for source_id, source_name, folder in folders:
        root = Path(folder)
        link = _linked(root)
        if link is not None:
            tally.skipped.append(Skip(f"{source_name}/", f"{link}; its documents are kept"))
            tally.warnings.append(Warning(SOURCE_IS_A_LINK, f"{source_name}: {link}"))
            continue
        if not root.is_dir():
            reason = "source folder is missing" if not root.exists() else "source is not a folder"
            tally.skipped.append(
                Skip(f"{source_name}/", f"{reason} ({root}); its documents are kept")
            )
            continue
        outer = _covering(source_id, folder, folders)
        if outer is not None:
            removed = store.remove_documents_of(source_id)
            tally.removed += removed
            tally.skipped.append(
                Skip(
                    f"{source_name}/",
                    f"lies inside the source {outer} ({folder}), which indexes its files; "
                    f"its {removed} documents of its own were removed: remove the source "
                    f"{source_name} (metis-lite sources BASE --remove {source_name})",
                )
            )
            continue
        real_root = str(root)  # real when added: a link swapped in later leads outside it
        try:
            files = walk(root, tally.skipped, source_name)
        except Unreadable as exc:
            tally.skipped.append(Skip(f"{source_name}/", f"{exc.reason}; its documents are kept"))
            continue
        stored = store.documents_of(source_id)
        present: set[str] = set()
        for done, file in enumerate(files, start=1):
            label = f"{source_name}/{file.name}"
            try:
                _index_file(
                    store,
                    source_id,
                    label,
                    file,
                    real_root,
                    stored.get(file.name),
                    tally,
                    chunk_size=chunk_size,
                    max_file_bytes=max_file_bytes,
                )
                present.add(file.name)
            except Unreadable as exc:
                tally.skipped.append(Skip(label, exc.reason))
            if progress:
                progress("files", done, len(files))
        for name, document in stored.items():
            if name not in present:
                store.remove_document(document.id)
                tally.removed += 1


def _linked(root: Path) -> str | None:
    """Why a source folder is not read because it, or a folder above it, is now a symlink
    (it was a real folder when added, stored resolved): a link is never followed out of the
    folder the base was given. None when its path is still its real path."""
    real = os.path.realpath(root)
    if real == str(root):
        return None
    what = "is now a symlink" if root.is_symlink() else "now lies behind a symlink"
    return (
        f"source folder {root} {what} (to {real}), which is never followed: remove the source "
        "and add the folder it should read"
    )


def _covering(
    source_id: int, folder: str, folders: Sequence[tuple[int, str, str | None]]
) -> str | None:
    """The name of another folder source holding this one (or an earlier one with the same
    folder), whose run indexes its files: two sources never index the same file."""
    path = Path(folder)
    for other_id, other_name, other in folders:
        if other_id == source_id or other is None or not Path(other).is_dir():
            continue
        if path == Path(other) and other_id < source_id:
            return other_name
        if path != Path(other) and path.is_relative_to(other):
            return other_name
    return None


def walk(root: Path, skipped: list[Skip], source: str) -> list[_File]:
    """The files of a source folder a base reads, by name, in a stable order (hidden ones
    left out). A name that is not valid UTF-8, or a folder inside that cannot be listed, is
    skipped with its reason; folders behind symlinks are not followed. Nothing here opens a
    file: `open_inside` does, once, and checks what it opened. Unreadable when the source
    folder itself cannot be listed (its documents are then kept, as for a missing folder)."""

    def unlisted(exc: OSError) -> None:
        where = Path(exc.filename or root)
        if where == root:
            raise Unreadable(f"source folder cannot be read: {exc.strerror or exc}")
        reason = f"folder cannot be read: {exc.strerror or exc}; its documents are removed"
        skipped.append(Skip(f"{source}/{_shown(where.relative_to(root).as_posix())}/", reason))

    files = []
    for folder, dirs, names in os.walk(root, followlinks=False, onerror=unlisted):
        for name in [d for d in dirs if not d.startswith(".") and not _utf8(d)]:
            relative = Path(folder, name).relative_to(root).as_posix()
            skipped.append(Skip(f"{source}/{_shown(relative)}/", _NOT_UTF8))
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and _utf8(d))
        for name in sorted(names):
            kind = parsing.kind_of(Path(name))
            if name.startswith(".") or kind is None:
                continue
            path = Path(folder, name)
            relative = path.relative_to(root).as_posix()
            if not _utf8(relative):
                skipped.append(Skip(f"{source}/{_shown(relative)}", _NOT_UTF8))
                continue
            files.append(_File(path, relative, kind))
    return files


_NOT_UTF8 = "its name is not valid UTF-8 (rename it to index it)"


def _utf8(name: str) -> bool:
    """False for a name that os.walk decoded with surrogate escapes (not valid UTF-8)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(name: str) -> str:
    """A name as text, its bytes that are not UTF-8 written \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _index_file(
    store: Store,
    source_id: int,
    label: str,
    file: _File,
    real_root: str,
    stored: StoredDocument | None,
    tally: _Tally,
    *,
    chunk_size: int,
    max_file_bytes: int,
) -> None:
    fd, before = open_inside(file.path, real_root)
    try:
        if before.st_size > max_file_bytes:
            tally.skipped.append(
                Skip(label, f"larger than the base's limit of {max_file_bytes:,} bytes")
            )
            return
        if stored and stored.size == before.st_size and stored.mtime == before.st_mtime:
            tally.unchanged += 1
            return
        try:
            data = read_all(fd, before.st_size)
            after = os.fstat(fd)
        except OSError as exc:
            tally.skipped.append(Skip(label, f"cannot be read: {exc.strerror or exc}"))
            return
    finally:
        os.close(fd)
    if len(data) != before.st_size or (after.st_size, after.st_mtime_ns) != (
        before.st_size,
        before.st_mtime_ns,
    ):
        tally.skipped.append(Skip(label, "changed while it was read; the next run reads it"))
        return
    digest = hashlib.sha256(data).hexdigest()
    if stored and stored.content_hash == digest:
        tally.unchanged += 1
        return
    try:
        document = parsing.parse(file.path, kind=file.kind, data=data)
        chunks = chunk(document, chunk_size=chunk_size)
    except ParseError as exc:
        tally.skipped.append(Skip(label, exc.message))
        return
    if not chunks:
        tally.skipped.append(Skip(label, "no text"))
        return
    store.replace_document(
        source_id=source_id,
        path=file.name,
        kind=file.kind,
        title=document.title,
        content_hash=digest,
        size=before.st_size,
        mtime=before.st_mtime,
        chunks=chunks,
    )
    if stored:
        tally.updated += 1
    else:
        tally.added += 1


def embed_missing(
    store: Store,
    embedder: Callable[[], Embedder],
    *,
    model: str,
    document_prefix: str,
    dimension: int | None,
    progress: Progress | None = None,
) -> tuple[int, int | None, list[Warning]]:
    """Give a vector to every chunk lacking one of `model`, in batches, each batch committed.

    Returns (vectors written, the model's dimension, warnings). A model that fails stops the
    pass with a warning; its chunks keep waiting and the next run gives them their vectors.
    """
    total = store.counts()["chunks"] - store.chunks_with_vector(model)
    if total <= 0:
        return 0, dimension, []  # nothing waits: the model is not even loaded
    written = 0
    after = 0
    try:
        provider = embedder()
        while True:
            batch = store.chunks_lacking_vectors(model, EMBED_BATCH, after=after)
            if not batch:
                break
            vectors = provider.embed([document_prefix + text for _, text in batch])
            if dimension is None:
                dimension = int(vectors.shape[1])
            elif vectors.shape[1] != dimension:
                raise _dimension_error(vectors.shape[1], dimension)
            written += store.put_vectors(model, zip((i for i, _ in batch), vectors, strict=True))
            after = batch[-1][0]
            if progress:
                progress("vectors", written, total)
    except ModelError as exc:
        waiting = store.counts()["chunks"] - store.chunks_with_vector(model)
        return (
            written,
            dimension,
            [
                Warning(
                    exc.code,
                    f"{exc.message}: {waiting} chunks wait for "
                    "their vectors (found by words until the next run)",
                )
            ],
        )
    return written, dimension, []


def _dimension_error(got: int, expected: int) -> ModelError:
    return ModelAnswerInvalid(
        f"the embedding model answered vectors of dimension {got}; the base's vectors have "
        f"{expected}: index with --reembed to change the model"
    )
