"""Document → chunks → index: walk each source, parse what changed, store it, embed what lacks a vector.

Incremental: a file whose size and modification time are unchanged is not read again, and one
whose content hash is unchanged is not parsed again; a changed file is replaced and a deleted
one removed. Each document is written in one transaction. A file that cannot be read is
skipped with its reason and its indexed version, if any, is kept: a run loses nothing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from metis_lite import parsing
from metis_lite.chunking import chunk
from metis_lite.errors import ModelAnswerInvalid, ModelError, ParseError
from metis_lite.models.base import Embedder
from metis_lite.records import Warning
from metis_lite.settings import EMBED_BATCH
from metis_lite.store import Store

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
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: list[Skip] = field(default_factory=list)


@dataclass(frozen=True)
class _File:
    path: Path
    name: str  # inside its source, '/'-separated
    kind: str


def walk(root: Path, skipped: list[Skip], source: str) -> Iterator[_File]:
    """The files of a source folder a base reads, in a stable order; symlinks that lead
    outside the folder are skipped with their reason, folders behind symlinks not followed."""
    real_root = root.resolve()
    for folder, dirs, files in os.walk(root, followlinks=False, onerror=None):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(folder, name)
            relative = path.relative_to(root).as_posix()
            kind = parsing.kind_of(path)
            if kind is None:
                continue
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(real_root):
                    skipped.append(Skip(f"{source}/{relative}", "symlink leads outside the source"))
                    continue
            yield _File(path, relative, kind)


def index_sources(
    store: Store,
    *,
    chunk_size: int,
    max_file_bytes: int,
    progress: Progress | None = None,
) -> tuple[_Tally, list[Warning]]:
    """Bring every folder source's documents up to date (no embedding)."""
    tally = _Tally()
    warnings: list[Warning] = []
    for source_id, source_name, folder in store.sources():
        if folder is None:
            continue  # the base's own notes source
        root = Path(folder)
        if not root.is_dir():
            reason = "source folder is missing" if not root.exists() else "source is not a folder"
            tally.skipped.append(
                Skip(f"{source_name}/", f"{reason} ({root}); its documents are kept")
            )
            continue
        files = list(walk(root, tally.skipped, source_name))
        stored = store.documents_of(source_id)
        for done, file in enumerate(files, start=1):
            _index_file(
                store,
                source_id,
                source_name,
                file,
                stored.get(file.name),
                tally,
                chunk_size=chunk_size,
                max_file_bytes=max_file_bytes,
            )
            if progress:
                progress("files", done, len(files))
        present = {f.name for f in files}
        for name, document in stored.items():
            if name not in present and not (root / name).exists():
                store.remove_document(document.id)
                tally.removed += 1
    return tally, warnings


def _index_file(store, source_id, source_name, file, stored, tally, *, chunk_size, max_file_bytes):
    label = f"{source_name}/{file.name}"
    try:
        stat = file.path.stat()
        if stat.st_size > max_file_bytes:
            tally.skipped.append(
                Skip(label, f"larger than the base's limit of {max_file_bytes:,} bytes")
            )
            return
        if stored and stored.size == stat.st_size and stored.mtime == stat.st_mtime:
            tally.unchanged += 1
            return
        data = file.path.read_bytes()
    except OSError as exc:
        tally.skipped.append(Skip(label, f"cannot be read: {exc.strerror or exc}"))
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
        size=stat.st_size,
        mtime=stat.st_mtime,
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
