"""Both fusions against hand-computed scores, and the properties that make a ranking trustworthy:
a wider window never reorders the first results, ties are broken one way, one chunk or equal
cosines score by their values, and several bases sharing a model rank as one."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from metis_lite.records import Hit
from metis_lite.retrieval.fusion import Candidates, deepened, fuse, relative, rrf
from metis_lite.retrieval.search import candidates

PROPERTIES = settings(max_examples=150, deadline=None)


def hits(*ids: int) -> list[Hit]:
    return [Hit(chunk_id=i, score=0.0, rank=r) for r, i in enumerate(ids, start=1)]


def scored(*pairs: tuple[int, float]) -> list[Hit]:
    return [Hit(chunk_id=c, score=s, rank=r) for r, (c, s) in enumerate(pairs, start=1)]


def test_hand_computed_example():
    fused = rrf(hits(10, 20, 30), hits(30, 40))
    scores = {h.chunk_id: h.score for h in fused}
    assert math.isclose(scores[30], 1 / 63 + 1 / 61)
    assert math.isclose(scores[10], 1 / 61)
    assert math.isclose(scores[20], 1 / 62)
    assert math.isclose(scores[40], 1 / 62)
    assert [h.chunk_id for h in fused] == [30, 10, 20, 40]  # 20 and 40 tie: the lower id first
    assert [h.rank for h in fused] == [1, 2, 3, 4]


def test_found_by_both_beats_first_of_one():
    # Reciprocal-rank fusion: a chunk both lists found ranks above one only one list found first.
    fused = rrf(hits(1, 2), hits(3, 2))
    assert fused[0].chunk_id == 2


def test_single_list_keeps_its_order():
    fused = rrf(hits(5, 6, 7))
    assert [h.chunk_id for h in fused] == [5, 6, 7]
    assert math.isclose(fused[0].score, 1 / 61)


def test_empty():
    assert rrf() == [] and rrf([], []) == []
    assert relative([], [], full=1.0, unrelated=0.0) == []


def test_relative_fusion_hand_computed():
    # unrelated level 0.70, best cosine 0.90: meaning = (cosine - 0.70) / 0.20.
    # full weight 8: chunk 2's 6.0 is the best share (0.75), so words = BM25 / 8 / 0.75.
    # Chunk 4 (words only) has cosine 0.75; chunk 1 (meaning only) has BM25 2.0.
    dense = scored((1, 0.90), (2, 0.85), (3, 0.80))
    words = scored((2, 6.0), (4, 3.0))
    fused = relative(dense, words, full=8.0, unrelated=0.70, cosine={4: 0.75}, bm25={1: 2.0})
    assert [h.chunk_id for h in fused] == [2, 1, 4, 3]
    expected = [0.5 * 0.75 + 0.5 * 1.0, 0.5 * 1.0 + 0.5 / 3, 0.5 * 0.25 + 0.5 * 0.5, 0.5 * 0.5]
    assert [round(h.score, 12) for h in fused] == [round(e, 12) for e in expected]
    assert [h.rank for h in fused] == [1, 2, 3, 4]


def test_a_weak_list_by_words_is_read_against_half_the_question():
    # Its best holds 0.3 of the question's weight (3.0 of 10), under half: read against 0.5.
    fused = relative([], scored((4, 3.0), (5, 1.0)), full=10.0, unrelated=0.0)
    assert [(h.chunk_id, round(h.score, 12)) for h in fused] == [(4, 0.3), (5, 0.1)]


def test_a_weak_list_by_meaning_is_read_against_half_the_way_to_the_question():
    # Best 0.80, unrelated 0.78: 0.02 above the crowd, under half of the 0.22 to cosine 1.
    fused = relative(scored((1, 0.80), (2, 0.79)), [], full=0.0, unrelated=0.78)
    assert [(h.chunk_id, round(h.score, 12)) for h in fused] == [
        (1, round(1 / 11, 12)),
        (2, round(1 / 22, 12)),
    ]


def test_relative_fusion_weak_words_do_not_outweigh_the_best_meaning():
    # The handbook's "how many holidays do I get": the words found only "get" and "do", a
    # quarter of what a chunk holding every question word would score; by meaning the vacation
    # passage is first. Under RRF the first place by words weighs as much as the first by
    # meaning and the passage sixth by meaning and first by words wins; here it does not.
    top = [(10, 0.894), (11, 0.87), (12, 0.86), (13, 0.855), (14, 0.85), (20, 0.848)]
    dense = scored(*top, *((c, 0.77) for c in range(30, 74)))
    words = scored((20, 3.6), (31, 3.4), (32, 3.3), (33, 3.0), (34, 2.4), (35, 2.3), (10, 2.0))
    assert relative(dense, words, full=14.5, unrelated=0.78)[0].chunk_id == 10
    assert rrf(dense, words)[0].chunk_id == 20


def test_one_candidate_and_equal_cosines_score_by_their_value_not_their_place():
    # Alone in its list, a chunk gets the share its cosine earns, not the whole share.
    low = relative(scored((1, 0.05)), [], full=0.0, unrelated=0.78)
    high = relative(scored((1, 0.95)), [], full=0.0, unrelated=0.78)
    assert low[0].score == 0.0 and high[0].score == 0.5
    equal = relative(scored((1, 0.8), (2, 0.8), (3, 0.8)), [], full=0.0, unrelated=0.78)
    assert [h.chunk_id for h in equal] == [1, 2, 3]  # a tie: by chunk id
    assert {round(h.score, 12) for h in equal} == {round(1 / 11, 12)}


def test_near_equal_cosines_get_near_equal_scores():
    # Min-max over a window gave cosines 1e-7 apart the whole share and none.
    fused = relative(scored((1, 0.8000001), (2, 0.8)), [], full=0.0, unrelated=0.78)
    assert abs(fused[0].score - fused[1].score) < 1e-5


def test_a_base_without_its_model_keeps_the_words_share_beside_one_with_it():
    with_model = Candidates(
        depth=50,
        dense=tuple(scored((1, 0.9))),
        cosine={1: 0.9},
        unrelated=0.7,
        vectors=10,
        model="m",
    )
    words_only = Candidates(depth=50, words=tuple(scored((1, 4.0))), bm25={1: 4.0}, full=4.0)
    ranking = fuse([with_model, words_only])
    assert [(f.base, f.hit.chunk_id, round(f.hit.score, 12)) for f in ranking.hits] == [
        (0, 1, 0.5),
        (1, 1, 0.5),  # the same score: the base given first comes first
    ]


def test_bases_whose_models_differ_take_turns():
    one = Candidates(
        depth=50, dense=tuple(scored((1, 0.9), (2, 0.8))), cosine={1: 0.9, 2: 0.8}, model="a"
    )
    other = Candidates(depth=50, dense=tuple(scored((7, 0.3))), cosine={7: 0.3}, model="b")
    ranking = fuse([one, other])
    assert [(f.base, f.hit.chunk_id) for f in ranking.hits] == [(0, 1), (1, 7), (0, 2)]


# -- properties over a whole base: the lists a search reads are its top `depth` -------------


@st.composite
def a_base(draw):
    """A base's question: every chunk's cosine, the BM25 of those that hold a question word,
    and what a chunk holding each of them once would score. Cosines are drawn from a few
    values, some a hair apart, so ties and near-ties are common."""
    n = draw(st.integers(1, 220))
    levels = st.sampled_from([0.7, 0.75, 0.8, 0.8 + 1e-7, 0.8 - 1e-7, 0.85, 0.9])
    cosines = draw(st.lists(levels | st.floats(0.6, 0.95), min_size=n, max_size=n))
    matched = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    bm25 = draw(
        st.lists(
            st.sampled_from([1.0, 2.0, 2.0 + 1e-9]) | st.floats(0.1, 9), min_size=n, max_size=n
        )
    )
    full = draw(st.floats(1.0, 12.0))
    return (
        {c: cosines[c] for c in range(n)},
        {c: bm25[c] for c in range(n) if matched[c]},
        full,
    )


def reader(cosines, bm25, full, *, unrelated=None, model="m"):
    """What search.lists does for a base, at any depth: each list's top `depth` (by score,
    ties by chunk id), both scores of every chunk listed."""
    unrelated = sum(cosines.values()) / len(cosines) if unrelated is None else unrelated

    def read(depth: int) -> list[Candidates]:
        dense = sorted(cosines, key=lambda c: (-cosines[c], c))[:depth]
        words = sorted(bm25, key=lambda c: (-bm25[c], c))[:depth]
        listed = set(dense) | set(words)
        return [
            Candidates(
                depth=depth,
                dense=tuple(scored(*((c, cosines[c]) for c in dense))),
                words=tuple(scored(*((c, bm25[c]) for c in words))),
                cosine={c: cosines[c] for c in listed},
                bm25={c: bm25[c] for c in listed if c in bm25},
                unrelated=unrelated,
                vectors=len(cosines),
                full=full,
                model=model,
            )
        ]

    return read


def first(read, top_k: int, fusion: str = "relative") -> list[int]:
    _, ranking = deepened(read, depth=candidates(top_k), need=top_k, fusion=fusion)
    return [f.hit.chunk_id for f in ranking.hits[:top_k]]


@PROPERTIES
@given(a_base())
def test_a_wider_window_never_reorders_the_first_results(base):
    read = reader(*base)
    five, twenty_five = first(read, 5), first(read, 25)
    assert twenty_five[:5] == five
    # And both are the whole base's order: the lists read to their end.
    everything = fuse(read(len(base[0])))
    assert five == [f.hit.chunk_id for f in everything.hits[:5]]


@PROPERTIES
@given(a_base(), st.randoms())
def test_ties_and_near_ties_are_broken_the_same_way_whatever_the_order_of_the_lists(base, rnd):
    # The fused order depends on the chunks' scores alone: not on the order their lists, or
    # the chunks of equal score in them, came in.
    cosines, bm25, full = base
    read = reader(cosines, bm25, full)
    [found] = read(len(cosines) + 1)
    shuffled_dense, shuffled_words = list(found.dense), list(found.words)
    rnd.shuffle(shuffled_dense)
    rnd.shuffle(shuffled_words)
    again = Candidates(
        depth=found.depth,
        dense=tuple(shuffled_dense),
        words=tuple(shuffled_words),
        cosine=dict(reversed(list(found.cosine.items()))),
        bm25=found.bm25,
        unrelated=found.unrelated,
        vectors=found.vectors,
        full=full,
        model="m",
    )
    assert [f.hit for f in fuse([again]).hits] == [f.hit for f in fuse([found]).hits]
    assert fuse([found]).hits == fuse([found]).hits


@PROPERTIES
@given(a_base(), st.lists(st.integers(0, 2), min_size=220, max_size=220))
def test_a_base_split_in_three_ranks_as_the_base_does(base, parts):
    # Three bases of one model, each with the same word statistics as the whole (so each
    # chunk's share of the question is the same): their union ranks as the one base does,
    # a tie between chunks of two bases broken by the order of the bases.
    cosines, bm25, full = base
    split = []
    for part in range(3):
        mine = {c: v for c, v in cosines.items() if parts[c] == part}
        if mine:  # each base's own unrelated level: their mean, weighted, is the whole's
            split.append(reader(mine, {c: v for c, v in bm25.items() if parts[c] == part}, full))

    def read_all(depth: int) -> list[Candidates]:
        return [r(depth)[0] for r in split]

    _, ranking = deepened(read_all, depth=candidates(10), need=10)
    whole = fuse(reader(cosines, bm25, full)(len(cosines) + 1)).hits
    score_in_whole = {f.hit.chunk_id: f.hit.score for f in whole}
    top = [(f.hit.chunk_id, f.hit.score) for f in ranking.hits[:10]]
    # Each chunk scores what it scores in the whole base, and the first ten are the whole's
    # first ten (chunks of equal scores may come in another order: by base, then chunk id).
    assert all(math.isclose(score, score_in_whole[c], abs_tol=1e-12) for c, score in top)
    expected = [f.hit.score for f in whole[:10]]
    assert all(math.isclose(a, b, abs_tol=1e-12) for (_, a), b in zip(top, expected, strict=True))


@PROPERTIES
@given(a_base())
def test_fused_scores_are_between_0_and_1_best_first(base):
    ranking = fuse(reader(*base)(len(base[0]) + 1))  # each list read past its end
    scores = [f.hit.score for f in ranking.hits]
    assert all(0.0 <= s <= 1.0 + 1e-12 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert ranking.certain == len(ranking.hits)  # read to the end: every place is the base's


# -- ties: by cosine, then chunk id; lists past the base's mean; top_k at the base's size ---


def test_a_list_by_meaning_past_the_bases_mean_stays_in_cosine_order():
    # Every cosine at or below `unrelated` scores 0 by meaning: they tied, and came by chunk id
    # (dense ranks 26, 28, 37… of the handbook, 27 missing). They come by cosine, to the end.
    dense = scored((9, 0.95), (3, 0.77), (1, 0.76), (7, 0.75), (2, 0.75), (5, 0.6))
    fused = relative(dense, [], full=0.0, unrelated=0.78)
    assert [h.chunk_id for h in fused] == [9, 3, 1, 2, 7, 5]  # 7 and 2: one cosine, by id
    assert [h.score for h in fused][1:] == [0.0] * 5


def test_fused_ties_break_by_cosine_before_chunk_id():
    # relative: a chunk of the words only (no vector) and two of meaning 0 and the same words.
    dense = scored((30, 0.70), (20, 0.60))
    words = scored((10, 2.0), (20, 2.0), (30, 2.0))
    fused = relative(dense, words, full=2.0, unrelated=0.80, bm25={30: 2.0, 20: 2.0})
    assert [h.chunk_id for h in fused] == [30, 20, 10]  # one score: by cosine, none last
    assert len({h.score for h in fused}) == 1
    # rrf: first by meaning and second by words, against the other way round: one score.
    one = Candidates(
        depth=0,
        dense=tuple(scored((8, 0.9), (4, 0.8))),
        words=tuple(scored((4, 5.0), (8, 4.0))),
        model="m",
    )
    ranking = fuse([one], fusion="rrf")
    assert [f.hit.chunk_id for f in ranking.hits] == [8, 4]
    assert ranking.hits[0].hit.score == ranking.hits[1].hit.score


def test_a_list_by_meaning_read_past_the_mean_is_not_read_deeper():
    # 50 chunks well above the crowd, 450 in it: the mean is 0.59. top_k 100 reads 400 deep;
    # places 96 to 400 score 0, and come by cosine, above every chunk not read: certain.
    cosines = {c: 0.95 for c in range(50)}
    cosines |= {c: 0.5 + 0.1 * (c - 50) / 449 for c in range(50, 500)}
    depths: list[int] = []
    read = reader(cosines, {}, 1.0)

    def counted(depth: int) -> list[Candidates]:
        depths.append(depth)
        return read(depth)

    _, ranking = deepened(counted, depth=candidates(100), need=100)
    assert depths == [400] and ranking.certain >= 100
    order = [f.hit.chunk_id for f in ranking.hits[:100]]
    assert order == sorted(cosines, key=lambda c: (-cosines[c], c))[:100]


def test_a_list_by_meaning_cut_by_the_snapshot_is_read_deeper():
    # The shared vectors hold chunks newer than the search's snapshot, closest of all: dropped
    # from its list, they left it shorter than it was read. It did not run out (dense_last).
    snapshot = {c: 0.5 + c / 100 for c in range(20)}
    newer = {100 + c: 0.99 for c in range(6)}

    def read(depth: int) -> list[Candidates]:
        every = {**snapshot, **newer}
        listed = sorted(every, key=lambda c: (-every[c], c))[:depth]
        kept = [c for c in listed if c in snapshot]
        return [
            Candidates(
                depth=depth,
                dense=tuple(scored(*((c, snapshot[c]) for c in kept))),
                cosine={c: snapshot[c] for c in kept},
                unrelated=0.6,
                vectors=26,
                model="m",
                dense_last=Hit(listed[-1], every[listed[-1]], len(listed)),
            )
        ]

    assert read(5)[0].dense == () and read(5)[0].dense_more
    _, ranking = deepened(read, depth=5, need=5)
    assert [f.hit.chunk_id for f in ranking.hits[:5]] == [19, 18, 17, 16, 15]


@st.composite
def ties(draw):
    """A base of few distinct cosines and BM25 scores: most fused scores tie."""
    n = draw(st.integers(2, 80))
    cosines = draw(st.lists(st.sampled_from([0.6, 0.7, 0.8, 0.9]), min_size=n, max_size=n))
    bm25 = draw(st.lists(st.sampled_from([None, 1.0, 2.0]), min_size=n, max_size=n))
    return (
        {c: cosines[c] for c in range(n)},
        {c: b for c, b in enumerate(bm25) if b is not None},
        2.0,
    )


@PROPERTIES
@given(ties(), st.sampled_from(["relative", "rrf"]))
def test_top_k_at_the_bases_size_gives_every_chunk_once_in_the_one_order(base, fusion):
    # top_k one less than the chunks, as many, one more: the same order, each a prefix of the
    # next; equal scores by cosine (a chunk without one last), then by chunk id.
    cosines = base[0]
    n = len(cosines)
    read = reader(*base)
    orders = {k: first(read, k, fusion) for k in (n - 1, n, n + 1)}
    assert orders[n] == orders[n + 1] and orders[n - 1] == orders[n][:-1]
    assert sorted(orders[n]) == sorted(cosines)
    placed = fuse(read(n + 1), fusion=fusion).hits
    keys = [(-f.hit.score, -cosines[f.hit.chunk_id], f.hit.chunk_id) for f in placed]
    assert keys == sorted(keys)
