"""One question asked of several bases at once, merged into one `MultiAnswer`.

    from metis_lite import Base, search_bases

    with Base("handbook.db") as handbook, Base("wiki.db") as wiki:
        answer = search_bases([handbook, wiki], "Xid 79", top_k=5)
        for result in answer.results:
            print(result.base, result.score, result.citation.document)

- the bases are searched side by side (on the caller's thread pool, or one made for the call);
- results are merged by the reranker's score when every base reranked, else by the fused
  score (it compares across bases: reciprocal-rank scores depend on ranks only, and relative
  scores are each list's share of its best); each result's `score` is the one it was merged
  by; ties keep the order of the bases as given, then each base's own order;
- `took` holds, per step, the slowest base (they ran side by side), and `total` the wall time;
- each warning names its base, and an error of any base is the answer's error, its message
  prefixed with the base.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from metis_lite.base import Base
from metis_lite.errors import InvalidRequest, MetisError
from metis_lite.records import Answer, Filters, Result, Took
from metis_lite.settings import TOP_K

SEARCH_THREADS = 4
"""Bases searched side by side when the caller gives no thread pool."""


@dataclass(frozen=True)
class BaseWarning:
    """A warning of one base in a search of several; `message` is prefixed with the base."""

    base: str
    code: str
    message: str


@dataclass(frozen=True)
class MultiAnswer:
    """Several bases' answers as one: results merged (each `Result.base` says whose)."""

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
    executor: Executor | None = None,
) -> MultiAnswer:
    """Ask every base the question side by side and merge their answers (see the module).

    `bases` is a sequence (each named by `Base.name`) or a mapping of name to base; the
    names must differ. `executor` runs the searches (a pool of SEARCH_THREADS otherwise)."""
    named = dict(bases) if isinstance(bases, Mapping) else {b.name: b for b in bases}
    if not named or len(named) != len(bases):
        raise InvalidRequest("name at least one base, each once")
    started = time.perf_counter()
    own = None
    if executor is None:
        own = executor = ThreadPoolExecutor(min(SEARCH_THREADS, len(named)))
    try:
        options: dict[str, Any] = dict(mode=mode, top_k=top_k, rerank=rerank, filters=filters)
        futures = {
            name: executor.submit(base.search, question, **options) for name, base in named.items()
        }
        answers = []
        for name, future in futures.items():
            try:
                answers.append(future.result())
            except MetisError as exc:
                for other in futures.values():
                    other.cancel()
                raise _named(exc, name) from exc
    finally:
        if own is not None:
            own.shutdown(wait=False, cancel_futures=True)
    wall_ms = (time.perf_counter() - started) * 1000.0
    return merge(tuple(named), answers, mode=mode, top_k=top_k, wall_ms=wall_ms)


def merge(
    names: Sequence[str], answers: Sequence[Answer], *, mode: str, top_k: int, wall_ms: float
) -> MultiAnswer:
    """Several bases' answers as one (see the module for the order)."""
    reranked = bool(answers) and all(answer.reranked for answer in answers)
    ranked = []
    for position, (name, answer) in enumerate(zip(names, answers, strict=True)):
        for rank, result in enumerate(answer.results):
            score = result.scores.rerank if reranked else result.scores.fused
            score = float(score if score is not None else result.score)
            ranked.append((-score, position, rank, name, result))
    ranked.sort(key=lambda entry: entry[:3])
    results = tuple(
        dataclasses.replace(result, score=-negative, base=name)
        for negative, _, _, name, result in ranked[:top_k]
    )
    warnings = tuple(
        BaseWarning(name, w.code, f"{name}: {w.message}")
        for name, answer in zip(names, answers, strict=True)
        for w in answer.warnings
    )
    slowest = {
        step.name: max((getattr(a.took, step.name) for a in answers), default=0.0)
        for step in dataclasses.fields(Took)
        if step.name != "total"
    }
    took = Took(**slowest, total=wall_ms)
    return MultiAnswer(mode, reranked, warnings, took, results, tuple(names))


def _named(exc: MetisError, name: str) -> MetisError:
    """The same error, its message prefixed with the base it came from."""
    try:
        named = type(exc)(f"{name}: {exc.message}")
    except TypeError:
        return exc
    named.code, named.status = exc.code, exc.status
    return named
