"""Ranking metrics over one question's results: nDCG@k, recall@k, MRR@k, as BEIR reports them.

A search returns chunks; an evaluation set names what should be found (documents, or a page
or line of one). `judge` turns the chunk list into a ranking of distinct answers: a chunk that
finds an expected item not found yet takes the next place; any other chunk takes one only if
its document has not appeared yet. So for document-level judgements a passage hit counts for
its document, the first of its chunks deciding the rank, and the other chunks of the same
document take no place (BEIR's "max passage" rule).

Gains are linear in the grade (qrels' score column), as trec_eval and BEIR compute nDCG:
DCG@k = Σ grade_at(p) / log2(p + 1) over places p ≤ k; the ideal DCG puts every relevant
item's grade in descending order. Items graded 0 are not relevant and are dropped by the reader.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Judged:
    """One question's outcome: the place (1-based) at which each expected item was found.

    `places[i]` is the place of expected item i in the ranking of distinct answers, or None
    when the results did not hold it; `grades[i]` is its grade (> 0).
    """

    places: tuple[int | None, ...]
    grades: tuple[float, ...]

    @property
    def first(self) -> int | None:
        """The place of the first relevant answer, or None."""
        found = [p for p in self.places if p is not None]
        return min(found) if found else None


def judge(results: Sequence[tuple[Hashable, frozenset[int]]], grades: Sequence[float]) -> Judged:
    """Rank distinct answers from a chunk list (see the module docstring).

    `results` holds, per chunk in rank order, its document key and the indexes of the expected
    items it holds; `grades` the grade of each expected item.
    """
    places: list[int | None] = [None] * len(grades)
    seen: set[Hashable] = set()
    place = 0
    for document, items in results:
        new = [i for i in items if places[i] is None]
        if not new and document in seen:
            continue
        seen.add(document)
        place += 1
        for i in new:
            places[i] = place
    return Judged(tuple(places), tuple(float(g) for g in grades))


def dcg(gains: Sequence[float], k: int) -> float:
    """Σ gain / log2(place + 1) over the first k places."""
    return sum(g / math.log2(p + 1) for p, g in enumerate(gains[:k], start=1) if g)


def ndcg(judged: Judged, k: int) -> float:
    """nDCG@k. Where one place finds several items, it counts its highest grade (the others
    still count for recall), so the figure never exceeds 1."""
    if not judged.grades:
        return 0.0
    gains = [0.0] * k
    for place, grade in zip(judged.places, judged.grades, strict=True):
        if place is not None and place <= k:
            gains[place - 1] = max(gains[place - 1], grade)
    ideal = dcg(sorted(judged.grades, reverse=True), k)
    return min(1.0, dcg(gains, k) / ideal) if ideal else 0.0


def recall(judged: Judged, k: int) -> float:
    """Share of the expected items found in the first k places."""
    if not judged.grades:
        return 0.0
    return sum(1 for p in judged.places if p is not None and p <= k) / len(judged.grades)


def reciprocal_rank(judged: Judged, k: int | None = None) -> float:
    """1 / the place of the first relevant answer (within k when given), else 0."""
    first = judged.first
    if first is None or (k is not None and first > k):
        return 0.0
    return 1.0 / first


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
