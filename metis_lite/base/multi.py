"""One question asked of several bases at once, ranked as if they were one base.

    from metis_lite import Base, search_bases

    with Base("handbook.db") as handbook, Base("wiki.db") as wiki:
        answer = search_bases([handbook, wiki], "Xid 79", top_k=5)
        for result in answer.results:
            print(result.base, result.score, result.citation.document)

The search is the one pipeline of retrieval/search.py, given each base's context: each base
holds one connection and one snapshot of its own for the whole search, and does its own part
of each step side by side with the others on the caller's thread pool (or one made for the
call). The bases are ranked as one (search.py's Steps 4–6), so the first results depend neither
on how the bases split a collection nor on top_k; each result's `dense_rank` and `keyword_rank`
are its ranks in the bases' lists merged, as one base would rank it. Bases that embed a
question alike (one model label, one query prefix) embed it once for all.

What this module adds to the pipeline: the bases by name, `took.total` as the wall time
(opening the snapshots included), each warning named by its base (`BaseWarning`, its message
prefixed with the base), and an error of any base as the answer's error, its message
prefixed with the base (a damaged file as BASE_DAMAGED).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import apsw
import numpy as np

from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest, MetisError
from metis_lite.models.base import Embedder
from metis_lite.records import Filters, Result, Took
from metis_lite.retrieval.search import SearchContext, run, validate
from metis_lite.settings import FUSION, TOP_K
from metis_lite.store.connection import damage

SEARCH_THREADS = 4
"""Bases searched side by side when the caller gives no thread pool."""

T = TypeVar("T")


@dataclass(frozen=True)
class BaseWarning:
    """A warning of one base in a search of several; `message` is prefixed with the base."""

    base: str
    code: str
    message: str


@dataclass(frozen=True)
class MultiAnswer:
    """Several bases' answers as one: results ranked together (each `Result.base` says whose)."""

    mode: str
    reranked: bool
    warnings: tuple[BaseWarning, ...]
    took: Took
    results: tuple[Result, ...]
    bases: tuple[str, ...]


def search_bases(
    bases: Sequence[Base] | Mapping[str, Base],
    question: str,
    *,
    mode: str = "hybrid",
    top_k: int = TOP_K,
    rerank: bool = True,
    filters: Filters = Filters(),
    fusion: str | None = None,
    collapse: bool = True,
    executor: Executor | None = None,
) -> MultiAnswer:
    """Ask every base the question and rank their passages together (see the module).

    `bases` is a sequence (each named by `Base.name`) or a mapping of name to base; the names
    must differ. `fusion` ("relative" or "rrf") overrides the bases' own (`spec.fusion`, used
    when they agree; the default when they do not); `collapse`: one result per text, across
    the bases too (Base.search). `executor` runs the bases' steps (a pool
    of SEARCH_THREADS otherwise)."""
    named = dict(bases) if isinstance(bases, Mapping) else {b.name: b for b in bases}
    if not named or len(named) != len(bases):
        raise InvalidRequest("name at least one base, each once")
    if not isinstance(question, str):
        raise InvalidRequest("the question must be text")
    validate(mode, top_k, filters, fusion or FUSION)
    started = time.perf_counter()
    own = None
    if executor is None:
        own = executor = ThreadPoolExecutor(min(SEARCH_THREADS, len(named)))
    try:
        with ExitStack() as stack:
            contexts = []
            for name, base in named.items():
                contexts.append(
                    _as_named(name, base, partial(stack.enter_context, base.searching()))
                )
            contexts = _sharing_embeddings(contexts)
            names, bases_of = tuple(named), tuple(named.values())
            done = run(
                contexts,
                question,
                mode=mode,
                top_k=top_k,
                rerank=rerank,
                filters=filters,
                fusion=fusion,
                collapse=collapse,
                names=names,
                executor=executor,
                guard=lambda i, step: _as_named(names[i], bases_of[i], step),
            )
    finally:
        if own is not None:
            own.shutdown(wait=False, cancel_futures=True)
    wall_ms = (time.perf_counter() - started) * 1000.0
    warnings = tuple(
        BaseWarning(name, w.code, f"{name}: {w.message}")
        for name, found in zip(named, done.warnings, strict=True)
        for w in found
    )
    took = dataclasses.replace(done.took, total=wall_ms)
    return MultiAnswer(done.mode, done.reranked, warnings, took, done.results, tuple(named))


class _EmbeddedOnce:
    """One base's embedding model for every base of the search whose vectors it made: each
    question is embedded once for all of them (the same model and prefix give the same vector)."""

    def __init__(self, model: Callable[[], Embedder], name: str) -> None:
        self._model = model
        self.name = name
        self._lock = threading.Lock()
        self._vectors: dict[tuple[str, ...], np.ndarray] = {}

    def embedder(self) -> Embedder:
        return self

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        key = tuple(texts)
        with self._lock:  # the other bases wait for the first one's answer, not ask again
            if key not in self._vectors:
                self._vectors[key] = self._model().embed(texts)
            return self._vectors[key]

    def close(self) -> None:
        pass  # the base's model is the base's to close


def _sharing_embeddings(contexts: Sequence[SearchContext]) -> list[SearchContext]:
    """The contexts, those whose bases embed a question alike (one model label, one query
    prefix) sharing one embedding of it."""
    shared: dict[tuple[str, str], _EmbeddedOnce] = {}
    out = []
    for ctx in contexts:
        key = (ctx.vectors.model, ctx.query_prefix)
        once = shared.setdefault(key, _EmbeddedOnce(ctx.embedder, ctx.vectors.model))
        out.append(dataclasses.replace(ctx, embedder=once.embedder))
    return out


def _as_named(name: str, base: Base, call: Callable[[], T]) -> T:
    """`call()`, its error named by the base it came from (a damaged file as BASE_DAMAGED)."""
    try:
        return call()
    except MetisError as exc:
        raise _named(exc, name) from exc
    except apsw.Error as exc:
        found = damage(exc, base.path)
        if found is None:
            raise
        raise _named(found, name) from exc


def _named(exc: MetisError, name: str) -> MetisError:
    """The same error, its message prefixed with the base it came from."""
    if exc.message.startswith(f"{name}: "):
        return exc
    try:
        named = type(exc)(f"{name}: {exc.message}")
    except TypeError:
        return exc
    named.code, named.status = exc.code, exc.status
    return named
