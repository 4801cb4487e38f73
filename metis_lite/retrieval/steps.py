"""One base's part of a search: the steps the pipeline (search.py) runs for each base.

    prepare      the question made ready for one base: its empty states, the question's bound,
                 the filters, Step 1 (the question embedded) and the question's words
    lists        Steps 2 and 3: the base's list by meaning and its list by words, `depth` deep
    rerank_pool  Step 5: the reranker's score of each of the base's chunks in the pool
    cite         Step 7: the base's results cited, with their scores at every step

Every read is of the one snapshot of the base that its SearchContext holds (Base.searching
opens it): a document indexed meanwhile is whole in it or absent, and a chunk the shared
in-memory vectors hold that the snapshot lacks is dropped in Step 2.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from metis_lite.errors import EmbeddingModelUnavailable, ModelError
from metis_lite.models.base import Embedder, Reranker
from metis_lite.records import (
    Citation,
    Fact,
    Filters,
    Hit,
    MetisWarning,
    Place,
    QuestionWords,
    Result,
    Scores,
    contextualize,
)
from metis_lite.retrieval import keyword
from metis_lite.retrieval.dense import VectorIndex
from metis_lite.retrieval.fusion import Candidates
from metis_lite.retrieval.snippet import snippet, word_matches
from metis_lite.settings import FUSION, KINDS, QUESTION_WORDS_MAX
from metis_lite.store import ChunkRow, IndexerLock, Store
from metis_lite.text.chunking import CHUNKS_OUTDATED
from metis_lite.text.plain import plain_text
from metis_lite.text.tokenizer import VERSION, token_spans

if TYPE_CHECKING:  # a search by words computes nothing with NumPy, nor reads its words index
    import numpy as np

    from metis_lite.retrieval.bm25 import WordIndex

MemoryOrder = Callable[[Store, list[Hit]], list[Hit]]
"""Step 6's seam: reorders a memory's results (facts that hold first); identity elsewhere."""

FactsOf = Callable[[Store, Sequence[int]], dict[int, Fact]]
"""The fact behind each chunk that is one, by chunk id (a memory's notes)."""


@dataclass(frozen=True)
class SearchContext:
    """What a search needs of an open base; models are fetched lazily (a failure is a warning)."""

    store: Store
    vectors: VectorIndex
    embedder: Callable[[], Embedder]
    reranker: Callable[[], Reranker | None]
    check_embedder: Callable[[], None] | None = None
    """Raises the ModelError of an embedding model that is not there, without loading it."""
    query_prefix: str = ""
    document_prefix: str = ""
    fusion: str = FUSION
    memory_order: MemoryOrder | None = None
    facts_of: FactsOf | None = None
    base: str | None = None
    language_warning: Callable[[], MetisWarning | None] | None = (
        None  # the model against the base's text
    )
    words: WordIndex | None = None  # the base's words in memory (bm25.py), when it keeps them


class Clock:
    """Milliseconds between laps of a step, rounded as `took` says them."""

    def __init__(self) -> None:
        self.start = self.mark = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        elapsed, self.mark = (now - self.mark) * 1000.0, now
        return round(elapsed, 3)

    def total(self) -> float:
        return round((time.perf_counter() - self.start) * 1000.0, 3)


@dataclass(frozen=True, eq=False)
class Prepared:
    """A question made ready for one base: Step 1 done, and what Steps 2 and 3 read with."""

    question: str
    """The question up to its bound (QUESTION_WORDS_MAX)."""
    mode: str
    filters: Filters
    asked: QuestionWords
    warnings: tuple[MetisWarning, ...]
    query: np.ndarray | None = None
    """The question's vector; None: no search by meaning (keyword mode, or no model)."""
    allowed: np.ndarray | None = None
    """The chunk ids the filters keep; None: no filter."""
    unrelated: float = 0.0
    """The question's mean cosine over the base's vectors (fusion.py)."""
    full: float = 0.0
    """The BM25 score of a chunk holding each of the question's words once (fusion.py)."""
    nothing: bool = False
    """Nothing to search: the base holds no chunk, or the question is empty."""


def prepare(
    ctx: SearchContext, question: str, *, mode: str, filters: Filters, took: dict[str, float]
) -> Prepared:
    """The question made ready for one base: the empty states, the question's bound, the
    filters, Step 1 (timed into `took`) and the question's words."""
    warnings: list[MetisWarning] = list(_empty_states(ctx.store))
    if not warnings and not question.strip():
        warnings.append(
            MetisWarning("EMPTY_QUESTION", "the question is empty: nothing to search for")
        )
    if warnings:
        return Prepared(question, mode, filters, QuestionWords(), tuple(warnings), nothing=True)
    # The question's words, read once by the base's own word rules (a base of older rules is
    # searched by them): its bound, the words stage, fusion's scale and the snippets use them.
    question, cut, words = _bounded(question, ctx.store.words_version)
    warnings += [cut] if cut is not None else []
    warnings += [CHUNKS_OUTDATED] if ctx.store.chunks_outdated else []
    allowed = ctx.store.filtered_chunk_ids(filters) if filters.active else None
    # Filters that keep nothing say so (an unknown source, a prefix of no document).
    unknown = set(filters.sources) - {name for _, name, _ in ctx.store.sources()}
    if unknown or (allowed is not None and not allowed.size):
        names = ", ".join(sorted(unknown))
        what = f"no source is named {names}" if unknown else "no document matches the filters"
        warnings.append(MetisWarning("NO_MATCHING_DOCUMENTS", what))

    # Step 1. Embed the question.
    clock = Clock()
    query = None
    if mode in ("hybrid", "dense"):
        query = _embed_question(ctx, question, mode, warnings)
    if query is not None and ctx.language_warning is not None:  # said when it ranks by meaning
        warnings += [w for w in (ctx.language_warning(),) if w is not None]
    took["embed"] = clock.lap() if mode != "keyword" else 0.0  # a step that did not run: 0

    if mode in ("hybrid", "keyword"):
        warnings += keyword.index_warnings(ctx.store)
    asked = keyword.question_words(ctx.store, question, words=words)  # Step 7 reads them too
    return Prepared(
        question,
        mode,
        filters,
        asked,
        tuple(warnings),
        query=query,
        allowed=allowed,
        unrelated=ctx.vectors.mean_cosine(query) if query is not None else 0.0,
        full=keyword.best_possible(ctx.store, question, asked) if mode != "dense" else 0.0,
    )


def lists(
    ctx: SearchContext,
    ready: Prepared,
    depth: int,
    took: dict[str, float],
    *,
    scored: bool = True,
) -> Candidates:
    """Steps 2 and 3 for one base, each list read `depth` deep (timed into `took`); `scored`:
    every chunk of either list also gets the score of the other (its cosine, its BM25), as
    `relative` fusion reads them."""
    clock = Clock()

    # Step 2. By meaning.
    read: list[Hit] = []  # as the vectors in memory rank them, before the snapshot's cut
    dense: list[Hit] = []
    if ready.query is not None:
        read = ctx.vectors.search(ready.query, depth, allowed=ready.allowed)
        dense = _in_snapshot(ctx.store, read)
    took["dense"] += clock.lap() if ready.query is not None else 0.0

    # Step 3. By words.
    words: list[Hit] = []
    if ready.mode in ("hybrid", "keyword"):
        words = keyword.search(
            ctx.store,
            ready.question,
            depth,
            filters=ready.filters,
            asked=ready.asked,
            index=ctx.words,
            allowed=ready.allowed,
        )
    took["keyword"] += clock.lap() if ready.mode != "dense" else 0.0

    cosine: dict[int, float] = {}
    bm25 = {hit.chunk_id: hit.score for hit in words}
    if scored and ready.query is not None:
        listed = list(dict.fromkeys([hit.chunk_id for hit in dense + words]))
        cosine = ctx.vectors.cosines(ready.query, listed)
        took["dense"] += clock.lap()
    if scored and ready.mode == "hybrid" and words:
        unread = [hit.chunk_id for hit in dense if hit.chunk_id not in bm25]
        bm25.update(
            keyword.scores_of(ctx.store, ready.question, unread, asked=ready.asked, index=ctx.words)
        )
        took["keyword"] += clock.lap()
    return Candidates(
        depth,
        tuple(dense),
        tuple(words),
        cosine,
        bm25,
        unrelated=ready.unrelated,
        vectors=ctx.vectors.count,
        full=ready.full,
        model=embedding_space(ctx) if ready.query is not None else None,
        dense_last=read[-1] if len(read) > len(dense) else None,
    )


def embedding_space(ctx: SearchContext) -> str:
    """What a base's cosines compare within: the label of its vectors with the prefixes its
    question and chunks were embedded behind. Two bases of one model label embedded behind
    other prefixes give cosines on other scales, and fusion treats them as two models."""
    return "\x00".join((ctx.vectors.model, ctx.query_prefix, ctx.document_prefix))


def rerank_pool(
    ctx: SearchContext,
    reranker: Reranker,
    question: str,
    pool: Sequence[Hit],
    warnings: list[MetisWarning],
) -> dict[int, float] | None:
    """Step 5 for one base: the reranker's score of each chunk of `pool` the base still holds
    (never a chunk gone since); None, with the warning, when the reranker failed."""
    rows = ctx.store.chunk_rows([hit.chunk_id for hit in pool])
    kept = [hit for hit in pool if hit.chunk_id in rows]
    try:
        scores = reranker.score(question, [_rerank_text(rows[h.chunk_id]) for h in kept])
    except ModelError as exc:
        warnings.append(
            MetisWarning("RERANKER_UNAVAILABLE", f"{exc.message}: results in the fused order")
        )
        return None
    return {hit.chunk_id: float(s) for hit, s in zip(kept, scores, strict=True)}


def bounded_question(question: str, *, version: int = VERSION) -> tuple[str, MetisWarning | None]:
    """The question up to its QUESTION_WORDS_MAX-th distinct word by the word rules `version`,
    and the warning that says what was left out (None when nothing was)."""
    kept, cut, _ = _bounded(question, version)
    return kept, cut


def _bounded(question: str, version: int) -> tuple[str, MetisWarning | None, tuple[str, ...]]:
    """bounded_question, and the distinct words kept, in order: the one reading of the
    question's words that the rest of the search uses."""
    seen: dict[str, None] = {}
    for start, _, word in token_spans(question, version=version):
        if word in seen:
            continue
        if len(seen) == QUESTION_WORDS_MAX:
            kept = question[:start].rstrip()
            return (
                kept,
                MetisWarning(
                    "QUESTION_CUT",
                    f"the question has more than {QUESTION_WORDS_MAX} distinct words: it was "
                    f"searched up to its {QUESTION_WORDS_MAX}th ({len(kept)} of "
                    f"{len(question)} characters)",
                ),
                tuple(seen),
            )
        seen[word] = None
    return question, None, tuple(seen)


def _empty_states(store: Store) -> list[MetisWarning]:
    """The empty states (docs/how-search-works.md, "Warnings"): nothing indexed yet; the
    sources hold nothing a base reads."""
    counts = store.counts()
    if counts["chunks"]:
        return []
    run = store.last_run()
    if run is not None and run["state"] == "done" and counts["documents"] == 0:
        return [
            MetisWarning(
                "NO_DOCUMENTS",
                "nothing is indexed: the sources hold no document metis-lite reads "
                f"({', '.join(KINDS)})",
            )
        ]
    state = "being built" if run is not None and run["state"] == "running" else "empty"
    return [MetisWarning("NOTHING_INDEXED_YET", f"nothing is indexed yet: the index is {state}")]


def _embed_question(ctx: SearchContext, question: str, mode: str, warnings: list[MetisWarning]):
    ctx.vectors.sync(ctx.store)
    chunk_count = ctx.store.counts()["chunks"]
    if ctx.vectors.count == 0:
        message = f"no chunk has a vector yet ({_why_without_vectors(ctx.store)})"
        try:  # a model that is not there says why (not installed: how to), without loading it
            if ctx.check_embedder is not None:
                ctx.check_embedder()
        except ModelError as exc:
            message = f"no chunk has a vector yet: {exc.message}"
        if mode == "dense":
            raise EmbeddingModelUnavailable(f"{message}: a search by meaning cannot answer")
        warnings.append(MetisWarning("NO_VECTORS", f"{message}: results by keywords"))
        return None
    try:
        query = ctx.embedder().embed([ctx.query_prefix + question])[0]
    except ModelError as exc:
        if mode == "dense":
            raise EmbeddingModelUnavailable(
                f"{exc.message}: a search by meaning needs its embedding model"
            ) from exc
        warnings.append(
            MetisWarning("EMBEDDING_MODEL_UNAVAILABLE", f"{exc.message}: results by keywords only")
        )
        return None
    if ctx.vectors.dimension is not None and query.shape[0] != ctx.vectors.dimension:
        message = (
            f"the embedding model answered dimension {query.shape[0]}, the base's vectors have "
            f"{ctx.vectors.dimension}: re-embed the base (index --reembed)"
        )
        if mode == "dense":
            raise EmbeddingModelUnavailable(message)
        warnings.append(
            MetisWarning("EMBEDDING_MODEL_UNAVAILABLE", f"{message}: results by keywords only")
        )
        return None
    missing = chunk_count - ctx.vectors.count
    if missing > 0:
        warnings.append(
            MetisWarning(
                "CHUNKS_WITHOUT_VECTORS",
                f"{missing} of {chunk_count} chunks have no vector yet "
                f"({_why_without_vectors(ctx.store)}): they are found by words only",
            )
        )
    import numpy as np

    return np.asarray(query, dtype=np.float32)


def _why_without_vectors(store: Store) -> str:
    """Why chunks lack a vector, as a search says it: an index run is on, which embeds them
    once their words are written; or they were indexed while the model did not answer."""
    if IndexerLock(store.path).held_elsewhere():
        return "an index run is on: they are being embedded, after their words"
    return "indexed while the embedding model did not answer"


def _in_snapshot(store: Store, hits: list[Hit]) -> list[Hit]:
    """The hits whose chunk the search's snapshot holds, ranked again 1, 2, …: the vectors in
    memory are shared by every search of the base and may already hold a chunk added after
    this search's snapshot began, or still lack the removal of one."""
    present = store.existing_chunks([hit.chunk_id for hit in hits])
    if len(present) == len(hits):
        return hits
    kept = [hit for hit in hits if hit.chunk_id in present]
    return [Hit(hit.chunk_id, hit.score, rank) for rank, hit in enumerate(kept, start=1)]


def reranker_of(ctx: SearchContext, warnings: list[MetisWarning]) -> Reranker | None:
    """The base's reranker; None when it has none, or, with the warning, when it fails."""
    try:
        return ctx.reranker()
    except ModelError as exc:
        warnings.append(
            MetisWarning("RERANKER_UNAVAILABLE", f"{exc.message}: results in the fused order")
        )
        return None


def _rerank_text(row: ChunkRow) -> str:
    """The reranker reads a chunk the way it is embedded: title and headings in front."""
    return contextualize(row.title, row.headings, row.text)


def cite(
    ctx: SearchContext,
    asked: QuestionWords,
    hits: Sequence[Hit],
    dense_hits: Sequence[Hit],
    keyword_hits: Sequence[Hit],
    fused: Sequence[Hit],
    rerank_scores: dict[int, float],
) -> list[Result]:
    rows = ctx.store.chunk_rows([hit.chunk_id for hit in hits])
    dense = {h.chunk_id: h for h in dense_hits}
    words = {h.chunk_id: h for h in keyword_hits}
    fused_by_id = {h.chunk_id: h for h in fused}
    terms = asked.telling or asked.words  # a question of common words only is read by them
    version = ctx.store.words_version
    facts = ctx.facts_of(ctx.store, [hit.chunk_id for hit in hits]) if ctx.facts_of else {}
    copies = ctx.store.copy_places([hit.chunk_id for hit in hits])
    results = []
    for hit in hits:
        row = rows.get(hit.chunk_id)
        if row is None:  # removed between ranking and citing
            continue
        d, w, f = dense.get(hit.chunk_id), words.get(hit.chunk_id), fused_by_id[hit.chunk_id]
        scores = Scores(
            fused=f.score,
            dense=d.score if d else None,
            dense_rank=d.rank if d else None,
            keyword=w.score if w else None,
            keyword_rank=w.rank if w else None,
            rerank=rerank_scores.get(hit.chunk_id),
        )
        citation = Citation(
            source=row.source,
            document=row.document,
            title=row.title,
            kind=row.kind,
            headings=row.headings,
            snippet=snippet(plain_text(row.text, row.kind), terms, version=version),
            page=row.page,
            line=row.line,
            anchor=row.anchor,
            ocr=row.ocr,
        )
        score = scores.rerank if scores.rerank is not None else f.score
        results.append(
            Result(
                hit.chunk_id,
                score,
                row.text,
                citation,
                scores,
                base=ctx.base,
                fact=facts.get(hit.chunk_id),
                words=word_matches(
                    asked, row.text, " ".join((row.title, *row.headings)), version=version
                ),
                also_in=tuple(  # the files that hold this document's bytes (its copies)
                    Place(hit.chunk_id, replace(citation, source=source, document=path))
                    for source, path in copies.get(hit.chunk_id, ())
                ),
            )
        )
    return results
