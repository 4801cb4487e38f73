"""Fusion: the list by meaning and the list by words become one list, best first.

Two ways, named by a base's `spec.fusion` (FUSIONS in settings.py):

- `rrf`, the spec's ("Fusion"): each chunk scores Σ 1/(RRF_K + rank) over the lists it is in.
  Ranks, not raw scores, are combined, so a cosine and a BM25 score need no calibration; a
  chunk both lists found ranks above one only one list found first.
- `relative`: each chunk scores DENSE_SHARE × its place between the worst and the best cosine
  of the list by meaning (0 to 1), plus (1 − DENSE_SHARE) × its BM25 score over the list's
  best BM25 score — or over WEAK_WORDS × the score of a chunk holding each of the question's
  words once, when even the best falls short of that (`keyword.best_possible`). Ranks throw
  away how far apart two chunks are; this keeps it. The floor is for a list of weak matches:
  where every word the chunks share with the question is common ("how", "do", "get") and its
  one telling word ("holidays") is in no chunk, the best by words holds a quarter of the
  question, and read against its own best it would weigh as much as the best by meaning (as
  its first place does under RRF). A list alone (one mode, or a model down) keeps its share,
  so that the scores of several bases, one without its model, stay on one scale.
  docs/eval.md has the measurements that made it the default.

Ties keep the order of first appearance, list by meaning first.
"""

from __future__ import annotations

from collections.abc import Sequence

from metis_lite.records import Hit
from metis_lite.settings import DENSE_SHARE, RRF_K, WEAK_WORDS


def rrf(*lists: Sequence[Hit], k: int = RRF_K) -> list[Hit]:
    """Fuse ranked lists into one, best first; each Hit's score is its fused score."""
    scores: dict[int, float] = {}
    for hits in lists:
        for hit in hits:
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + 1.0 / (k + hit.rank)
    return _ranked(scores)


def relative(
    dense: Sequence[Hit],
    keyword: Sequence[Hit],
    *,
    keyword_best: float,
    dense_share: float = DENSE_SHARE,
) -> list[Hit]:
    """Fuse by score (module docstring): `dense` best first with cosines, `keyword` best first
    with BM25 scores, `keyword_best` the BM25 score of a chunk holding every question word once
    (`keyword.best_possible`). A list alone keeps its order."""
    words_scale = max(keyword[0].score, WEAK_WORDS * keyword_best) if keyword else 0.0
    scores: dict[int, float] = {}
    if dense:
        best, worst = dense[0].score, dense[-1].score
        span = best - worst
        for hit in dense:
            place = (hit.score - worst) / span if span > 0 else 1.0
            scores[hit.chunk_id] = dense_share * place
    words_share = 1.0 - dense_share
    for hit in keyword:
        found = hit.score / words_scale if words_scale > 0 else 0.0
        scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + words_share * found
    return _ranked(scores)


def _ranked(scores: dict[int, float]) -> list[Hit]:
    order = sorted(scores.items(), key=lambda item: -item[1])
    return [Hit(chunk_id=c, score=s, rank=rank) for rank, (c, s) in enumerate(order, start=1)]
