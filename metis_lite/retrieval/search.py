"""Question → results, step by step as docs/how-search-works.md draws it: one pipeline, for
one base or for several searched as one (a search of one base is a search of several with one).

    Step 1. Embed the question with each base's model and its query prefix.
    Step 2. By meaning: cosine with every chunk's vector, keep max(50, 4 × top_k).
    Step 3. By words: BM25 over the FTS5 index, keep max(50, 4 × top_k).
            Filters (path prefix, kinds, sources) apply to both lists before ranking.
    Step 4. Fuse the lists: by score relative to each list's best (the default), or by rank,
            Σ 1/(60 + rank) (`fusion: rrf`); see fusion.py. Several bases are fused as one:
            under one normalisation when they share an embedding model, in turn when not.
    Step 5. Rerank the best clamp(3 × top_k, 20, 50) fused candidates, when every base searched
            has a reranker of one model (else the fused order, and RERANKER_NOT_SHARED).
    Step 6. Memories: facts that still hold before facts a newer one replaced (among the first
            HOLDING_WINDOW fused places, whatever top_k).
    Step 7. Cite the top_k distinct results: text, citation with snippet, scores at every
            step; a passage nearly the same as one ranked before it is that result's place
            (`also_in`), not a result of its own (collapse.py; `collapse=False`: every one).

Each base's own part of a step (its question embedded, its two lists, its reranker's scores,
its citations) is steps.py's, run for every base side by side on an executor when there are
several, inline when there is one. Each step times itself into `took` (with several bases, the
slowest base's time; they ran side by side). What a step could not do becomes a warning of
its base, never a silent change; `mode: dense` without its model is refused
(EMBEDDING_MODEL_UNAVAILABLE). Every read of one base is of one snapshot of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from metis_lite.errors import InvalidRequest
from metis_lite.models.base import Reranker
from metis_lite.records import Answer, Filters, MetisWarning, Result, Took
from metis_lite.retrieval.collapse import Distinct
from metis_lite.retrieval.fusion import Candidates, Fused, deepened, merged_lists
from metis_lite.retrieval.steps import (
    Clock,
    Prepared,
    SearchContext,
    bounded_question,
    cite,
    lists,
    prepare,
    rerank_pool,
    reranker_of,
)
from metis_lite.settings import (
    CANDIDATES_MIN,
    CANDIDATES_PER_RESULT,
    FUSION,
    FUSIONS,
    HOLDING_WINDOW,
    KINDS,
    MODES,
    RERANK_MAX,
    RERANK_MIN,
    RERANK_PER_RESULT,
    TOP_K,
    TOP_K_MAX,
)

if TYPE_CHECKING:  # the executor is the caller's (several bases): one base's search runs inline
    from concurrent.futures import Executor

__all__ = [
    "SearchContext",
    "Searched",
    "bounded_question",
    "candidates",
    "rerank_count",
    "run",
    "search",
    "validate",
]

T = TypeVar("T")

Guard = Callable[[int, Callable[[], T]], T]
"""How a base's step is called: `guard(i, step)` runs the step of base i, and may turn its
error into one that names the base (base/multi.py); a search of one base calls it as it is."""


@dataclass(frozen=True)
class Searched:
    """One search's answer over every base it asked, before an API shapes it."""

    mode: str
    reranked: bool
    warnings: tuple[tuple[MetisWarning, ...], ...]
    """Each base's warnings, in the order the bases were given."""
    took: Took
    results: tuple[Result, ...]
    """Ranked over every base; each `Result.base` is the name its base was given."""


def candidates(top_k: int) -> int:
    """Each retriever keeps its best 50, or 4 × top_k when that is more (spec, "By meaning")."""
    return max(CANDIDATES_MIN, CANDIDATES_PER_RESULT * top_k)


