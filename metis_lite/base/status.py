"""What a base's status says besides its counts: the record itself, the languages of its text
against its embedding model, and the chunks still waiting for their vectors."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from metis_lite.errors import ModelError
from metis_lite.records import MetisWarning, SourceInfo
from metis_lite.retrieval import keyword
from metis_lite.store import Publication, Store
from metis_lite.store.spec import BaseSpec
from metis_lite.text.chunking import CHUNKS_OUTDATED

if TYPE_CHECKING:  # imported where needed: a search by words reads no languages
    from metis_lite.text import languages

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
    warnings: tuple[MetisWarning, ...] = ()
    """What searches suffer: MODEL_LANGUAGE_MISMATCH, WORDS_INDEX_OUTDATED, CHUNKS_OUTDATED,
    CHUNKS_WITHOUT_VECTORS."""
    read_only: bool = False
    """Nothing is written to the base (`serve --read-only`, or a file that cannot be written):
    no indexing, no facts, and its searches are not counted."""
    published: Publication | None = None
    """Which publication the file is, when it is a published copy (publish.py)."""


class LanguageCache:
    """The scripts and languages of a sample of a base's chunks, made again only when chunks
    were added or removed (a search of an unchanged base pays one cached check)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._profile: tuple[tuple[int, int], languages.Profile] | None = None

    def profile(self, store: Store) -> languages.Profile:
        from metis_lite.text import languages

        generation = store.chunks_generation()
        with self._lock:
            if self._profile is None or self._profile[0] != generation:
                sample = store.chunk_sample(LANGUAGE_SAMPLE_CHUNKS, LANGUAGE_SAMPLE_CHARS)
                self._profile = (generation, languages.profile_of(sample))
            return self._profile[1]

    def warning(self, store: Store, spec: BaseSpec) -> MetisWarning | None:
        """MODEL_LANGUAGE_MISMATCH when most of the base is text its embedding model does not
        read (languages.py); judged by the model's name, without loading or calling it."""
        from metis_lite.text import languages

        model = spec.embedding.get("model") or spec.model_label
        if not languages.may_mismatch(model):  # none to say, whatever the sample
            return None
        return languages.mismatch(self.profile(store), model)


def index_warnings(store: Store) -> tuple[MetisWarning, ...]:
    """WORDS_INDEX_OUTDATED and CHUNKS_OUTDATED: what `index` would build again by today's
    rules (the words index; the chunks of documents cut by older chunking rules)."""
    chunks = (CHUNKS_OUTDATED,) if store.chunks_outdated else ()
    return (*keyword.index_warnings(store), *chunks)


def vector_warnings(
    spec: BaseSpec,
    chunks: int,
    store: Store,
    check_embedder: Callable[[], None],
    *,
    indexing: bool,
    interrupted: bool = False,
) -> tuple[MetisWarning, ...]:
    """CHUNKS_WITHOUT_VECTORS while chunks wait for their vectors (found by words only): being
    embedded while a run is on, else until a run reaches the model (or goes on after the last
    one was `interrupted`); saying why when the embedding model is not there (not installed:
    how to install), which `check_embedder` finds out without loading it
    (BaseModels.check_embedder: a status stays quick)."""
    waiting = chunks - store.chunks_with_vector(spec.model_label)
    if waiting <= 0:
        return ()
    why = "found by words only until an index run reaches the embedding model"
    if interrupted:
        why = "the last index run was interrupted; found by words only until the next one"
    if indexing:
        why = "an index run is on: they are being embedded, found by words meanwhile"
    try:
        check_embedder()
    except ModelError as exc:
        why = f"{exc.message}; found by words only until then"
    message = f"{waiting} of {chunks} chunks have no vector yet: {why}"
    return (MetisWarning("CHUNKS_WITHOUT_VECTORS", message),)
