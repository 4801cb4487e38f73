"""Ask a base every question of an evaluation set in each mode; score and compare the modes.

    Step 1. Resolve each expected item to the chunks that hold it (a document's chunks; the
            chunk of a page; the chunk where a line falls).
    Step 2. For each mode, ask each question with top_k = k, as a user would (nDCG@k,
            recall@k, MRR@k and the time per search come from it), then, when some expected
            item is missing from those k, again with top_k = 100 for recall@100. (A deeper
            search fuses deeper lists and reranks more candidates, so its first k are not always
            what a search of top_k = k answers; an item found in the first k is taken to be
            within the first 100 — exactly so by words or by meaning alone, in practice so when
            fused, and it spares most deep searches, which cite 100 passages.)
    Step 3. Per pair of modes, count the questions each ranks better, by the reciprocal rank of
            the first relevant answer, and keep the widest gaps as examples, each with the words
            the console uses to say why its passage came up.
    Step 4. Name the questions every mode missed (no expected item in any mode's first k):
            no comparison shows them, and they are where a change can help most.

A mode that cannot run (dense without its embedding model) is skipped with its error; the
warnings searches gave (results by keywords only …) are counted per mode.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest, ModelError
from metis_lite.evaluation import metrics
from metis_lite.evaluation.metrics import Judged
from metis_lite.evaluation.sets import EXPECTED_NOT_IN_BASE, EvalSet, Expected
from metis_lite.evaluation.why import why_it_came_up
from metis_lite.records import Answer, MetisWarning, WordMatch
from metis_lite.retrieval.search import candidates
from metis_lite.settings import FUSIONS, MODES, TOP_K, TOP_K_MAX

DEEP_K = 100
"""recall@100: the deeper search's top_k (the most a search returns)."""

NO_MEANING_CODES = frozenset(("EMBEDDING_MODEL_UNAVAILABLE", "NO_VECTORS"))
"""Warnings that say a search did not search by meaning (as the console reads them)."""

EXAMPLES_PER_SIDE = 3
"""Examples kept per pair of modes for each side that ranks a question better."""

EvalProgress = Callable[[str, int, int], None]
"""progress(mode, questions done, questions)."""


@dataclass(frozen=True)
class ModeReport:
    mode: str
    ndcg: float
    recall_k: float
    recall_deep: float
    mrr: float
    queries: int
    ms_per_search: float
    reranked: int  # searches the reranker ordered
    warnings: tuple[tuple[str, str, int], ...] = ()  # (code, first message, questions)

    def metrics(self, k: int) -> dict[str, float | int]:
        """The figures as `--json` and saved runs hold them."""
        return {
            f"ndcg@{k}": round(self.ndcg, 4),
            f"recall@{k}": round(self.recall_k, 4),
            f"recall@{DEEP_K}": round(self.recall_deep, 4),
            f"mrr@{k}": round(self.mrr, 4),
            "queries": self.queries,
            "ms_per_search": round(self.ms_per_search, 2),
        }


@dataclass(frozen=True)
class Skipped:
    mode: str
    code: str
    message: str


@dataclass(frozen=True)
class Example:
    question: str
    expected: str  # the expected item the better mode found first
    better: str
    ranks: tuple[tuple[str, int | None], ...]  # (mode, place of that item; None: not in 100)
    why: str


@dataclass(frozen=True)
class Comparison:
    first: str
    second: str
    first_better: int
    second_better: int
    same: int
    examples: tuple[Example, ...]


@dataclass(frozen=True)
class Missed:
    """A question no mode answered within its first k."""

    question: str
    expected: tuple[str, ...]  # what should have answered it (`doc.md, line 12`)
    ranks: tuple[tuple[str, int | None], ...]  # (mode, its place past k; None: not in 100)


@dataclass(frozen=True)
class EvalReport:
    k: int
    rerank: bool
    questions: int
    modes: tuple[ModeReport, ...]
    skipped: tuple[Skipped, ...]
    comparisons: tuple[Comparison, ...]
    warnings: tuple[MetisWarning, ...]
    missed: tuple[Missed, ...] = ()

    def metrics(self) -> dict[str, dict[str, float | int]]:
        return {m.mode: m.metrics(self.k) for m in self.modes}


