"""The Python API: open a base, index its sources, search it, read its status.

    from metis_lite import Base
    with Base.open("handbook.db", create=True) as base:
        base.add_source("examples/handbook")
        report = base.index()
        answer = base.search("how many holidays do I get")

The CLI and the HTTP service are built on this class and nothing else.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

import apsw

from metis_lite import connection, ingest, keyword, languages, memory, publish
from metis_lite.bm25 import WordIndex
from metis_lite.chunking import check_chunk_size
from metis_lite.dense import VectorIndex
from metis_lite.errors import BaseDamaged, BaseReadOnly, InvalidRequest, ModelError
from metis_lite.models import registry
from metis_lite.models.base import Embedder, Reranker
from metis_lite.models.prefixes import prefixes_for
from metis_lite.records import Answer, Filters, SourceInfo, Warning
from metis_lite.search import SearchContext, search
from metis_lite.settings import BASE_KINDS, FUSION, FUSIONS, TOP_K
from metis_lite.spec import DEFAULT_SPEC, BaseSpec, parse_spec
from metis_lite.store import IndexerLock, Publication, Store
from metis_lite.store.pool import StorePool

__all__ = ["DEFAULT_SPEC", "Base", "BaseStatus", "SourceInfo"]

COUNT_FLUSH_S = 5.0
"""Search counts are written at most this often (and when the base closes), not per search;
a flush that finds another connection writing keeps its count for the next one."""

CONNECTIONS = 16
"""Connections a Base keeps for its searches, facts and status (StorePool): as many searches
of one base run at once, the service's default number of workers; more wait for one to end."""

WARM_S = 120.0
"""How long `warm` waits for the words index to be read into memory; past it the new copy is
served anyway, FTS5 answering by words until the index is read."""

LANGUAGE_SAMPLE_CHUNKS = 256
"""Chunks read to judge a base's languages: a share's error is then under ±3 points (√(¼/256)),
far inside the 50 % a warning needs; a smaller base is read whole."""

LANGUAGE_SAMPLE_CHARS = 600
"""Characters read of each sampled chunk: about 100 words, enough to tell its language."""


@dataclass(frozen=True)
class BaseStatus:
    name: str
    path: str
    kind: str
    state: str  # Indexing or Waiting
    sources: tuple[SourceInfo, ...]
    documents: int
    chunks: int
    chunks_without_vector: int
    kinds: dict[str, int]
    embedding: str
    reranker: str | None
    chunk_size: int
    last_indexing: dict[str, Any] | None
    searches_per_day: dict[str, int]
    warnings: tuple[Warning, ...] = ()  # what searches by meaning suffer (MODEL_LANGUAGE_MISMATCH)
    read_only: bool = False
    """Nothing is written to the base (`serve --read-only`, or a file that cannot be written):
    no indexing, no facts, and its searches are not counted."""
    published: Publication | None = None
    """Which publication the file is, when it is a published copy (publish.py)."""


P = ParamSpec("P")
R = TypeVar("R")


