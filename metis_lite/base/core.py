"""The Python API: open a base, index its sources, search it, read its status.

    from metis_lite import Base
    with Base.open("handbook.db", create=True) as base:
        base.add_source("examples/handbook")
        report = base.index()
        answer = base.search("how many holidays do I get")

The CLI and the HTTP service are built on this class and nothing else.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from metis_lite.base import sources
from metis_lite.base.guards import Guards, guarding, usable, writes
from metis_lite.base.models import BaseModels, SearchCount, new_embedder, prefixes
from metis_lite.base.status import BaseStatus, LanguageCache, index_warnings, vector_warnings
from metis_lite.errors import BaseDamaged, InvalidRequest
from metis_lite.models import registry
from metis_lite.models.base import Embedder, Reranker
from metis_lite.records import Answer, Filters, MetisWarning, SourceInfo
from metis_lite.retrieval import memory
from metis_lite.retrieval.bm25 import WordIndex
from metis_lite.retrieval.dense import VectorIndex
from metis_lite.retrieval.search import SearchContext, search
from metis_lite.settings import FUSION, TOP_K
from metis_lite.store import IndexerLock, Store
from metis_lite.store.pool import StorePool, ThreadStore
from metis_lite.store.spec import DEFAULT_SPEC, BaseSpec, parse_spec, spec_changes

if TYPE_CHECKING:  # imported where needed: a search runs no index (~70 ms), reads no copy
    from metis_lite.copies import publish
    from metis_lite.indexing import ingest
    from metis_lite.text import languages

__all__ = ["DEFAULT_SPEC", "Base", "BaseStatus", "SourceInfo"]

CONNECTIONS = 16
"""Connections a Base keeps for its searches, facts and status (StorePool): as many searches
of one base run at once, the service's default number of workers; more wait for one to end."""

WARM_S = 120.0
"""How long `warm` waits for the words index to be read into memory; past it the new copy is
served anyway, FTS5 answering by words until the index is read."""


