"""Document → chunks → index: one indexing run of a base, and its report (`index`).

A run lists each source (walk.py: a folder's files but those its rules exclude, ignore.py; a
file source's one file; a watch batch's changed files alone, changed.py), then reads what
changed, file by file, and hands each changed file's bytes to the parse workers (parse_pool.py:
a process per core the indexer may run on, or this process for a run with little to parse);
each document is written with its chunks and words in one transaction as soon as it is parsed,
in the order the files were read, while a thread embeds the chunks that lack a vector
(alongside, for a model on another machine; once every file is written, for the embedded model,
which needs the cores the workers use) and their vectors are written between documents
(pipeline.py). So a folder is searchable by words moments after its files are parsed, and by
meaning as the vectors arrive. The run is recorded in `runs` and reported as an IndexReport.
Incremental: a file whose size and modification time are unchanged is not read again, and one
whose content hash is unchanged is not parsed again; a changed file is replaced and a deleted
one removed.

What is read is what was checked: each file is opened once, here, in the indexer, without
following a link it did not check, and the opened descriptor itself must be a regular file
whose real path lies inside the source (so a file swapped for a link during the run is never
read); workers receive bytes, never a path. Nothing a folder holds stops a run: a name that is
not UTF-8, a symlink loop or one leading outside, a FIFO, a socket, a device, a file that
vanishes, a permission error — each is skipped with its reason, and a document whose file
became so is removed. A file that cannot be parsed, is too large, changes while read or kills
the worker parsing it is skipped and its indexed version kept (it may be whole again next run),
removed when the file holds nothing to read now (empty, no text, only links: NOTHING_TO_READ).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from metis_lite.errors import InvalidRequest, ModelError
from metis_lite.indexing import workers as parse_workers
from metis_lite.indexing.changed import Only, among, list_source, scoped
from metis_lite.indexing.document_copies import CopyRun
from metis_lite.indexing.ignore import check_excludes
from metis_lite.indexing.ocr_pages import told_to
from metis_lite.indexing.ocr_run import OcrRun
from metis_lite.indexing.parse_pool import Parsed, ParseJob, ParsePool
from metis_lite.indexing.pipeline import Embedding, Interrupted, Pipeline, Progress
from metis_lite.indexing.site_titles import SiteTitles
from metis_lite.indexing.walk import Skip, SourceFile, file_gone, source_kind, walk_file
from metis_lite.models.base import Embedder
from metis_lite.models.batching import allowed_cores
from metis_lite.parsing.common import NOTHING_TO_READ
from metis_lite.records import MetisWarning
from metis_lite.settings import EMBED_BATCH
from metis_lite.store import Store, StoredDocument
from metis_lite.store.files import Unreadable, open_inside, read_all
from metis_lite.store.spec import BaseSpec
from metis_lite.text import chunking, tokenizer

__all__ = [
    "IndexReport",
    "Progress",
    "Skip",
    "check_excludes",
    "check_workers",
    "embed_missing",
    "index",
    "source_kind",
]

SOURCE_IS_A_LINK = "SOURCE_IS_A_LINK"
"""The warning of a run that found a source folder replaced by a symlink (never followed)."""

NO_DOCUMENTS = "NO_DOCUMENTS"
"""The warning of a run that indexes nothing of a folder because its rules exclude it all
(the search's warning of a base with no document has the same code)."""

PARSE_WORKERS_UNAVAILABLE = "PARSE_WORKERS_UNAVAILABLE"
"""The warning of a run whose worker processes could not start: it parsed in this process."""

WORKERS_MAX = 256
"""The most workers a run may be asked for: more than the cores of any machine a base is
built for (a run starts no more parse processes than it has files to parse, either)."""


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
    warnings: tuple[MetisWarning, ...] = ()
    workers: int = 1
    """Processes that parsed the run's files (1: this process)."""
    words_seconds: float = 0.0
    """Seconds from the run's start until every file it read was written, chunks and words:
    searchable by words from then on (vectors may still be arriving)."""
    interrupted: bool = False
    """Stopped (`stop`) between two transactions: `embedded` of `embedded + without_vector`."""


@dataclass
class _Tally:
    """What a run did so far (private to the run; the report is the IndexReport)."""

    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: list[Skip] = field(default_factory=list)
    warnings: list[MetisWarning] = field(default_factory=list)
    ocr: OcrRun = field(default_factory=OcrRun)
    copies: CopyRun = field(default_factory=CopyRun)

    def counts(self) -> dict[str, int]:
        """The counts `runs` records of the run."""
        return {
            "added": self.added,
            "updated": self.updated,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "skipped": len(self.skipped),
        }


@dataclass(frozen=True)
class _Source:
    """A source as a run reads it: its files listed, its documents as stored."""

    id: int
    name: str
    root: str  # its folder (or file), real when added: a link swapped in later leads outside
    files: tuple[SourceFile, ...]
    stored: dict[str, StoredDocument]
    held: tuple[str, ...] = ()  # folders whose documents are kept as they are (walk.Listing)
    pages: tuple[SourceFile, ...] | None = None  # a site's HTML pages (None: files; changed.py)


def index(
    store: Store,
    spec: BaseSpec,
    embedder: Callable[[], Embedder],
    *,
    document_prefix: str,
    reembed: bool = False,
    progress: Progress | None = None,
    workers: int | None = None,
    stop: threading.Event | None = None,
    only: Only | None = None,
) -> IndexReport:
    """One indexing run on `store` (a writer connection; the caller holds the IndexerLock):
    bring every folder source's documents up to date, and give the chunks lacking a vector
    theirs (alongside, or after the words: see the module). `workers`: processes that parse,
    by default one per core this process may run on (models.batching.allowed_cores); `stop`,
    once set, ends it at its next point between transactions (pipeline.py), `interrupted`;
    `only`: the sources to read, each by the paths that changed (changed.py; None: walked),
    the others left as they are (an `index --watch` batch: its run).

    The run is recorded in `runs`, its counts with each transaction of documents (status says
    them while it goes on): interrupted when stopped (or by a KeyboardInterrupt, raised on),
    failed when it raised. A words index built by older word
    rules is first built again by today's (Store.rebuild_words); documents cut by older
    chunking rules are read and cut again, changed or not, and keep the vectors of the chunks
    whose text is unchanged (Store.replace_document), and once every source was read the base
    records today's rules; `reembed` drops every vector first, else only those of another model.
    """
    started = time.perf_counter()
    run = store.start_run()
    tally = _Tally()
    embedding: Embedding | None = None
    pipe: Pipeline | None = None
    pool_size = 1
    state = "failed"
    counted = False  # the tally is what was committed: the run stopped between transactions
    try:
        if store.words_outdated:
            store.rebuild_words()
        store.drop_vectors(except_model=None if reembed else spec.model_label)
        sources = _list_sources(store, tally, None if store.chunks_outdated else only)  # all
        if stop is not None and stop.is_set():  # asked while the folders were walked
            raise Interrupted
        listed = {source.id for source in sources}
        every_source = not any(  # each source with documents is read: none is left as it was
            store.documents_of(i) for i, _, path in store.sources() if path and i not in listed
        ) and not any(source.held for source in sources)
        if store.chunks_outdated:
            kinds = chunking.kinds_cut_otherwise(store.chunk_rules)
            sources = [_cut_again(source, kinds) for source in sources]
        embedding = Embedding(
            store,
            embedder,
            model=spec.model_label,
            document_prefix=document_prefix,
            dimension=spec.dimension,
            batch=EMBED_BATCH,
            progress=progress,
            alongside=spec.embedding.get("provider", "embedded") != "embedded",
            stop=stop,
        )
        pool_size = _pool_size(sources, allowed_cores() if workers is None else workers)
        with ParsePool(pool_size, told_to(progress)) as pool:  # and the pages OCR reads
            files = sum(len(s.files) for s in sources)
            pipe = Pipeline(
                store,
                pool,
                embedding,
                files=files,
                progress=progress,
                written=lambda: store.record_run(run, **tally.counts()),
            )
            for source in sources:
                _index_source(
                    store,
                    source,
                    pipe,
                    tally,
                    chunk_size=spec.chunk_size,
                    max_file_bytes=spec.max_file_bytes,
                    words_version=store.words_version if pool_size > 1 else None,
                )
            pipe.finish_words()
        if pool.fallback is not None:
            tally.warnings.append(MetisWarning(PARSE_WORKERS_UNAVAILABLE, pool.fallback))
        tally.warnings += tally.ocr.warnings()
        pipe.finish_vectors()  # the workers have ended: their cores are the embedding's now
        if embedding.failure is not None:
            tally.warnings.append(_waiting_warning(embedding.failure, embedding.waiting()))
        if embedding.dimension is not None and embedding.dimension != spec.dimension:
            store.set_spec({"dimension": embedding.dimension})
        if every_source and store.chunk_rules < chunking.RULES_VERSION:
            store.set_chunk_rules(chunking.RULES_VERSION)
        state, counted = "done", True
    except Interrupted:
        state, counted = "interrupted", True
    except KeyboardInterrupt:
        state = "interrupted"  # Ctrl-C where nothing set `stop` (at any point): raised on
        raise
    finally:
        if embedding is not None:
            embedding.close()
        embedded = embedding.written if embedding is not None else 0
        counts = {**tally.counts(), "embedded": embedded} if counted else {}
        store.finish_run(run, state=state, **counts)  # else the counts as recorded so far
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
        workers=pool_size,
        words_seconds=round(pipe.words_seconds or 0.0, 3) if pipe is not None else 0.0,
        interrupted=state == "interrupted",
    )


