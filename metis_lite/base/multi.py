"""One question asked of several bases at once, ranked as if they were one base.

    from metis_lite import Base, search_bases

    with Base("handbook.db") as handbook, Base("wiki.db") as wiki:
        answer = search_bases([handbook, wiki], "Xid 79", top_k=5)
        for result in answer.results:
            print(result.base, result.score, result.citation.document)

The steps are search.py's; each base does the ones that are its own, side by side on the
caller's thread pool (or one made for the call), on one connection and in one snapshot of its
own for the whole search:

- Step 1 and the lists (Steps 2 and 3): each base embeds the question with its model and reads
  its two lists;
- Step 4 fuses the union of every base's lists (fusion.py): under one normalisation when the
  bases share one embedding model (the same label on their vectors), the bases in turn when their
  models differ (their cosines do not compare); the lists are read deeper while the places asked
  for could still change, so the first results do not depend on how the bases split a
  collection, nor on top_k;
- Step 5: when every base has a reranker of the same model, the best fused candidates of all
  bases are reranked (each by its base's reranker) and results follow its scores; otherwise the
  results keep the fused order, and each base with a reranker says so (RERANKER_NOT_SHARED);
- Step 6: each memory base keeps what holds first: of the places its results hold among the
  first HOLDING_WINDOW (every place a search may return), its facts that still hold take the
  first, its replaced facts the rest; with a memory base among them, the lists are read as deep
  as those places need, whatever top_k, so the first results do not move with top_k;
- Step 7: each base cites its results; each result's `score` is the one it was ranked by (the
  reranker's, else the fused score), its `dense_rank` and `keyword_rank` its ranks in the bases'
  lists merged (fusion.merged_lists), as one base would rank it, not in its own base's;
- `took` holds, per step, the slowest base (they ran side by side), and `total` the wall time;
- each warning names its base, and an error of any base is the answer's error, its message
  prefixed with the base.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import apsw
import numpy as np

from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest, MetisError
from metis_lite.models.base import Embedder, Reranker
from metis_lite.records import Filters, MetisWarning, Result, Took
from metis_lite.retrieval.fusion import Candidates, Fused, deepened, merged_lists
from metis_lite.retrieval.search import (
    SearchContext,
    cite,
    first_depth,
    lists,
    places_needed,
    prepare,
    rerank_count,
    rerank_pool,
    reranker_of,
    validate,
)
from metis_lite.settings import FUSION, HOLDING_WINDOW, TOP_K
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
    executor: Executor | None = None,
) -> MultiAnswer:
    """Ask every base the question and rank their passages together (see the module).

    `bases` is a sequence (each named by `Base.name`) or a mapping of name to base; the names
    must differ. `fusion` ("relative" or "rrf") overrides the bases' own (`spec.fusion`, used
    when they agree; the default when they do not). `executor` runs the bases' steps (a pool
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
            search = _Search(tuple(named.values()), tuple(named), contexts, executor)
            answer = search.run(question, mode, top_k, rerank, filters, fusion)
    finally:
        if own is not None:
            own.shutdown(wait=False, cancel_futures=True)
    wall_ms = (time.perf_counter() - started) * 1000.0
    return dataclasses.replace(answer, took=dataclasses.replace(answer.took, total=wall_ms))