class Base(Guards):
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
        self.workers = _checked_workers(workers)
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
        self.warmed = False
        """What searches read is in memory (`warm` ran to its end)."""
        self._pool = StorePool(self.path, size=CONNECTIONS, opener=self._connect)
        first, *spare = self._open_stores(create)
        try:
            with guarding(self):  # a damaged page of its spec table: BASE_DAMAGED
                if create and not first.spec():
                    first.set_spec(DEFAULT_SPEC)
                self._spec_of(first)  # a spec this code cannot read is refused when it opens
                self.published = first.publication() is not None
                """The file is a published copy (publish.py), which nothing writes."""
        except BaseException:
            for store in (first, *spare):
                store.close()
            raise
        self._words_store = spare.pop() if spare else None
        for store in (first, *spare):
            self._pool.adopt(store)
        self.name = name or self.path.stem
        self._models = BaseModels(self.workers)
        self._vectors = VectorIndex(self._spec_of(first).model_label)
        self._words = WordIndex(self._words_connection)  # its thread's own connection
        self._searched = False  # the first search goes by FTS5 alone (bm25.py says why)
        self._counts = SearchCount()
        self._languages = LanguageCache()

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
            holder = self._local.holder = ThreadStore(self._connect())
            self._thread_stores.add(holder.store)
        return holder.store

    def _open_stores(self, create: bool) -> list[Store]:
        """The first connection; for a read-only Base, every one it will use (the pool's and
        the words index's), all of one file (publish.open_copy)."""
        if not self.read_only:
            return [Store(self.path, create=create)]
        if create:
            raise InvalidRequest("a read-only base is never created: name one that exists")
        from metis_lite.copies import publish

        self.copy, stores = publish.open_copy(self.path, CONNECTIONS + 1)
        return stores

    def _connect(self) -> Store:
        """A new connection; a read-only Base's only to the file it opened (publish.reopen)."""
        if self.copy is None:
            return Store(self.path)
        from metis_lite.copies import publish

        return publish.reopen(self.copy)

    def _words_connection(self) -> Store:
        store, self._words_store = self._words_store, None
        return store or self._connect()

    def close(self) -> None:
        self._words.close()
        self._flush_counts(force=True)
        self._models.close()
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
                    empty = store.leave_wal()
        self.close()
        if empty:
            self.path.unlink(missing_ok=True)
            Path(f"{self.path}.lock").unlink(missing_ok=True)
        return empty

    # -- spec -------------------------------------------------------------------------------

    @property
    @usable
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
    @usable
    def notes_source(self) -> str:
        """The name of the base's notes source, set when the base was made (schema.py)."""
        with self._pool.borrow() as store:
            return store.notes_source()

    @writes
    @usable
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
            changes = spec_changes(
                self._spec_of(store),
                store.counts(),
                embedding=embedding,
                reranker=reranker,
                chunk_size=chunk_size,
                kind=kind,
                reembed=reembed,
                fusion=fusion,
            )
            if not changes:
                return
            store.set_spec(changes)
            label = self._spec_of(store).model_label
        self._models.forget()
        self._vectors = VectorIndex(label)

    # -- models -----------------------------------------------------------------------------

    def embedder(self) -> Embedder:
        """The base's embedding model; an HTTP one is told the dimension the base's vectors
        have, so one wrong answer is refused rather than learnt (and every right one after
        it refused in turn)."""
        return self._embedder_of(self.spec)

    def _embedder_of(self, spec: BaseSpec) -> Embedder:
        return self._models.embedder_of(spec)

    def reranker(self) -> Reranker | None:
        return self._reranker_of(self.spec)

    def _reranker_of(self, spec: BaseSpec) -> Reranker | None:
        return self._models.reranker_of(spec)

    def prefixes(self) -> tuple[str, str]:
        return prefixes(self.spec)

    # -- sources and indexing ---------------------------------------------------------------

    @writes
    @usable
    def add_source(
        self,
        folder: str | Path,
        *,
        name: str | None = None,
        excludes: Sequence[str] | None = None,
        no_ignore: bool | None = None,
        ocr_languages: str | None = None,
    ) -> str:
        """Add a folder, or one file, as a source (named after the folder, or the file's name
        without its suffix, unless named); returns its name. A path that is a source already
        keeps its name; one inside a source, or holding one, is refused (SOURCE_OVERLAP,
        naming both): no file is indexed twice. A folder's rules (docs/indexing.md): its
        `excludes` (gitignore patterns) and `no_ignore` (its ignore files not read), when
        given, replace what it had; else it keeps them (none, for a new source); so do its
        `ocr_languages` (`eng+deu`: Tesseract's packs; "": the default, the packs installed)."""
        path, kind, patterns = sources.checked(folder, excludes, no_ignore)
        with self._pool.borrow() as store:
            name = sources.name_for({n: p for _, n, p in store.sources()}, path, kind, name)
            add = partial(store.add_source, excludes=patterns, no_ignore=no_ignore)
            add(name, str(path), kind=kind, ocr_languages=ocr_languages)
        return name

    @usable
    def sources(self) -> tuple[SourceInfo, ...]:
        """The base's sources, in the order they were added, with their documents and chunks
        (the notes source, metis-<base>, has no folder)."""
        with self._pool.borrow() as store:
            return store.source_infos()

    @writes
    @usable
    def remove_source(self, name: str) -> int:
        """Remove a folder source with its documents (their chunks, words and vectors), in one
        transaction; returns the documents removed. SOURCE_NOT_FOUND for an unknown name,
        BASE_BUSY while the base is being indexed; the notes source cannot be removed."""
        with IndexerLock(self.path), self._pool.borrow() as writer:
            return writer.remove_source(name)

    @writes
    @usable
    def index(
        self,
        *,
        reembed: bool = False,
        progress: ingest.Progress | None = None,
        workers: int | None = None,
        stop: threading.Event | None = None,
        only: Mapping[str, frozenset[str] | None] | None = None,
    ) -> ingest.IndexReport:
        """Index the sources again, only what changed (ingest.index; `only`: a watch batch's paths
        alone), each document searchable by words once written, chunks embedded alongside.
        `workers`: cores the run uses (parse processes, the embedded model's threads; default the
        Base's); `stop`, once set (a signal handler, another thread), ends it between two
        transactions: its report says `interrupted`. BASE_BUSY while another process indexes this
        base. Runs on its own connection: searches on this Base see only whole documents
        meanwhile."""
        from metis_lite.indexing import ingest

        workers = ingest.check_workers(workers)
        own: list[Embedder] = []
        with IndexerLock(self.path), self._pool.borrow() as writer:
            spec = parse_spec(writer.spec(), where=str(self.path))

            def embedder() -> Embedder:
                if workers is None or workers == self.workers:
                    return self._embedder_of(spec)
                own.append(new_embedder(spec, workers))  # this run's, on its own cores
                return own[-1]

            try:
                return ingest.index(
                    writer,
                    spec,
                    embedder,
                    document_prefix=prefixes(spec)[1],
                    reembed=reembed,
                    progress=progress,
                    workers=self.workers if workers is None else workers,
                    stop=stop,
                    only=only,
                )
            finally:
                for model in own:
                    model.close()

    def _embed_missing(self, writer: Store) -> None:
        """Give a vector to every chunk lacking one; a model that is down leaves them waiting."""
        spec = parse_spec(writer.spec(), where=str(self.path))
        from metis_lite.indexing import ingest

        _, dimension, _ = ingest.embed_missing(
            writer,
            lambda: self._embedder_of(spec),
            model=spec.model_label,
            document_prefix=prefixes(spec)[1],
            dimension=spec.dimension,
        )
        if dimension is not None and spec.dimension != dimension:
            writer.set_spec({"dimension": dimension})

    # -- facts ------------------------------------------------------------------------------

    @writes
    @usable
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

    @usable
    def facts(
        self, *, offset: int = 0, limit: int = 50, holding: bool | None = None
    ) -> tuple[list[memory.Fact], int]:
        with self._pool.borrow() as store, store.snapshot():
            return memory.list_facts(store, offset=offset, limit=limit, holding=holding)

    # -- search -----------------------------------------------------------------------------

    @usable
    def search(
        self,
        question: str,
        *,
        mode: str = "hybrid",
        top_k: int = TOP_K,
        rerank: bool = True,
        filters: Filters | None = None,
        fusion: str | None = None,
        collapse: bool = True,
    ) -> Answer:
        """Answer a question (search.py's steps); `fusion` ("relative" or "rrf") overrides the
        base's `spec.fusion` for this search; `collapse`: one result per text (a passage nearly
        the same as one ranked before it is in that result's `also_in`), False: every passage
        a result of its own. Every read of one search is of one snapshot of
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
                collapse=collapse,
            )

    @contextmanager
    def searching(self) -> Iterator[SearchContext]:
        """What a search needs of this base until the block ends: one connection borrowed from
        the pool, every read of one snapshot of the base; the search is counted after. A
        search of several bases holds one of each while it fuses them (multi.py)."""
        with guarding(self), self._pool.borrow() as store:
            with store.snapshot():
                spec = self._spec_of(store)
                searched, self._searched = self._searched, True
                yield SearchContext(
                    store=store,
                    vectors=self._vectors,
                    words=self._words if searched else None,
                    embedder=lambda: self._embedder_of(spec),
                    check_embedder=lambda: self._models.check_embedder(spec),
                    reranker=lambda: self._reranker_of(spec),
                    query_prefix=prefixes(spec)[0],
                    document_prefix=prefixes(spec)[1],
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
        self._counts.add()
        self._flush_counts(store)

    def _flush_counts(self, store: Store | None = None, *, force: bool = False) -> None:
        if self._damaged is None:
            self._counts.flush(store, self._pool.borrow, force=force)

    # -- status -----------------------------------------------------------------------------

    @usable
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
                searches_per_day=store.search_counts(pending=self._counts.pending),
                read_only=self.read_only or store.db.readonly("main"),
                published=store.publication(),
                warnings=(
                    *(w for w in (self._language_warning(store, spec),) if w is not None),
                    *index_warnings(store),
                    *vector_warnings(
                        spec,
                        counts["chunks"],
                        store,
                        lambda: self._models.check_embedder(spec),
                        indexing=indexing,
                        interrupted=last is not None and last["state"] == "interrupted",
                    ),
                ),
            )

    # -- a reader's copy --------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[Store]:
        """A connection borrowed from the pool, inside one snapshot, until the block ends (a
        document or passage read back): never a thread's own one, so a read-only Base reads
        only the file it opened."""
        with guarding(self), self._pool.borrow() as store, store.snapshot():
            yield store

    @usable
    def served_copy(self) -> publish.Copy:
        """Which file this Base serves and the last indexing run it holds: a read-only Base's
        as it opened it, another's as its path is now."""
        from metis_lite.copies import publish

        with self._pool.borrow() as store, store.snapshot():
            copy = self.copy
            if copy is None:
                state = publish.file_state(self.path)
                copy = publish.Copy(self.path, state, False, store.publication())
            return publish.with_last_run(copy, store)

    @usable
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
        self._models.take_from(older._models, self.spec, older.spec)

    # -- languages --------------------------------------------------------------------------

    @usable
    def language_profile(self) -> languages.Profile:
        """The scripts and languages of a sample of the base's chunks, made again only when
        chunks were added or removed (a search of an unchanged base pays one cached check)."""
        with self._pool.borrow() as store:
            return self._language_profile(store)

    def _language_profile(self, store: Store) -> languages.Profile:
        return self._languages.profile(store)

    def language_warning(self) -> MetisWarning | None:
        """MODEL_LANGUAGE_MISMATCH when most of the base is text its embedding model does not
        read (languages.py); judged by the model's name, without loading or calling it."""
        with self._pool.borrow() as store:
            return self._language_warning(store, self._spec_of(store))

    def _language_warning(self, store: Store, spec: BaseSpec) -> MetisWarning | None:
        return self._languages.warning(store, spec)


def _checked_workers(workers: int | None) -> int | None:
    """ingest.check_workers, ingest imported only when workers are named (a search's ~70 ms)."""
    if workers is None:
        return None
    from metis_lite.indexing import ingest

    return ingest.check_workers(workers)