def check_workers(workers: object) -> int | None:
    """`workers` as given (None: every core), or INVALID_REQUEST for what is not a whole
    number from 1 to WORKERS_MAX."""
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= WORKERS_MAX:
        raise InvalidRequest(
            f"workers must be a whole number from 1 to {WORKERS_MAX}, not {workers!r}"
        )
    return workers


def _list_sources(store: Store, tally: _Tally, only: Only | None) -> list[_Source]:
    """Every source the run reads (`only`'s: index), its files listed; a source that cannot be
    read is skipped with why (its documents kept), one inside another has its documents removed."""
    folders = [(i, n, p) for i, n, p in store.sources() if p is not None]  # not the notes
    options = store.source_options()
    sources = []
    for source_id, source_name, folder in among(folders, only):
        root = Path(folder)
        read = options.get(source_id)
        is_file = read is not None and read.kind == "file"
        link = _linked(root, "file" if is_file else "folder")
        if link is not None:
            tally.skipped.append(Skip(f"{source_name}/", f"{link}; its documents are kept"))
            tally.warnings.append(MetisWarning(SOURCE_IS_A_LINK, f"{source_name}: {link}"))
            continue
        if is_file:
            if _file_is_there(store, source_id, source_name, root, tally):
                files = walk_file(root, source_name).files
                sources.append(
                    _Source(source_id, source_name, folder, files, store.stored_of(source_id))
                )
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
        try:
            listing = list_source(
                root,
                tally.skipped,
                source_name,
                excludes=read.excludes if read else (),
                no_ignore=read.no_ignore if read else False,
                warnings=tally.warnings,
                paths=only.get(source_name) if only is not None else None,
            )
        except Unreadable as exc:
            tally.skipped.append(Skip(f"{source_name}/", f"{exc.reason}; its documents are kept"))
            continue
        if listing.all_excluded is not None:
            tally.warnings.append(MetisWarning(NO_DOCUMENTS, listing.all_excluded))
        stored, pages = scoped(listing, partial(store.stored_of, source_id), root)
        sources.append(
            _Source(source_id, source_name, str(root), listing.files, stored, listing.held, pages)
        )
    return sources