class _Search:
    """One search of several bases: their contexts, held open by the caller, and the pool that
    runs each base's steps."""

    def __init__(
        self,
        bases: tuple[Base, ...],
        names: tuple[str, ...],
        contexts: list[SearchContext],
        executor: Executor,
    ) -> None:
        self.bases, self.names, self.contexts, self.executor = bases, names, contexts, executor
        self.warnings: list[list[MetisWarning]] = [[] for _ in names]
        self.took = [{"embed": 0.0, "dense": 0.0, "keyword": 0.0} for _ in names]

    def each(self, indexes: Sequence[int], step: Callable[[int], T]) -> list[T]:
        """`step` of every base of `indexes`, side by side; an error is named by its base."""
        futures = [(i, self.executor.submit(step, i)) for i in indexes]
        done = []
        for i, future in futures:
            try:
                done.append(_as_named(self.names[i], self.bases[i], future.result))
            except BaseException:
                # The others are stopped, or waited for: each holds its base's snapshot, which
                # the caller closes once this returns (never under a step still reading it).
                for _, other in futures:
                    other.cancel()
                wait([other for _, other in futures])
                raise
        return done

    def run(
        self,
        question: str,
        mode: str,
        top_k: int,
        rerank_: bool,
        filters: Filters,
        fusion: str | None,
    ) -> MultiAnswer:
        every = range(len(self.names))
        fusion = fusion or _common_fusion(self.contexts)
        ready = self.each(
            every,
            lambda i: prepare(
                self.contexts[i], question, mode=mode, filters=filters, took=self.took[i]
            ),
        )
        for i in every:
            self.warnings[i] += ready[i].warnings
        live = [i for i in every if not ready[i].nothing]
        rerankers: list[Reranker | None] = [None] * len(self.names)
        if rerank_ and live:
            found_rerankers = self.each(
                live, lambda i: reranker_of(self.contexts[i], self.warnings[i])
            )
            for i, reranker in zip(live, found_rerankers, strict=True):
                rerankers[i] = reranker
        shared = _shared(rerankers, live)
        if not shared:
            for i in live:
                if rerankers[i] is not None:
                    self.warnings[i].append(_not_shared(rerankers[i]))
        clock = time.perf_counter()
        reading = [0.0]  # the wall time of the reads, side by side: not fusion's

        # Steps 2–4: each base's lists, fused as one.
        def read(depth: int) -> list[Candidates]:
            started = time.perf_counter()
            found = self.each(
                live,
                lambda i: lists(
                    self.contexts[i], ready[i], depth, self.took[i], scored=fusion == "relative"
                ),
            )
            reading[0] += time.perf_counter() - started
            return found

        memory = any(self.contexts[i].memory_order is not None for i in live)
        found, ranking = deepened(
            read,
            depth=first_depth(top_k, memory=memory),
            need=places_needed(top_k, shared, memory=memory),
            fusion=fusion,
        )
        fused = [Fused(live[f.base], f.hit) for f in ranking.hits]
        fuse_ms = (time.perf_counter() - clock - reading[0]) * 1000.0

        # Step 5. Rerank, when every base has a reranker of one model.
        clock = time.perf_counter()
        order, scores = fused, {}
        if shared and fused:
            pool = fused[: rerank_count(top_k)]
            scores, order = self._reranked(question, pool, ready, rerankers, fused)
        rerank_ms = (time.perf_counter() - clock) * 1000.0 if shared else 0.0

        # Step 6. Each memory base: what holds first, in the places its results hold.
        order = self._holding_first(order)

        # Step 7. Cite the top_k, each with its ranks in the bases' lists merged, as one base
        # would rank it (a weak base's best by meaning is not "first by meaning").
        top = order[:top_k]
        dense, words = merged_lists(found)
        citing = sorted({f.base for f in top})
        cited = self.each(
            citing,
            lambda i: cite(
                self.contexts[i],
                ready[i].asked,
                [f.hit for f in top if f.base == i],
                [f.hit for f in dense if live[f.base] == i],
                [f.hit for f in words if live[f.base] == i],
                [f.hit for f in fused if f.base == i],
                {c: s for (b, c), s in scores.items() if b == i},
            ),
        )
        by_place = {
            (i, result.chunk_id): result
            for i, results in zip(citing, cited, strict=True)
            for result in results
        }
        results = tuple(  # a chunk removed since it was ranked is not cited
            dataclasses.replace(by_place[(f.base, f.hit.chunk_id)], base=self.names[f.base])
            for f in top
            if (f.base, f.hit.chunk_id) in by_place
        )
        steps = {
            step: max((took[step] for took in self.took), default=0.0)
            for step in ("embed", "dense", "keyword")
        }
        took = Took(**steps, fuse=round(max(0.0, fuse_ms), 3), rerank=round(rerank_ms, 3))
        warnings = tuple(
            BaseWarning(name, w.code, f"{name}: {w.message}")
            for name, found_warnings in zip(self.names, self.warnings, strict=True)
            for w in found_warnings
        )
        reranked = shared and bool(scores)
        return MultiAnswer(mode, reranked, warnings, took, results, self.names)

    def _reranked(self, question, pool, ready, rerankers, fused):
        """The pool in the rerankers' order, then the rest of the fused list; the fused order
        for all when any base's reranker failed (its warning says so)."""
        bases = sorted({f.base for f in pool})
        answers = self.each(
            bases,
            lambda i: rerank_pool(
                self.contexts[i],
                rerankers[i],
                ready[i].question,
                [f.hit for f in pool if f.base == i],
                self.warnings[i],
            ),
        )
        if any(answer is None for answer in answers):
            return {}, fused
        scores = {
            (i, chunk_id): score
            for i, answer in zip(bases, answers, strict=True)
            for chunk_id, score in (answer or {}).items()
        }
        kept = [f for f in pool if (f.base, f.hit.chunk_id) in scores]
        order = sorted(kept, key=lambda f: -scores[(f.base, f.hit.chunk_id)])
        return scores, order + fused[len(pool) :]

    def _holding_first(self, order: list[Fused]) -> list[Fused]:
        """Each memory base's places among the first HOLDING_WINDOW, its facts that hold first
        (memory.holding_first); the places themselves, and those past the window, unchanged."""
        reordered = list(order)
        for i, ctx in enumerate(self.contexts):
            if ctx.memory_order is None:
                continue
            places = [p for p, f in enumerate(order[:HOLDING_WINDOW]) if f.base == i]
            hits = ctx.memory_order(ctx.store, [order[p].hit for p in places])
            for place, hit in zip(places, hits, strict=True):
                reordered[place] = Fused(i, hit)
        return reordered


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


def _common_fusion(contexts: Sequence[SearchContext]) -> str:
    """The bases' own fusion when they agree on one, else the default."""
    own = {ctx.fusion for ctx in contexts}
    return own.pop() if len(own) == 1 else FUSION


def _shared(rerankers: Sequence[Reranker | None], live: Sequence[int]) -> bool:
    """Whether every base searched has a reranker, all of one model (their scores compare)."""
    found = [rerankers[i] for i in live]
    return (
        bool(found) and all(r is not None for r in found) and len({r.name for r in found if r}) == 1
    )


def _not_shared(reranker: Reranker | None) -> MetisWarning:
    name = reranker.name if reranker is not None else "its reranker"
    return MetisWarning(
        "RERANKER_NOT_SHARED",
        f"not every base searched has the reranker {name}: the reranker's scores do not compare "
        "across bases, so results are in the fused order",
    )


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
