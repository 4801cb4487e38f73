"""Both fusions against hand-computed sums: reciprocal rank (the spec's) and relative scores."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from metis_lite.fusion import relative, rrf
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


def scored(*pairs: tuple[int, float]) -> list[Hit]:
    return [Hit(chunk_id=c, score=s, rank=r) for r, (c, s) in enumerate(pairs, start=1)]


def test_relative_fusion_hand_computed():
    dense = scored((1, 0.90), (2, 0.85), (3, 0.80))
    words = scored((2, 6.0), (4, 3.0))
    fused = relative(dense, words, keyword_best=8.0, dense_share=0.5)
    scores = {h.chunk_id: h.score for h in fused}
    assert math.isclose(scores[1], 0.5 * 1.0)
    assert math.isclose(scores[2], 0.5 * 0.5 + 0.5 * 6.0 / 6.0)  # the words' best is 6 > 4
    assert math.isclose(scores[3], 0.0)
    assert math.isclose(scores[4], 0.5 * 3.0 / 6.0)
    assert [h.chunk_id for h in fused] == [2, 1, 4, 3]
    assert [h.rank for h in fused] == [1, 2, 3, 4]


def test_a_weak_list_by_words_is_read_against_half_the_question():
    # Its best (3.0) is under half of what a chunk holding every question word would score
    # (0.5 × 10): the list is read against 5, not 3.
    fused = relative([], scored((4, 3.0), (5, 1.0)), keyword_best=10.0)
    assert [(h.chunk_id, h.score) for h in fused] == [(4, 0.5 * 3.0 / 5.0), (5, 0.5 * 1.0 / 5.0)]


def test_relative_fusion_weak_words_do_not_outweigh_the_best_meaning():
    # The handbook's "how many holidays do I get": the words found only "get" and "do", a
    # quarter of what a chunk holding every question word would score; by meaning the vacation
    # passage is first. Under RRF the first place by words weighs as much as the first by
    # meaning and the passage sixth by meaning and first by words wins; here it does not.
    top = [(10, 0.894), (11, 0.87), (12, 0.86), (13, 0.855), (14, 0.85), (20, 0.848)]
    dense = scored(*top, *((c, 0.77) for c in range(30, 74)))
    words = scored((20, 3.6), (31, 3.4), (32, 3.3), (33, 3.0), (34, 2.4), (35, 2.3), (10, 2.0))
    best = 14.5
    assert relative(dense, words, keyword_best=best)[0].chunk_id == 10
    assert rrf(dense, words)[0].chunk_id == 20


def test_relative_fusion_of_one_list_keeps_its_order_and_its_share():
    alone = relative(scored((5, 0.9), (6, 0.8)), [], keyword_best=0.0)
    assert [(h.chunk_id, h.score) for h in alone] == [(5, 0.5), (6, 0.0)]
    words = scored((7, 5.0), (8, 4.0), (9, 1.0))
    fused = relative([], words, keyword_best=2.0)
    assert [(h.chunk_id, h.score) for h in fused] == [(7, 0.5), (8, 0.4), (9, 0.1)]
    assert [h.chunk_id for h in relative([], words, keyword_best=0.0)] == [7, 8, 9]
    assert relative([], [], keyword_best=1.0) == []


def test_equal_cosines_are_each_the_best():
    fused = relative(scored((1, 0.5), (2, 0.5)), scored((2, 30.0)), keyword_best=10.0)
    scores = {h.chunk_id: h.score for h in fused}
    assert math.isclose(scores[2], 0.5 + 0.5)
    assert math.isclose(scores[1], 0.5)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.floats(-1, 1)), unique_by=lambda p: p[0]),
    st.lists(st.tuples(st.integers(0, 40), st.floats(0, 50)), unique_by=lambda p: p[0]),
    st.floats(0.1, 100),
)
def test_relative_fusion_scores_are_the_weighted_sum_and_ordered(d, w, best):
    dense = scored(*sorted(d, key=lambda p: -p[1]))
    words = scored(*sorted(w, key=lambda p: -p[1]))
    fused = relative(dense, words, keyword_best=best)
    assert {h.chunk_id for h in fused} == {c for c, _ in d} | {c for c, _ in w}
    hi, lo = (dense[0].score, dense[-1].score) if dense else (0.0, 0.0)
    scale = max(words[0].score, 0.5 * best) if words else 1.0
    for h in fused:
        cos = dict(d).get(h.chunk_id)
        place = 0.0 if cos is None else (cos - lo) / (hi - lo) if hi > lo else 1.0
        expected = 0.5 * place + 0.5 * dict(w).get(h.chunk_id, 0.0) / scale
        assert math.isclose(h.score, expected, abs_tol=1e-9)
        assert -1e-9 <= h.score <= 1 + 1e-9
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
