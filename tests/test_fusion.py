"""Reciprocal-rank fusion against hand-computed sums."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from metis_lite.fusion import rrf
from metis_lite.records import Hit


def hits(*ids: int) -> list[Hit]:
    return [Hit(chunk_id=i, score=0.0, rank=r) for r, i in enumerate(ids, start=1)]


def test_hand_computed_example():
    fused = rrf(hits(10, 20, 30), hits(30, 40))
    scores = {h.chunk_id: h.score for h in fused}
    assert math.isclose(scores[30], 1 / 63 + 1 / 61)
    assert math.isclose(scores[10], 1 / 61)
    assert math.isclose(scores[20], 1 / 62)
    assert math.isclose(scores[40], 1 / 62)
    assert [h.chunk_id for h in fused] == [30, 10, 20, 40]
    assert [h.rank for h in fused] == [1, 2, 3, 4]


def test_found_by_both_beats_first_of_one():
    # The spec: a chunk both lists found ranks above one only one list found first.
    fused = rrf(hits(1, 2), hits(3, 2))
    assert fused[0].chunk_id == 2


def test_single_list_keeps_its_order():
    fused = rrf(hits(5, 6, 7))
    assert [h.chunk_id for h in fused] == [5, 6, 7]
    assert math.isclose(fused[0].score, 1 / 61)


def test_empty():
    assert rrf() == [] and rrf([], []) == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 50), unique=True), st.lists(st.integers(0, 50), unique=True))
def test_scores_are_the_sum_over_lists(a, b):
    fused = rrf(hits(*a), hits(*b))
    for hit in fused:
        expected = sum(
            1 / (60 + r) for lst in (a, b) for r, c in enumerate(lst, 1) if c == hit.chunk_id
        )
        assert math.isclose(hit.score, expected)
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
    assert {h.chunk_id for h in fused} == set(a) | set(b)