def _usable(method: Callable[Concatenate[Base, P], R]) -> Callable[Concatenate[Base, P], R]:
    """BASE_DAMAGED, from the first time SQLite finds the file malformed, for every later call
    too: a damaged base is never written again by this Base (reopen it once it is replaced)."""

    @functools.wraps(method)
    def guarded(self: Base, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._damaged is not None:
            raise BaseDamaged(self._damaged)
        try:
            return method(self, *args, **kwargs)
        except (apsw.Error, BaseDamaged) as exc:
            found = connection.damage(exc, self.path)
            if found is None:
                failure = connection.read_failure(exc, self.path)  # an I/O error, said as such
                if failure is None:
                    raise
                raise failure from exc
            self._damaged = found.message
            raise BaseDamaged(found.message) from exc

    return guarded


def _writes(method: Callable[Concatenate[Base, P], R]) -> Callable[Concatenate[Base, P], R]:
    """BASE_READ_ONLY, before anything is done (not even BASE.lock made), for a write to a
    read-only Base or to a published copy."""

    @functools.wraps(method)
    def guarded(self: Base, *args: P.args, **kwargs: P.kwargs) -> R:
        if self.read_only or self.published:
            what = "served read-only" if self.read_only else "a published copy"
            raise BaseReadOnly(
                f"base {self.name} is {what}: it is searched, never written; write to the "
                "base it was published from, and publish it again"
            )
        return method(self, *args, **kwargs)

    return guarded


class Base:
    """One open base: a bounded pool of connections, its vectors in memory, its models (made
    when needed)."""

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = False,
        name: str | None = None,
        workers: int | None = None,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.workers = ingest.check_workers(workers)
        """Cores its indexing (parse processes) and its embedded models (threads) use; None:
        every core the process may run on."""
        self.created = create and not self.path.exists()
        """True when this Base made the file (discard() removes it while it is still empty)."""
        self._damaged: str | None = None
        self._local = threading.local()
        self._thread_stores: weakref.WeakSet[Store] = weakref.WeakSet()
        self._spec_cache: tuple[tuple[int, int, int], BaseSpec] | None = None
        self.read_only = read_only
        """Nothing is written to the file: no indexing, no facts, no search counts (`serve
        --read-only`). Its connections all open at once, of one file (publish.open_copy)."""
        self.copy: publish.Copy | None = None
        """The file a read-only Base serves, as it was when it opened."""
        self._handed: list[object] = []  # models a newer copy took over (take_models)
        self.warmed = False
        """What searches read is in memory (`warm` ran to its end)."""
        self._pool = StorePool(self.path, size=CONNECTIONS, opener=self._connect)
        first, *spare = self._open_stores(create)
        try:
            if create and not first.spec():
                first.set_spec(DEFAULT_SPEC)
            self._spec_of(first)  # a spec this code cannot read is refused when the base opens
        except BaseException:
            for store in (first, *spare):
                store.close()
            raise
        self.published = first.publication() is not None
        """The file is a published copy (publish.py), which nothing writes."""
        self._words_store = spare.pop() if spare else None
        for store in (first, *spare):
            self._pool.adopt(store)
        self.name = name or self.path.stem
        self._models_lock = threading.Lock()
        self._embedder: Embedder | None = None
        self._reranker: Reranker | None = None
        self._vectors = VectorIndex(self._spec_of(first).model_label)
        self._words = WordIndex(self._words_connection)  # its thread's own connection
        self._pending_searches = 0
        self._last_flush = time.monotonic()
        self._count_lock = threading.Lock()
        self._languages_lock = threading.Lock()
        self._languages: tuple[tuple[int, int], languages.Profile] | None = None

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        create: bool = False,
        name: str | None = None,
        workers: int | None = None,
    ) -> Base:
        return cls(path, create=create, name=name, workers=workers)

    @property
    def store(self) -> Store:
        """This thread's own connection to the base, closed when the thread ends (or the base
        closes). The Base's own methods borrow from its pool instead."""
        if self._damaged is not None:
            raise BaseDamaged(self._damaged)
        holder = getattr(self._local, "holder", None)
        if holder is None:
            holder = self._local.holder = _ThreadStore(self._connect())
            self._thread_stores.add(holder.store)
        return holder.store

    def _open_stores(self, create: bool) -> list[Store]:
        """The first connection; for a read-only Base, every one it will use (the pool's and
        the words index's), all of one file (publish.open_copy)."""
        if not self.read_only:
            return [Store(self.path, create=create)]
        if create:
            raise InvalidRequest("a read-only base is never created: name one that exists")
        self.copy, stores = publish.open_copy(self.path, CONNECTIONS + 1)
        return stores

    def _connect(self) -> Store:
        """A new connection; a read-only Base's only to the file it opened (publish.reopen)."""
        return Store(self.path) if self.copy is None else publish.reopen(self.copy)

    def _words_connection(self) -> Store:
        store, self._words_store = self._words_store, None
        return store or self._connect()

    def close(self) -> None:
        self._words.close()
        self._flush_counts(force=True)
        for model in (self._embedder, self._reranker):
            if model is not None and model not in self._handed:
                model.close()
        self._pool.close()
        for store in list(self._thread_stores):
            store.close()
        if self._words_store is not None:  # the words index never started
            self._words_store.close()

    def __enter__(self) -> Base:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        """Close; a base this Base created that a failure left empty is deleted (discard)."""
        if exc_type is not None and self.created:
            self.discard()
        else:
            self.close()

    def discard(self) -> bool:
        """Close, and delete the file if this Base created it and nothing was written to it
        since (no source, no document): a command that failed before it had anything to write
        leaves no new file behind. Returns whether it was deleted.

        SQLite removes the -wal and -shm itself, by leaving WAL mode, which it does only while
        no other connection has the base open: one that does keeps the file."""
        empty = False
        self._words.close()  # its connection would keep the base in WAL mode
        if self.created and self._damaged is None:
            self._flush_counts(force=True)
            with self._pool.borrow() as store:
                counts = store.counts()
                empty = not counts["sources"] and not counts["documents"]
                if empty:
                    empty = _leave_wal(store)
        self.close()
        if empty:
            self.path.unlink(missing_ok=True)
            Path(f"{self.path}.lock").unlink(missing_ok=True)
        return empty

    # -- spec -------------------------------------------------------------------------------

    @property
    @_usable
    def spec(self) -> BaseSpec:
        """The base's spec, parsed once and again only after a write to the base (by this or
        another connection: `configure` here, an `index --chunk-size` elsewhere)."""
        with self._pool.borrow() as store:
            return self._spec_of(store)

    def _spec_of(self, store: Store) -> BaseSpec:
        key = (id(store), store.data_version(), store.db.total_changes())
        cached = self._spec_cache
        if cached is None or cached[0] != key:
            cached = self._spec_cache = (key, parse_spec(store.spec(), where=str(self.path)))
        return cached[1]

    @property
    def model_label(self) -> str:
        """The name recorded on every vector; vectors of another label are never compared."""
        return self.spec.model_label

    @property
    @_usable
    def notes_source(self) -> str:
        """The name of the base's notes source, set when the base was made (schema.py)."""
        with self._pool.borrow() as store:
            return store.notes_source()

    @_writes
    @_usable
    def configure(
        self,
        *,
        embedding: Mapping[str, Any] | None = None,
        reranker: Mapping[str, Any] | None | Literal[False] = False,
        chunk_size: int | None = None,
        kind: str | None = None,
        reembed: bool = False,
        fusion: str | None = None,
    ) -> None:
        """Change the base's spec. A new embedding model needs `reembed` once the base has
        vectors (never mixed vectors); chunk size and kind are set when the base is empty;
        `fusion` ("relative" or "rrf", fusion.py) may change at any time."""
        with self._pool.borrow() as store:
            spec = self._spec_of(store)
            changes: dict[str, Any] = {}
            counts = store.counts()
            if embedding is not None and dict(embedding) != dict(spec.embedding):
                registry.check_embedding_spec(embedding)
                new_label = registry.model_label(embedding)
                if counts["vectors"] and new_label != spec.model_label and not reembed:
                    raise InvalidRequest(
                        f"the base's vectors were made by {spec.model_label}; to use {new_label} "
                        "index with --reembed (every chunk is embedded again)"
                    )
                changes["embedding"] = dict(embedding)
                changes["dimension"] = None
            if reranker is not False:
                registry.check_reranker_spec(reranker or None)
                changes["reranker"] = dict(reranker) if reranker else None
            if chunk_size is not None and chunk_size != spec.chunk_size:
                if counts["chunks"]:
                    raise InvalidRequest(
                        "the chunk size is set when a base is created (it is not empty)"
                    )
                changes["chunk_size"] = check_chunk_size(chunk_size)
            if kind is not None and kind != spec.kind:
                if kind not in BASE_KINDS:
                    raise InvalidRequest(f"unknown base kind {kind!r}: {', '.join(BASE_KINDS)}")
                if counts["documents"]:
                    raise InvalidRequest(
                        "a base's kind is chosen when it is created (it is not empty)"
                    )
                changes["kind"] = kind
            if fusion is not None and fusion != spec.fusion:
                if fusion not in FUSIONS:
                    raise InvalidRequest(f"unknown fusion {fusion!r}: {', '.join(FUSIONS)}")
                changes["fusion"] = fusion
            if not changes:
                return
            store.set_spec(changes)
            label = self._spec_of(store).model_label
        with self._models_lock:
            for model in (self._embedder, self._reranker):
                if model is not None:
                    model.close()
            self._embedder = self._reranker = None
        self._vectors = VectorIndex(label)

    # -- models -----------------------------------------------------------------------------

    def embedder(self) -> Embedder:
        """The base's embedding model; an HTTP one is told the dimension the base's vectors
        have, so one wrong answer is refused rather than learnt (and every right one after
        it refused in turn)."""
        return self._embedder_of(self.spec)

    def _embedder_of(self, spec: BaseSpec) -> Embedder:
        with self._models_lock:
            if self._embedder is None:
                self._embedder = _new_embedder(spec, self.workers)
            return self._embedder

    def reranker(self) -> Reranker | None:
        return self._reranker_of(self.spec)

    def _reranker_of(self, spec: BaseSpec) -> Reranker | None:
        with self._models_lock:
            if self._reranker is None and spec.reranker:
                self._reranker = registry.reranker_from_spec(spec.reranker, workers=self.workers)
            return self._reranker

    def prefixes(self) -> tuple[str, str]:
        return _prefixes(self.spec)

    # -- sources and indexing ---------------------------------------------------------------

    @_writes
    @_usable
    def add_source(self, folder: str | Path, *, name: str | None = None) -> str:
        """Add a folder as a source (named after the folder unless named); returns its name.
        A folder that is a source already keeps its name; one inside a source, or holding
        one, is refused (SOURCE_OVERLAP, naming both): no file is indexed twice."""
        path = Path(folder).expanduser().resolve()
        if not path.is_dir():
            raise InvalidRequest(f"{folder} is not a folder")
        try:
            str(path).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequest(
                f"{folder!r}: a source folder's path must be valid UTF-8"
            ) from None
        with self._pool.borrow() as store:
            known = {n: p for _, n, p in store.sources()}
            for existing, existing_path in known.items():
                if existing_path == str(path):
                    return existing
            name = name or path.name or "root"
            if name.startswith("metis-"):
                raise InvalidRequest(
                    "source names starting with metis- are reserved for a base's notes"
                )
            base_name, n = name, 2
            while name in known:
                name, n = f"{base_name}-{n}", n + 1
            store.add_source(name, str(path))
        return name

    @_usable
    def sources(self) -> tuple[SourceInfo, ...]:
        """The base's sources, in the order they were added, with their documents and chunks
        (the notes source, metis-<base>, has no folder)."""
        with self._pool.borrow() as store:
            return store.source_infos()

    @_writes
    @_usable
    def remove_source(self, name: str) -> int:
        """Remove a folder source with its documents (their chunks, words and vectors), in one
        transaction; returns the documents removed. SOURCE_NOT_FOUND for an unknown name,
        BASE_BUSY while the base is being indexed; the notes source cannot be removed."""
        with IndexerLock(self.path), self._pool.borrow() as writer:
            return writer.remove_source(name)

    @_writes
    @_usable
    def index(
        self,
        *,
        reembed: bool = False,
        progress: ingest.Progress | None = None,
        workers: int | None = None,
    ) -> ingest.IndexReport:
        """Index every source again (only what changed), each document searchable by words
        once written, and embed chunks lacking a vector alongside (ingest.index does the run
        and its report). `workers`: cores the run uses (parse processes, and the embedded
        model's threads), by default the Base's `workers`.

        Refused with BASE_BUSY while another process indexes this base. Runs on its own
        connection, so searches on this Base see only whole documents meanwhile.
        """
        workers = ingest.check_workers(workers)
        own: list[Embedder] = []
        with IndexerLock(self.path), self._pool.borrow() as writer:
            spec = parse_spec(writer.spec(), where=str(self.path))

            def embedder() -> Embedder:
                if workers is None or workers == self.workers:
                    return self._embedder_of(spec)
                own.append(_new_embedder(spec, workers))  # this run's, on its own cores
                return own[-1]

            try:
                return ingest.index(
                    writer,
                    spec,
                    embedder,
                    document_prefix=_prefixes(spec)[1],
                    reembed=reembed,
                    progress=progress,
                    workers=self.workers if workers is None else workers,
                )
            finally:
                for model in own:
                    model.close()

    def _embed_missing(self, writer: Store) -> None:
        """Give a vector to every chunk lacking one; a model that is down leaves them waiting."""
        spec = parse_spec(writer.spec(), where=str(self.path))
        _, dimension, _ = ingest.embed_missing(
            writer,
            lambda: self._embedder_of(spec),
            model=spec.model_label,
            document_prefix=_prefixes(spec)[1],
            dimension=spec.dimension,
        )
        if dimension is not None and spec.dimension != dimension:
            writer.set_spec({"dimension": dimension})

    # -- facts ------------------------------------------------------------------------------

    @_writes
    @_usable
    def remember(
        self,
        text: str,
        *,
        stated_at: str | None = None,
        subject: str | None = None,
        key: str | None = None,
        replaces: Sequence[int] = (),
    ) -> memory.Fact:
        """Add a fact (a note of the base's notes source) and embed it when the model answers;
        a newer fact with the same key, or one naming it in `replaces`, replaces another."""
        with self._pool.borrow() as writer:
            fact = memory.add_fact(
                writer,
                text=text,
                stated_at=stated_at,
                subject=subject,
                key=key,
                replaces=replaces,
            )
            self._embed_missing(writer)
        return fact

    @_usable
    def facts(
        self, *, offset: int = 0, limit: int = 50, holding: bool | None = None
    ) -> tuple[list[memory.Fact], int]:
        with self._pool.borrow() as store, store.snapshot():
            return memory.list_facts(store, offset=offset, limit=limit, holding=holding)

    # -- search -----------------------------------------------------------------------------

    @_usable
    def search(
        self,
        question: str,
        *,
        mode: str = "hybrid",
        top_k: int = TOP_K,
        rerank: bool = True,
        filters: Filters | None = None,
        fusion: str | None = None,
    ) -> Answer:
        """Answer a question (search.py's steps); `fusion` ("relative" or "rrf") overrides the
        base's `spec.fusion` for this search. Every read of one search is of one snapshot of
        the base, on one connection borrowed from the pool."""
        if not isinstance(question, str):
            raise InvalidRequest("the question must be text")
        with self.searching() as context:
            return search(
                context,
                question,
                mode=mode,
                top_k=top_k,
                rerank=rerank,
                filters=filters or Filters(),
                fusion=fusion,
            )

    @contextmanager
    def searching(self) -> Iterator[SearchContext]:
        """What a search needs of this base until the block ends: one connection borrowed from
        the pool, every read of one snapshot of the base; the search is counted after. A
        search of several bases holds one of each while it fuses them (multi.py)."""
        if self._damaged is not None:
            raise BaseDamaged(self._damaged)
        with self._pool.borrow() as store:
            with store.snapshot():
                spec = self._spec_of(store)
                yield SearchContext(
                    store=store,
                    vectors=self._vectors,
                    words=self._words,
                    embedder=lambda: self._embedder_of(spec),
                    reranker=lambda: self._reranker_of(spec),
                    query_prefix=_prefixes(spec)[0],
                    fusion=spec.fusion or FUSION,
                    base=self.name,
                    memory_order=memory.holding_first if spec.is_memory else None,
                    facts_of=memory.facts_of_chunks,
                    language_warning=lambda: self._language_warning(store, spec),
                )
            self._count_search(store)

    def _count_search(self, store: Store) -> None:
        if self.read_only:
            return  # a reader writes nothing, not even a count
        with self._count_lock:
            self._pending_searches += 1
        self._flush_counts(store)

    def _flush_counts(self, store: Store | None = None, *, force: bool = False) -> None:
        """Write the searches counted since the last flush: after a search only when
        COUNT_FLUSH_S has passed and no other connection is writing (a search never waits on
        a writer; the count waits for the next flush), and at close whatever it takes."""
        with self._count_lock:
            due = force or time.monotonic() - self._last_flush >= COUNT_FLUSH_S
            if not due or not self._pending_searches or self._damaged is not None:
                return
            pending, self._pending_searches = self._pending_searches, 0
            self._last_flush = time.monotonic()
        try:
            if store is not None:
                written = store.count_searches(pending, wait=force)
            else:
                with self._pool.borrow() as borrowed:
                    written = borrowed.count_searches(pending, wait=force)
        except Exception:
            written = False
            if not force:
                raise
        if not written:
            with self._count_lock:
                self._pending_searches += pending

    # -- status -----------------------------------------------------------------------------

    @_usable
    def status(self) -> BaseStatus:
        self._flush_counts(force=True)
        indexing = IndexerLock(self.path).held_elsewhere()
        with self._pool.borrow() as store, store.snapshot():
            spec = self._spec_of(store)
            counts = store.counts()
            reranker = registry.model_label(spec.reranker) if spec.reranker else None
            last = store.last_run()
            if last is not None and last["state"] == "running" and not indexing:
                last = {**last, "state": "interrupted"}  # its indexer died; the next run goes on
            return BaseStatus(
                name=self.name,
                path=str(self.path),
                kind=spec.kind,
                state="Indexing" if indexing else "Waiting",
                sources=store.source_infos(),
                documents=counts["documents"],
                chunks=counts["chunks"],
                chunks_without_vector=counts["chunks"] - store.chunks_with_vector(spec.model_label),
                kinds=store.kinds(),
                embedding=spec.model_label,
                reranker=reranker,
                chunk_size=spec.chunk_size,
                last_indexing=last,
                searches_per_day=store.search_counts(),
                read_only=self.read_only or store.db.readonly("main"),
                published=store.publication(),
                warnings=(
                    *(w for w in (self._language_warning(store, spec),) if w is not None),
                    *keyword.index_warnings(store),
                    *self._vector_warnings(spec, counts["chunks"], store, indexing=indexing),
                ),
            )

    def _vector_warnings(
        self, spec: BaseSpec, chunks: int, store: Store, *, indexing: bool
    ) -> tuple[Warning, ...]:
        """CHUNKS_WITHOUT_VECTORS while chunks wait for their vectors (found by words only):
        being embedded while a run is on, else until a run reaches the model; saying why when
        the embedding model cannot even load (not installed: how to install)."""
        waiting = chunks - store.chunks_with_vector(spec.model_label)
        if waiting <= 0:
            return ()
        why = "found by words only until an index run reaches the embedding model"
        if indexing:
            why = "an index run is on: they are being embedded, found by words meanwhile"
        try:
            self._embedder_of(spec)
        except ModelError as exc:
            why = f"{exc.message}; found by words only until then"
        message = f"{waiting} of {chunks} chunks have no vector yet: {why}"
        return (Warning("CHUNKS_WITHOUT_VECTORS", message),)

    # -- a reader's copy --------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Store]:
        """A connection borrowed from the pool, inside one snapshot, until the block ends (a
        document or passage read back): never a thread's own one, so a read-only Base reads
        only the file it opened."""
        if self._damaged is not None:
            raise BaseDamaged(self._damaged)
        with self._pool.borrow() as store, store.snapshot():
            yield store

    @_usable
    def served_copy(self) -> publish.Copy:
        """Which file this Base serves and the last indexing run it holds: a read-only Base's
        as it opened it, another's as its path is now."""
        with self._pool.borrow() as store, store.snapshot():
            copy = self.copy
            if copy is None:
                state = publish.file_state(self.path)
                copy = publish.Copy(self.path, state, False, store.publication())
            return publish.with_last_run(copy, store)

    @_usable
    def warm(self, timeout_s: float = WARM_S) -> None:
        """Read into memory now what searches read (the vectors, the words index, the sample
        of languages), rather than in the first searches: a reader does it before it switches
        to a new copy, and to each base it opened when it starts (copies.py). Until then
        FTS5 answers by words, slower."""
        with self._pool.borrow() as store, store.snapshot():
            self._vectors.sync(store)
            words = self._words.wait(store, timeout_s)
            self._language_profile(store)
        self.warmed = words

    def take_models(self, older: Base) -> None:
        """Use the models `older` made where this base names the same ones (a newer copy of
        the base `older` serves), so a switch loads none again; `older` leaves them open."""
        mine, theirs = self.spec, older.spec
        with older._models_lock, self._models_lock:
            same = (mine.embedding, mine.dimension) == (theirs.embedding, theirs.dimension)
            if same and older._embedder is not None and self._embedder is None:
                self._embedder = older._embedder
                older._handed.append(older._embedder)
            if mine.reranker == theirs.reranker and older._reranker is not None:
                if self._reranker is None:
                    self._reranker = older._reranker
                    older._handed.append(older._reranker)

    # -- languages --------------------------------------------------------------------------

    @_usable
    def language_profile(self) -> languages.Profile:
        """The scripts and languages of a sample of the base's chunks, made again only when
        chunks were added or removed (a search of an unchanged base pays one cached check)."""
        with self._pool.borrow() as store:
            return self._language_profile(store)

    def _language_profile(self, store: Store) -> languages.Profile:
        generation = store.chunks_generation()
        with self._languages_lock:
            if self._languages is None or self._languages[0] != generation:
                sample = store.chunk_sample(LANGUAGE_SAMPLE_CHUNKS, LANGUAGE_SAMPLE_CHARS)
                self._languages = (generation, languages.profile_of(sample))
            return self._languages[1]

    def language_warning(self) -> Warning | None:
        """MODEL_LANGUAGE_MISMATCH when most of the base is text its embedding model does not
        read (languages.py); judged by the model's name, without loading or calling it."""
        with self._pool.borrow() as store:
            return self._language_warning(store, self._spec_of(store))

    def _language_warning(self, store: Store, spec: BaseSpec) -> Warning | None:
        model = spec.embedding.get("model") or spec.model_label
        return languages.mismatch(self._language_profile(store), model)


class _ThreadStore:
    """Holds one thread's Store (in the Base's threading.local): when the thread ends, the
    holder goes and its connection is closed with it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        weakref.finalize(self, store.close)


def _new_embedder(spec: BaseSpec, workers: int | None) -> Embedder:
    """The base's embedding model; an HTTP one is told the dimension the base's vectors have."""
    embedding = dict(spec.embedding)
    if spec.dimension and embedding.get("provider", "embedded") != "embedded":
        embedding = {"dimension": spec.dimension, **embedding}
    return registry.embedder_from_spec(embedding, workers=workers)


def _prefixes(spec: BaseSpec) -> tuple[str, str]:
    embedding = spec.embedding
    return prefixes_for(
        embedding.get("model") or spec.model_label,
        query_prefix=embedding.get("query_prefix"),
        document_prefix=embedding.get("document_prefix"),
    )


def _leave_wal(store: Store) -> bool:
    """Switch the base out of WAL mode, which SQLite does (deleting the -wal and -shm) only
    while this is the one connection open to it; False when another one is."""
    try:
        mode = store.db.execute("PRAGMA journal_mode = DELETE").fetchone()
    except apsw.Error:
        return False
    return mode is not None and str(mode[0]).lower() == "delete"