def _file_is_there(store: Store, source_id: int, name: str, path: Path, tally: _Tally) -> bool:
    """Whether a file source is a file to read (a FIFO or such is refused when read); if it
    is gone, or a folder now, its document is removed, with why (walk.file_gone)."""
    gone = file_gone(path, name)
    if gone is None:
        return True
    code, why = gone
    if code is None:  # its folder is gone too: kept, as a missing folder's documents are
        tally.skipped.append(Skip(f"{name}/", why))
        return False
    removed = store.remove_documents_of(source_id)
    tally.removed += removed
    if removed:  # said once, by the run that removes it; later runs skip it with why
        why = f"{why}; its document was removed"
        tally.warnings.append(MetisWarning(code, f"{name}: {why}"))
    tally.skipped.append(Skip(f"{name}/", why))
    return False


def _cut_again(source: _Source, kinds: frozenset[str] | None) -> _Source:
    """The source with its documents of `kinds` (None: all) as if each had changed: read,
    parsed and cut again."""
    cut = {f.name for f in source.files if kinds is None or f.kind in kinds}
    stored = {
        name: dataclasses.replace(document, content_hash="", size=-1) if name in cut else document
        for name, document in source.stored.items()
    }
    return dataclasses.replace(source, stored=stored)


def _pool_size(sources: Sequence[_Source], workers: int) -> int:
    """Worker processes for a run: as many as asked, no more than the files that look new or
    changed (by size and time, as stat says now: the run checks each file again as it reads
    it), and none (1: this process) for little to parse (workers.py)."""
    if workers <= 1:
        return 1
    changed = []
    for source in sources:
        for file in source.files:
            stored = source.stored.get(file.name)
            try:
                now = os.stat(file.path)
            except OSError:
                continue  # skipped when read
            if stored is None or (stored.size, stored.mtime) != (now.st_size, now.st_mtime):
                changed.append((now.st_size, file.kind))
    return parse_workers.pool_size(changed, workers)