@dataclass(frozen=True)
class _Signal:
    """What the retrievers said of one chunk for one question (the console's why): its ranks,
    the reranker's score, the question's words it holds, and whether a search that found it
    searched by meaning."""

    dense_rank: int | None = None
    keyword_rank: int | None = None
    rerank: float | None = None
    words: tuple[WordMatch, ...] = ()
    meaning_searched: bool = True


@dataclass
class _Outcome:
    """One question asked in one mode."""

    top: Judged
    deep: Judged
    ms: float
    item_chunk: dict[int, int] = field(default_factory=dict)  # item → first chunk holding it


FUSED_MODES = tuple(f"hybrid:{fusion}" for fusion in FUSIONS)
"""Hybrid with a named fusion (`hybrid:rrf`), so that one run compares the fusions; plain
`hybrid` uses the base's own (`spec.fusion`)."""


def parse_modes(text: str) -> tuple[str, ...]:
    modes = tuple(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    known = MODES + FUSED_MODES
    unknown = [m for m in modes if m not in known]
    if unknown or not modes:
        raise InvalidRequest(
            f"unknown mode {unknown[0] if unknown else text!r}: choose from {', '.join(known)}"
        )
    return modes


def _search(base: Base, text: str, mode: str, top_k: int, rerank: bool) -> Answer:
    """One question in one evaluation mode (`hybrid:rrf` names the fusion too)."""
    mode, _, fusion = mode.partition(":")
    return base.search(text, mode=mode, top_k=top_k, rerank=rerank, fusion=fusion or None)


def evaluate(
    base: Base,
    evalset: EvalSet,
    *,
    modes: Sequence[str] = MODES,
    k: int = TOP_K,
    rerank: bool = True,
    progress: EvalProgress | None = None,
) -> EvalReport:
    """Run the evaluation set against the base in each mode (module docstring's steps)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= TOP_K_MAX:
        raise InvalidRequest(f"k must be a whole number from 1 to {TOP_K_MAX}, not {k!r}")
    questions = evalset.questions
    warnings = list(evalset.warnings)

    # Step 1. Resolve expected items to chunks.
    holders, missing = resolve(base, {e for q in questions for e in q.expected})
    if missing:
        names = sorted(e.label() for e in missing)
        message = (
            f"{len(names)} expected items are not in the base (they count as not found): "
            + ", ".join(names[:5])
            + (" …" if len(names) > 5 else "")
        )
        warnings.append(MetisWarning(EXPECTED_NOT_IN_BASE, message))
    per_question = [_items_by_chunk(q.expected, holders) for q in questions]
    grades = [tuple(e.grade for e in q.expected) for q in questions]

    # Step 2. Ask each question in each mode.
    outcomes: dict[str, list[_Outcome]] = {}
    signals: list[dict[int, _Signal]] = [{} for _ in questions]
    reports, skipped, errors = [], [], []
    for mode in modes:
        try:
            done, report = _run_mode(
                base, mode, questions, per_question, grades, signals, k, rerank, progress
            )
        except ModelError as exc:
            skipped.append(Skipped(mode, exc.code, exc.message))
            errors.append(exc)
            continue
        outcomes[mode] = done
        reports.append(report)
    if not reports:
        raise errors[0]  # no mode could run: the caller sees why (EMBEDDING_MODEL_UNAVAILABLE)

    # Step 3. Compare the modes pairwise.
    comparisons = tuple(
        _compare(a, b, outcomes, questions, signals, k) for a, b in combinations(outcomes, 2)
    )

    # Step 4. The questions every mode missed.
    missed = tuple(
        Missed(
            question.text,
            tuple(e.label() for e in question.expected),
            tuple((mode, place(done[n], None, k)) for mode, done in outcomes.items()),
        )
        for n, question in enumerate(questions)
        if all(
            (where := place(done[n], None, k)) is None or where > k for done in outcomes.values()
        )
    )
    return EvalReport(
        k,
        rerank,
        len(questions),
        tuple(reports),
        tuple(skipped),
        comparisons,
        tuple(warnings),
        missed,
    )


def _run_mode(base, mode, questions, per_question, grades, signals, k, rerank, progress):
    done: list[_Outcome] = []
    warned: dict[str, list] = {}
    reranked = 0
    for n, question in enumerate(questions):
        started = time.perf_counter()
        top = _search(base, question.text, mode, k, rerank)
        ms = (time.perf_counter() - started) * 1000.0
        judged = _judge(top, per_question[n], grades[n])
        deep, deep_judged = top, judged
        if k < DEEP_K and None in judged.places:
            deep = _search(base, question.text, mode, DEEP_K, rerank)
            deep_judged = _judge(deep, per_question[n], grades[n])
        for warning in top.warnings:
            entry = warned.setdefault(warning.code, [warning.message, 0])
            entry[1] += 1
        reranked += top.reranked
        outcome = _Outcome(judged, deep_judged, ms)
        for answer in (top, deep) if deep is not top else (top,):
            for result in answer.results:
                for item in per_question[n].get(result.chunk_id, ()):
                    outcome.item_chunk.setdefault(item, result.chunk_id)
                _note(signals[n], result, answer)
        done.append(outcome)
        if progress:
            progress(mode, n + 1, len(questions))
    report = ModeReport(
        mode,
        ndcg=metrics.mean([metrics.ndcg(o.top, k) for o in done]),
        recall_k=metrics.mean([metrics.recall(o.top, k) for o in done]),
        recall_deep=metrics.mean([metrics.recall(o.deep, DEEP_K) for o in done]),
        mrr=metrics.mean([metrics.reciprocal_rank(o.top, k) for o in done]),
        queries=len(done),
        ms_per_search=metrics.mean([o.ms for o in done]),
        reranked=reranked,
        warnings=tuple((code, m, count) for code, (m, count) in warned.items()),
    )
    return done, report


def _judge(answer: Answer, items_of: dict[int, frozenset[int]], grades) -> Judged:
    """Each result holds the expected items of its chunk and of every other place of its text
    (`also_in`: the same passage, shown once with its places)."""
    none: frozenset[int] = frozenset()
    ranked = [
        (
            (r.citation.source, r.citation.document),
            none.union(*(items_of.get(p.chunk_id, none) for p in (r.place, *r.also_in))),
        )
        for r in answer.results
    ]
    return metrics.judge(ranked, grades)


def _note(signals: dict[int, _Signal], result, answer: Answer) -> None:
    s, old = result.scores, signals.get(result.chunk_id)
    meaning = answer.mode != "keyword" and not any(
        w.code in NO_MEANING_CODES for w in answer.warnings
    )
    if old is None:
        old = _Signal(words=result.words, meaning_searched=meaning)
    signals[result.chunk_id] = _Signal(
        old.dense_rank if s.dense_rank is None else s.dense_rank,
        old.keyword_rank if s.keyword_rank is None else s.keyword_rank,
        old.rerank if s.rerank is None else s.rerank,
        old.words or result.words,
        old.meaning_searched or meaning,
    )


def place(outcome: _Outcome, item: int | None, k: int) -> int | None:
    """Where a question's first relevant answer (or item `item`) came: its place in the top-k
    search, else in the deeper one (never shown above k+1: the top-k search did not hold it)."""
    top = outcome.top.first if item is None else outcome.top.places[item]
    if top is not None:
        return top
    deep = outcome.deep.first if item is None else outcome.deep.places[item]
    return None if deep is None else max(deep, k + 1)


def _compare(a, b, outcomes, questions, signals, k) -> Comparison:
    wins: dict[str, list[tuple[float, int]]] = {a: [], b: []}
    same = 0
    for n in range(len(questions)):
        ra = _rr(place(outcomes[a][n], None, k))
        rb = _rr(place(outcomes[b][n], None, k))
        if ra == rb:
            same += 1
        else:
            wins[a if ra > rb else b].append((abs(ra - rb), n))
    examples = []
    for mode in (a, b):
        for _, n in sorted(wins[mode], key=lambda gap: (-gap[0], gap[1]))[:EXAMPLES_PER_SIDE]:
            examples.append(_example(mode, n, outcomes, questions, signals, k))
    return Comparison(a, b, len(wins[a]), len(wins[b]), same, tuple(examples))


def _rr(rank: int | None) -> float:
    return 0.0 if rank is None else 1.0 / rank


def _example(better, n, outcomes, questions, signals, k) -> Example:
    outcome = outcomes[better][n]
    first = place(outcome, None, k)
    item = min(
        (i for i in range(len(questions[n].expected)) if place(outcome, i, k) == first),
        default=0,
    )
    chunk = outcome.item_chunk.get(item)
    return Example(
        question=questions[n].text,
        expected=questions[n].expected[item].label(),
        better=better,
        ranks=tuple((mode, place(done[n], item, k)) for mode, done in outcomes.items()),
        why=why(_signal(signals[n], chunk), within=candidates(k)),
    )


def _signal(signals: dict[int, _Signal], chunk: int | None) -> _Signal | None:
    """The chunk's signal, saying meaning was searched when any search of the question did
    (as the console reads its three answers); None when no search found the chunk."""
    signal = signals.get(chunk) if chunk is not None else None
    if signal is None:
        return None
    searched = any(s.meaning_searched for s in signals.values())
    return dataclasses.replace(signal, meaning_searched=searched)


NOT_FOUND = "not among the best 100 by meaning or by words"
"""Why, for an expected passage no search of the run found."""


def why(signal: _Signal | None, *, within: int | None = None) -> str:
    """Why a passage came up, by the rules the console's Compare view says it by
    (evaluation/why.py); NOT_FOUND when no search found it (`signal` None).

    A rank past `within` (what each retriever keeps for a search of top_k = k; the deeper
    search's lists go further) counts as not found by that retriever.
    """
    if signal is None:
        return NOT_FOUND
    d, w = signal.dense_rank, signal.keyword_rank
    if within is not None:
        d = d if d is not None and d <= within else None
        w = w if w is not None and w <= within else None
    return why_it_came_up(
        d,
        w,
        signal.words,
        meaning_searched=signal.meaning_searched,
        rerank=signal.rerank,
    )


# -- Step 1 ---------------------------------------------------------------------------------


def resolve(
    base: Base, items: set[Expected]
) -> tuple[dict[Expected, frozenset[int]], list[Expected]]:
    """The chunk ids holding each expected item, and the items the base does not hold."""
    db = base.store.db
    documents: dict[str, list[int]] = {}
    for doc_id, path, source in db.execute(
        "SELECT d.id, d.path, s.name FROM documents d JOIN sources s ON s.id = d.source_id"
    ):
        documents.setdefault(path, []).append(doc_id)
        documents.setdefault(f"{source}/{path}", []).append(doc_id)
    chunks_of: dict[int, list[tuple[int, int | None, int | None]]] = {}

    def chunks(doc_id: int) -> list[tuple[int, int | None, int | None]]:
        if doc_id not in chunks_of:
            chunks_of[doc_id] = list(
                db.execute(
                    "SELECT id, page, line FROM chunks WHERE document_id = ? ORDER BY ordinal",
                    (doc_id,),
                )
            )
        return chunks_of[doc_id]

    holders: dict[Expected, frozenset[int]] = {}
    missing = []
    for item in sorted(items, key=lambda e: json.dumps(e.to_json(), sort_keys=True)):
        ids: set[int] = set()
        for doc_id in dict.fromkeys(documents.get(item.document, ())):
            rows = [r for r in chunks(doc_id) if item.page is None or r[1] == item.page]
            if item.line is not None:
                starts = [r for r in rows if r[2] is not None and r[2] <= item.line]
                rows = starts[
                    -1:
                ]  # the chunk where the line falls: the last one starting before it
            ids.update(r[0] for r in rows)
        holders[item] = frozenset(ids)
        if not ids:
            missing.append(item)
    return holders, missing


def _items_by_chunk(
    expected: Sequence[Expected], holders: dict[Expected, frozenset[int]]
) -> dict[int, frozenset[int]]:
    by_chunk: dict[int, set[int]] = {}
    for i, item in enumerate(expected):
        for chunk_id in holders[item]:
            by_chunk.setdefault(chunk_id, set()).add(i)
    return {chunk_id: frozenset(items) for chunk_id, items in by_chunk.items()}