def rerank_count(top_k: int) -> int:
    """The reranker reads 3 × top_k fused candidates, at least 20 and at most 50."""
    return min(RERANK_MAX, max(RERANK_MIN, RERANK_PER_RESULT * top_k))


def validate(mode: str, top_k: int, filters: Filters, fusion: str = FUSION) -> None:
    if fusion not in FUSIONS:
        raise InvalidRequest(f"unknown fusion {fusion!r}: choose one of {', '.join(FUSIONS)}")
    if mode not in MODES:
        raise InvalidRequest(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= TOP_K_MAX:
        raise InvalidRequest(f"top_k must be a whole number from 1 to {TOP_K_MAX}, not {top_k!r}")
    unknown = [k for k in filters.kinds if k not in KINDS + ("note",)]
    if unknown:
        raise InvalidRequest(f"unknown kind {unknown[0]!r}: kinds are {', '.join(KINDS)}, note")


def first_depth(top_k: int, *, memory: bool = False) -> int:
    """How deep each list is read first: candidates(top_k); with a memory base, as deep as for
    the HOLDING_WINDOW places Step 6 reorders, whatever top_k (the same lists, and under rrf the
    same fused scores, for every top_k)."""
    return candidates(max(top_k, HOLDING_WINDOW) if memory else top_k)


def places_needed(top_k: int, reranking: bool, *, memory: bool = False) -> int:
    """The fused places a search reads: its top_k, the reranker's candidates, and with a
    memory base the HOLDING_WINDOW places Step 6 reorders."""
    need = max(top_k, rerank_count(top_k)) if reranking else top_k
    return max(need, HOLDING_WINDOW) if memory else need


def search(ctx: SearchContext, question: str, **options: Any) -> Answer:
    """Answer a question from one base: the pipeline run over that base alone, with run()'s
    options (mode, top_k, rerank, filters, and fusion, which overrides the base's own)."""
    done = run((ctx,), question, **options)
    return Answer(done.mode, done.reranked, done.warnings[0], done.took, done.results)


def run(
    contexts: Sequence[SearchContext],
    question: str,
    *,
    mode: str = "hybrid",
    top_k: int = TOP_K,
    rerank: bool = True,
    filters: Filters = Filters(),
    fusion: str | None = None,
    collapse: bool = True,
    names: Sequence[str | None] | None = None,
    executor: Executor | None = None,
    guard: Guard | None = None,
) -> Searched:
    """The pipeline over one base or several, each of one open context. `fusion` overrides the
    bases' own (used when they agree; the default when they do not); `collapse`: one result
    per text (Step 7); `names` name each base's results (default: each context's own name);
    `executor` runs the bases' steps side by side (needed for several: one base's steps run
    inline); `guard` calls each step (Guard)."""
    if not contexts:
        raise InvalidRequest("name at least one base, each once")
    fusion = fusion or _common_fusion(contexts)
    validate(mode, top_k, filters, fusion)
    names = tuple(names) if names is not None else tuple(ctx.base for ctx in contexts)
    return _Search(tuple(contexts), names, executor, guard).run(
        question, mode, top_k, rerank, filters, fusion, collapse
    )


class _Search:
    """One search of its bases: their contexts, open for the whole search, and how each base's
    steps are run (side by side on the executor, or inline for one base)."""

    def __init__(
        self,
        contexts: tuple[SearchContext, ...],
        names: tuple[str | None, ...],
        executor: Executor | None,
        guard: Guard | None,
    ) -> None:
        self.contexts, self.names, self.executor = contexts, names, executor
        self.guard: Guard = guard or _called
        self.warnings: list[list[MetisWarning]] = [[] for _ in contexts]
        self.took = [{"embed": 0.0, "dense": 0.0, "keyword": 0.0} for _ in contexts]

    def each(self, indexes: Sequence[int], step: Callable[[int], T]) -> list[T]:
        """`step` of every base of `indexes`, side by side when there are several; an error is
        the guard's (named by its base)."""
        if self.executor is None or len(indexes) < 2:
            return [self.guard(i, partial(step, i)) for i in indexes]
        futures = [(i, self.executor.submit(step, i)) for i in indexes]
        done = []
        for i, future in futures:
            try:
                done.append(self.guard(i, future.result))
            except BaseException:
                from concurrent.futures import wait

                # Every other step is waited for, begun or not: each reads its base's snapshot,
                # which the caller closes once this returns (never under a step still reading
                # it). A step not yet begun is not cancelled: whether it had begun would depend
                # on the threads' timing, and each step is short.
                wait([other for _, other in futures])
                raise
        return done

    def run(
        self,
        question: str,
        mode: str,
        top_k: int,
        rerank: bool,
        filters: Filters,
        fusion: str,
        collapse: bool,
    ) -> Searched:
        clock = Clock()
        every = range(len(self.contexts))

        # Step 1, in each base: the question made ready (its bound, the filters, embedded).
        ready = self.each(
            every,
            lambda i: prepare(
                self.contexts[i], question, mode=mode, filters=filters, took=self.took[i]
            ),
        )
        for i in every:
            self.warnings[i] += ready[i].warnings
        live = [i for i in every if not ready[i].nothing]
        if not live:  # nothing to search in any base: the empty states say why
            return self._searched(mode, False, Took(total=clock.total()), ())
        rerankers = self._rerankers(live) if rerank else [None] * len(self.contexts)
        shared = _shared(rerankers, live)
        clock.lap()

        # Steps 2–4. By meaning, by words, fused: every base's lists, fused as one, each read
        # deeper while the places this search returns could still change (fusion.deepened).
        reading = [0.0]  # the reads' wall time, side by side: not fusion's

        def read(depth: int) -> list[Candidates]:
            started = time.perf_counter()
            found = self.each(
                live,
                lambda i: lists(
                    self.contexts[i], ready[i], depth, self.took[i], scored=fusion == "relative"
                ),
            )
            reading[0] += (time.perf_counter() - started) * 1000.0
            return found

        memory = any(self.contexts[i].memory_order is not None for i in live)
        found, ranking = deepened(
            read,
            depth=first_depth(top_k, memory=memory),
            need=places_needed(top_k, shared, memory=memory),
            fusion=fusion,
        )
        fused = [Fused(live[f.base], f.hit) for f in ranking.hits]
        fusing = clock.lap() - reading[0]
        two_lists = mode == "hybrid" and any(ready[i].query is not None for i in live)
        fuse_ms = round(max(0.0, fusing), 3) if two_lists else 0.0  # one list: nothing fused

        # Step 5. Rerank, when every base has a reranker of one model.
        order, scores = fused, dict[tuple[int, int], float]()
        if shared and fused:
            pool = fused[: rerank_count(top_k)]
            scores, order = self._reranked(pool, ready, rerankers, fused)
        rerank_ms = clock.lap() if shared else 0.0

        # Step 6. Each memory base: what holds first, in the places its results hold.
        order = self._holding_first(order)

        # Step 7. Cite the top_k distinct results, each with its ranks in the bases' lists
        # merged, as one base would rank it (a weak base's best by meaning is not "first by
        # meaning"); a passage nearly the same as one before it is that one's place.
        def cited(top: list[Fused]) -> list[tuple[int, Result]]:
            return self._cited(top, fused, found, live, ready, scores)

        if collapse:
            results = self._distinct(order, top_k, cited)
        else:
            results = tuple(result for _, result in cited(order[:top_k]))
        steps = {
            step: max(took[step] for took in self.took) for step in ("embed", "dense", "keyword")
        }
        took = Took(**steps, fuse=fuse_ms, rerank=rerank_ms, total=clock.total())
        return self._searched(mode, shared and bool(scores), took, results)

    def _rerankers(self, live: Sequence[int]) -> list[Reranker | None]:
        """Each base's reranker (None: it has none, or it failed, with its warning); a base
        whose reranker cannot be shared says so."""
        rerankers: list[Reranker | None] = [None] * len(self.contexts)
        found = self.each(live, lambda i: reranker_of(self.contexts[i], self.warnings[i]))
        for i, reranker in zip(live, found, strict=True):
            rerankers[i] = reranker
        if not _shared(rerankers, live):
            for i in live:
                if rerankers[i] is not None:
                    self.warnings[i].append(_not_shared(rerankers[i]))
        return rerankers

    def _reranked(
        self,
        pool: list[Fused],
        ready: Sequence[Prepared],
        rerankers: Sequence[Reranker | None],
        fused: list[Fused],
    ) -> tuple[dict[tuple[int, int], float], list[Fused]]:
        """The pool in the rerankers' order, then the rest of the fused list (past the
        reranker's 50, only when top_k > 50); the fused order for all when any base's reranker
        failed (its warning says so)."""
        bases = sorted({f.base for f in pool})
        answers = self.each(
            bases,
            lambda i: rerank_pool(
                self.contexts[i],
                rerankers[i],  # type: ignore[arg-type]  # shared: every base has one
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

    def _distinct(
        self,
        order: list[Fused],
        top_k: int,
        cited: Callable[[list[Fused]], list[tuple[int, Result]]],
    ) -> tuple[Result, ...]:
        """The first top_k distinct results of `order`, cited a few places at a time: the
        top_k first, then as many more as results are still missing, twice over; then top_k
        places more, read only for the other places of those results (collapse.py)."""
        distinct = Distinct()
        start, step = 0, top_k
        while len(distinct) < top_k and start < len(order):
            for i, result in cited(order[start : start + step]):
                distinct.add(result, self.contexts[i].store.words_version)
            start += step
            step = 2 * (top_k - len(distinct))
        for i, result in cited(self._repeats(order[start : start + top_k], distinct)):
            distinct.add(result, self.contexts[i].store.words_version, new=False)
        return distinct.results(top_k)

    def _repeats(self, places: list[Fused], distinct: Distinct) -> list[Fused]:
        """Those of `places` whose text is a result's already kept: only they are cited."""
        texts: dict[tuple[int, int], str] = {}
        for i in sorted({f.base for f in places}):
            ids = [f.hit.chunk_id for f in places if f.base == i]
            texts.update(
                {(i, c): row.text for c, row in self.contexts[i].store.chunk_rows(ids).items()}
            )
        return [
            f
            for f in places
            if (text := texts.get((f.base, f.hit.chunk_id))) is not None
            and distinct.same_as(text, self.contexts[f.base].store.words_version)[0] is not None
        ]

    def _cited(
        self,
        top: list[Fused],
        fused: list[Fused],
        found: Sequence[Candidates],
        live: Sequence[int],
        ready: Sequence[Prepared],
        scores: dict[tuple[int, int], float],
    ) -> list[tuple[int, Result]]:
        """Step 7 in every base that holds a result, each with its base's index, in the order
        they ranked (a chunk removed since it was ranked is not cited)."""
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
        return [
            (f.base, _named(by_place[(f.base, f.hit.chunk_id)], self.names[f.base]))
            for f in top
            if (f.base, f.hit.chunk_id) in by_place
        ]

    def _searched(
        self, mode: str, reranked: bool, took: Took, results: tuple[Result, ...]
    ) -> Searched:
        warnings = tuple(tuple(found) for found in self.warnings)
        return Searched(mode, reranked, warnings, took, results)


def _named(result: Result, base: str | None) -> Result:
    """`result` and its places (the copies of its file) in the base named `base`."""
    places = tuple(replace(place, base=base) for place in result.also_in)
    return replace(result, base=base, also_in=places)


def _called(_: int, step: Callable[[], T]) -> T:
    """A base's step called as it is (a search of one base names no error)."""
    return step()


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