def _index_source(
    store: Store,
    source: _Source,
    pipe: Pipeline,
    tally: _Tally,
    *,
    chunk_size: int,
    max_file_bytes: int,
    words_version: int | None,
) -> None:
    """Read each file of a source, in order, and hand it to the pipeline; then remove the
    documents whose file is gone or can no longer be read. `words_version`: the workers
    find the chunks' words too, by these rules (None: FTS5 does, as the writer writes)."""
    present: set[str] = set()
    site = SiteTitles(source.pages or source.files, source.root)  # the suffix its pages share
    ocr = tally.ocr.languages(store, source.id, source.name)  # its scans' languages
    for file in source.files:
        label = f"{source.name}/{file.name}"
        stored = source.stored.get(file.name)
        try:
            read = _read(file, source.root, stored, tally, label, max_file_bytes=max_file_bytes)
        except Unreadable as exc:
            tally.skipped.append(Skip(label, exc.reason))
            pipe.read(None, _nothing)
            continue
        present.add(file.name)
        if read is None:
            pipe.read(None, _nothing)
            continue
        data, digest, before = read
        copy = tally.copies.claim(store, source.id, file, read, stored, tally, label)
        pipe.read(
            None
            if copy
            else ParseJob(
                file.name, file.kind, data, chunk_size, words_version, site.suffix(file.kind), ocr
            ),
            copy or partial(_write, store, source.id, file, digest, before, stored, tally, label),
        )
    for name, document in source.stored.items():
        if name not in present and not any(name.startswith(held) for held in source.held):
            store.remove_stored(source.id, document)  # a copy's file gone: forgotten
            tally.removed += 1


def _nothing(parsed: Parsed | None) -> int:
    return 0


