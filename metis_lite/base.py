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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from metis_lite import ingest, keyword, languages, memory
from metis_lite.bm25 import WordIndex
from metis_lite.chunking import check_chunk_size
from metis_lite.dense import VectorIndex
from metis_lite.errors import InvalidRequest, ModelError
from metis_lite.models import registry
from metis_lite.models.base import Embedder, Reranker
from metis_lite.models.prefixes import prefixes_for
from metis_lite.records import Answer, Filters, SourceInfo, Warning
from metis_lite.search import SearchContext, search
from metis_lite.settings import BASE_KINDS, FUSION, FUSIONS, TOP_K
from metis_lite.spec import DEFAULT_SPEC, BaseSpec, parse_spec
from metis_lite.store import IndexerLock, Store

__all__ = ["DEFAULT_SPEC", "Base", "BaseStatus", "SourceInfo"]

COUNT_FLUSH_S = 5.0
"""Search counts are written at most this often (and when the base closes), not per search."""

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


class Base:
    """One open base: a read connection, its vectors in memory, its models (made when needed)."""

    def __init__(self, path: str | Path, *, create: bool = False, name: str | None = None) -> None:
        self.path = Path(path)
        self.created = create and not self.path.exists()
        """True when this Base made the file (discard() removes it while it is still empty)."""
        self._local = threading.local()
        self._stores: list[Store] = []
        self._stores_lock = threading.Lock()
        self._spec_cache: tuple[tuple[int, int, int], BaseSpec] | None = None
        self._adopt(Store(self.path, create=create))
        self.name = name or self.path.stem
        try:
            if create and not self.store.spec():
                self.store.set_spec(DEFAULT_SPEC)
            self.spec  # noqa: B018 - a spec this code cannot read is refused when the base opens
        except BaseException:
            for store in self._stores:
                store.close()
            raise
        self._models_lock = threading.Lock()
        self._embedder: Embedder | None = None
        self._reranker: Reranker | None = None
        self._vectors = VectorIndex(self.model_label)
        self._words = WordIndex(lambda: Store(self.path))  # its thread's own connection
        self._pending_searches = 0
        self._last_flush = time.monotonic()
        self._count_lock = threading.Lock()
        self._languages_lock = threading.Lock()
        self._languages: tuple[tuple[int, int], languages.Profile] | None = None

    @classmethod
    def open(cls, path: str | Path, *, create: bool = False, name: str | None = None) -> Base:
        return cls(path, create=create, name=name)

    @property
    def store(self) -> Store:
        """This thread's connection to the base (an apsw connection serves one thread at a time)."""
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._adopt(Store(self.path))
        return store

    def _adopt(self, store: Store) -> Store:
        self._local.store = store
        with self._stores_lock:
            self._stores.append(store)
        return store

    def close(self) -> None:
        self._words.close()
        self._flush_counts(force=True)
        for model in (self._embedder, self._reranker):
            if model is not None:
                model.close()
        with self._stores_lock:
            for store in self._stores:
                store.close()
            self._stores.clear()

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
        leaves no new file behind. Returns whether it was deleted."""
        empty = False
        self._words.close()  # its connection would keep the base in WAL mode
        if self.created:
            counts = self.store.counts()
            empty = not counts["sources"] and not counts["documents"]
        self.close()
        if empty:
            for suffix in ("", "-wal", "-shm", "-journal", ".lock"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        return empty

    # -- spec -------------------------------------------------------------------------------

    @property
    def spec(self) -> BaseSpec:
        """The base's spec, parsed once and again only after a write to the base (by this or
        another connection: `configure` here, an `index --chunk-size` elsewhere)."""
        store = self.store
        key = (id(store), store.data_version(), store.db.total_changes())
        cached = self._spec_cache
        if cached is None or cached[0] != key:
            cached = self._spec_cache = (key, parse_spec(store.spec(), where=str(self.path)))
        return cached[1]

    @property
    def model_label(self) -> str:
        """The name recorded on every vector; vectors of another label are never compared."""
        return self.spec.model_label

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
        spec = self.spec
        changes: dict[str, Any] = {}
        counts = self.store.counts()
        if embedding is not None and dict(embedding) != dict(spec.embedding):
            registry.check_embedding_spec(embedding)
            new_label = registry.model_label(embedding)
            if counts["vectors"] and new_label != self.model_label and not reembed:
                raise InvalidRequest(
                    f"the base's vectors were made by {self.model_label}; to use {new_label} "
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
                raise InvalidRequest("a base's kind is chosen when it is created (it is not empty)")
            changes["kind"] = kind
        if fusion is not None and fusion != spec.fusion:
            if fusion not in FUSIONS:
                raise InvalidRequest(f"unknown fusion {fusion!r}: {', '.join(FUSIONS)}")
            changes["fusion"] = fusion
        if changes:
            self.store.set_spec(changes)
            with self._models_lock:
                for model in (self._embedder, self._reranker):
                    if model is not None:
                        model.close()
                self._embedder = self._reranker = None
            self._vectors = VectorIndex(self.model_label)

    # -- models -----------------------------------------------------------------------------

    def embedder(self) -> Embedder:
        """The base's embedding model; an HTTP one is told the dimension the base's vectors
        have, so one wrong answer is refused rather than learnt (and every right one after
        it refused in turn)."""
        with self._models_lock:
            if self._embedder is None:
                spec = self.spec
                embedding = dict(spec.embedding)
                if spec.dimension and embedding.get("provider", "embedded") != "embedded":
                    embedding = {"dimension": spec.dimension, **embedding}
                self._embedder = registry.embedder_from_spec(embedding)
            return self._embedder

    def reranker(self) -> Reranker | None:
        with self._models_lock:
            reranker = self.spec.reranker
            if self._reranker is None and reranker:
                self._reranker = registry.reranker_from_spec(reranker)
            return self._reranker

    def prefixes(self) -> tuple[str, str]:
        embedding = self.spec.embedding
        return prefixes_for(
            embedding.get("model") or self.model_label,
            query_prefix=embedding.get("query_prefix"),
            document_prefix=embedding.get("document_prefix"),
        )

    # -- sources and indexing ---------------------------------------------------------------

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
        known = {n: p for _, n, p in self.store.sources()}
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
        self.store.add_source(name, str(path))
        return name

    def sources(self) -> tuple[SourceInfo, ...]:
        """The base's sources, in the order they were added, with their documents and chunks
        (the notes source, metis-<base>, has no folder)."""
        return self.store.source_infos()

    def remove_source(self, name: str) -> int:
        """Remove a folder source with its documents (their chunks, words and vectors), in one
        transaction; returns the documents removed. SOURCE_NOT_FOUND for an unknown name,
        BASE_BUSY while the base is being indexed; the notes source cannot be removed."""
        with IndexerLock(self.path), Store(self.path) as writer:
            return writer.remove_source(name)

    def index(
        self, *, reembed: bool = False, progress: ingest.Progress | None = None
    ) -> ingest.IndexReport:
        """Index every source again (only what changed), then embed chunks lacking a vector
        (ingest.index does the run and its report).

        Refused with BASE_BUSY while another process indexes this base. Runs on its own
        connection, so searches on this Base see only whole documents meanwhile.
        """
        with IndexerLock(self.path), Store(self.path) as writer:
            return ingest.index(
                writer,
                parse_spec(writer.spec(), where=str(self.path)),
                self.embedder,
                document_prefix=self.prefixes()[1],
                reembed=reembed,
                progress=progress,
            )

    def _embed_missing(self, writer: Store) -> None:
        """Give a vector to every chunk lacking one; a model that is down leaves them waiting."""
        spec = parse_spec(writer.spec(), where=str(self.path))
        _, dimension, _ = ingest.embed_missing(
            writer,
            self.embedder,
            model=spec.model_label,
            document_prefix=self.prefixes()[1],
            dimension=spec.dimension,
        )
        if dimension is not None and spec.dimension != dimension:
            writer.set_spec({"dimension": dimension})

    # -- facts ------------------------------------------------------------------------------

    def remember(
        self,
        text: str,
        *,
        stated_at: str | None = None,
        subject: str | None = None,
        key: str | None = None,
        replaces: Sequence[int] = (),
    ) -> memory.Fact:
        """Add a fact (a note of the source metis-<base>) and embed it when the model answers;
        a newer fact with the same key, or one naming it in `replaces`, replaces another."""
        with Store(self.path) as writer:
            fact = memory.add_fact(
                writer,
                base_name=self.name,
                text=text,
                stated_at=stated_at,
                subject=subject,
                key=key,
                replaces=replaces,
            )
            self._embed_missing(writer)
        return fact

    def facts(
        self, *, offset: int = 0, limit: int = 50, holding: bool | None = None
    ) -> tuple[list[memory.Fact], int]:
        return memory.list_facts(self.store, offset=offset, limit=limit, holding=holding)

    # -- search -----------------------------------------------------------------------------

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
        base's `spec.fusion` for this search."""
        if not isinstance(question, str):
            raise InvalidRequest("the question must be text")
        context = SearchContext(
            store=self.store,
            vectors=self._vectors,
            words=self._words,
            embedder=self.embedder,
            reranker=self.reranker,
            query_prefix=self.prefixes()[0],
            fusion=self.spec.fusion or FUSION,
            base=self.name,
            memory_order=memory.holding_first if self.spec.is_memory else None,
            facts_of=memory.facts_of_chunks,
            language_warning=self.language_warning,
        )
        answer = search(
            context,
            question,
            mode=mode,
            top_k=top_k,
            rerank=rerank,
            filters=filters or Filters(),
            fusion=fusion,
        )
        self._count_search()
        return answer

    def _count_search(self) -> None:
        with self._count_lock:
            self._pending_searches += 1
        self._flush_counts()

    def _flush_counts(self, *, force: bool = False) -> None:
        with self._count_lock:
            due = force or time.monotonic() - self._last_flush >= COUNT_FLUSH_S
            if not due or not self._pending_searches:
                return
            pending, self._pending_searches = self._pending_searches, 0
            self._last_flush = time.monotonic()
        self.store.count_searches(pending)

    # -- status -----------------------------------------------------------------------------

    def status(self) -> BaseStatus:
        self._flush_counts(force=True)
        spec = self.spec
        counts = self.store.counts()
        reranker = registry.model_label(spec.reranker) if spec.reranker else None
        indexing = IndexerLock(self.path).held_elsewhere()
        last = self.store.last_run()
        if last is not None and last["state"] == "running" and not indexing:
            last = {
                **last,
                "state": "interrupted",
            }  # its indexer died; the next run finishes the work
        return BaseStatus(
            name=self.name,
            path=str(self.path),
            kind=spec.kind,
            state="Indexing" if indexing else "Waiting",
            sources=self.store.source_infos(),
            documents=counts["documents"],
            chunks=counts["chunks"],
            chunks_without_vector=counts["chunks"]
            - self.store.chunks_with_vector(self.model_label),
            kinds=self.store.kinds(),
            embedding=self.model_label,
            reranker=reranker,
            chunk_size=spec.chunk_size,
            last_indexing=last,
            searches_per_day=self.store.search_counts(),
            warnings=(
                *(w for w in (self.language_warning(),) if w is not None),
                *keyword.index_warnings(self.store),
                *self._vector_warnings(counts["chunks"]),
            ),
        )

    def _vector_warnings(self, chunks: int) -> tuple[Warning, ...]:
        """CHUNKS_WITHOUT_VECTORS while chunks wait for their vectors (found by words only),
        saying why when the embedding model cannot even load (not installed: how to install)."""
        waiting = chunks - self.store.chunks_with_vector(self.model_label)
        if waiting <= 0:
            return ()
        why = "found by words only until an index run reaches the embedding model"
        try:
            self.embedder()
        except ModelError as exc:
            why = f"{exc.message}; found by words only until then"
        message = f"{waiting} of {chunks} chunks have no vector yet: {why}"
        return (Warning("CHUNKS_WITHOUT_VECTORS", message),)

    # -- languages --------------------------------------------------------------------------

    def language_profile(self) -> languages.Profile:
        """The scripts and languages of a sample of the base's chunks, made again only when
        chunks were added or removed (a search of an unchanged base pays one cached check)."""
        generation = self.store.chunks_generation()
        with self._languages_lock:
            if self._languages is None or self._languages[0] != generation:
                sample = self.store.chunk_sample(LANGUAGE_SAMPLE_CHUNKS, LANGUAGE_SAMPLE_CHARS)
                self._languages = (generation, languages.profile_of(sample))
            return self._languages[1]

    def language_warning(self) -> Warning | None:
        """MODEL_LANGUAGE_MISMATCH when most of the base is text its embedding model does not
        read (languages.py); judged by the model's name, without loading or calling it."""
        model = self.spec.embedding.get("model") or self.model_label
        return languages.mismatch(self.language_profile(), model)