def _linked(root: Path, kind: str) -> str | None:
    """Why a source folder (or file) is not read because it, or a folder above it, is now a
    symlink (it was real when added, stored resolved): a link is never followed out of what
    the base was given. None when its path is still its real path."""
    real = os.path.realpath(root)
    if real == str(root):
        return None
    what = "is now a symlink" if root.is_symlink() else "now lies behind a symlink"
    return (
        f"source {kind} {root} {what} (to {real}), which is never followed: remove the source "
        f"and add the {kind} it should read"
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


def _read(
    file: SourceFile,
    real_root: str,
    stored: StoredDocument | None,
    tally: _Tally,
    label: str,
    *,
    max_file_bytes: int,
) -> tuple[bytes, str, os.stat_result] | None:
    """A file's bytes, their sha256 and its stat as opened, when it must be parsed; None when
    it is unchanged or skipped (counted in the tally). Unreadable when it is not, or no longer,
    a regular file inside its source that can be opened (its document is then removed)."""
    fd, before = open_inside(file.path, real_root)
    try:
        if before.st_size > max_file_bytes:
            tally.skipped.append(
                Skip(label, f"larger than the base's limit of {max_file_bytes:,} bytes")
            )
            return None
        if stored and stored.size == before.st_size and stored.mtime == before.st_mtime:
            tally.unchanged += 1
            return None
        try:
            data = read_all(fd, before.st_size)
            after = os.fstat(fd)
        except OSError as exc:
            tally.skipped.append(Skip(label, f"cannot be read: {exc.strerror or exc}"))
            return None
    finally:
        os.close(fd)
    if len(data) != before.st_size or (after.st_size, after.st_mtime_ns) != (
        before.st_size,
        before.st_mtime_ns,
    ):
        tally.skipped.append(Skip(label, "changed while it was read; the next run reads it"))
        return None
    digest = hashlib.sha256(data).hexdigest()
    if stored and stored.content_hash == digest:
        tally.unchanged += 1
        return None
    return data, digest, before


def _write(
    store: Store,
    source_id: int,
    file: SourceFile,
    digest: str,
    before: os.stat_result,
    stored: StoredDocument | None,
    tally: _Tally,
    label: str,
    parsed: Parsed | None,
) -> int:
    """Write one parsed file as a document, in one transaction; returns the chunks written
    (0: it is skipped, its indexed version kept)."""
    assert parsed is not None
    if tally.ocr.note(label, parsed.refused, parsed.unread_pages, parsed.unread_why):
        return 0  # an image too small to hold text: left out unsaid (ocr_run.py)
    if parsed.refused is not None or not parsed.chunks:
        why = parsed.refused or "no text"
        if stored is not None and why in NOTHING_TO_READ:  # what it holds now: nothing
            store.remove_stored(source_id, stored)
            tally.removed, why = tally.removed + 1, f"{why}; its indexed version removed"
        tally.skipped.append(Skip(label, why))
        return 0
    preset = (
        tokenizer.preset_words(store.db, store.words_version, parsed.preset_words())
        if parsed.words
        else nullcontext()
    )
    with preset:
        store.replace_document(
            source_id=source_id,
            path=file.name,
            kind=file.kind,
            title=parsed.title,
            content_hash=digest,
            size=before.st_size,
            mtime=before.st_mtime,
            chunks=parsed.chunks,
        )
    if stored:
        tally.updated += 1
    else:
        tally.added += 1
    return len(parsed.chunks)


def embed_missing(
    store: Store,
    embedder: Callable[[], Embedder],
    *,
    model: str,
    document_prefix: str,
    dimension: int | None,
    progress: Progress | None = None,
) -> tuple[int, int | None, list[MetisWarning]]:
    """Give a vector to every chunk lacking one of `model`, in batches, each batch committed.

    Returns (vectors written, the model's dimension, warnings). A model that fails stops the
    pass with a warning; its chunks keep waiting and the next run gives them their vectors.
    Nothing waiting: the model is not even loaded.
    """
    embedding = Embedding(
        store,
        embedder,
        model=model,
        document_prefix=document_prefix,
        dimension=dimension,
        batch=EMBED_BATCH,
        progress=progress,
    )
    try:
        embedding.finish()
    finally:
        embedding.close()
    warnings = []
    if embedding.failure is not None:
        warnings.append(_waiting_warning(embedding.failure, embedding.waiting()))
    return embedding.written, embedding.dimension, warnings


def _waiting_warning(failure: ModelError, waiting: int) -> MetisWarning:
    return MetisWarning(
        failure.code,
        f"{failure.message}: {waiting} chunks wait for their vectors (found by words until "
        "the next run)",
    )
