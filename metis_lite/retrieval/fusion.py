"""Fusion: the list by meaning and the list by words become one list, best first — of one base,
or of several bases searched together as if they were one.

Two ways, named by `fusion` (FUSIONS in settings.py):

- `relative` (the default): a chunk scores DENSE_SHARE × meaning + (1 − DENSE_SHARE) × words,
  each from 0 to 1 on a scale that no candidate window moves:

  - meaning = (cosine − unrelated) / (best − unrelated), at least 0. `unrelated` is the
    question's mean cosine over every chunk of the base (its cosine with the base's centroid):
    what a chunk that has nothing to do with the question scores. `best` is the best cosine
    found, or, when that is less than WEAK_SHARE of the way from `unrelated` to 1 (the question
    itself), that share: a list whose best is barely above the crowd stays weak, and cosines a
    hair apart stay a hair apart.
  - words = (BM25 / full) / max(best BM25 / full, WEAK_SHARE), where `full` is the BM25 of a
    chunk of average length holding each of the question's words once (`keyword.best_possible`).
    A list whose matches are only common words ("how", "do", "get" of "how many holidays do I
    get") holds a small share of the question, and stays weak instead of weighing as much as the
    best by meaning (as its first place does under RRF).

  Each chunk of either list is scored on both (`Candidates.cosine`, `Candidates.bm25`: its cosine
  and its BM25 are looked up when the other list did not reach it), so its score depends on the
  question and the chunk alone. Any chunk outside both lists scores at most what their last
  places score (`bound`); the fused places above that are the whole base's (`Ranking.certain`),
  and `deepened` reads the lists deeper until the places a search returns are. So a wider
  window never reorders the first results, and a single chunk, or chunks of equal cosines, score
  by their values, not by their places.
- `rrf`, reciprocal rank (docs/how-search-works.md, "Fusion"): each chunk scores Σ 1/(RRF_K + rank) over the lists it is in.
  Ranks need no calibration; they depend on how deep each list was read, and forget how far
  apart two chunks are.

Several bases with one embedding model (the same label on their vectors, the question and the
chunks embedded behind the same prefixes) are fused as one: the
union of their lists under one normalisation — `unrelated` the mean over all their chunks, `best`
the best of all, words as shares of the question's weight in each base (each base's BM25 has its
own word statistics; a share of the question compares across bases where a raw BM25 does not).
Bases whose models differ cannot compare cosines: each is fused alone and the bases take turns,
by reciprocal rank (docs/how-search-works.md, "Several bases").

Ties: a higher score first, then the higher cosine (a chunk without one last), then the base
given first, then the lower chunk id. Under `relative` every cosine at or below `unrelated`
scores 0 by meaning: a list by meaning read past the base's mean stays in the order of its
cosines to its end, never in the order of its chunk ids.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from metis_lite.records import Hit
from metis_lite.settings import (
    CANDIDATES_DEEPEST,
    DENSE_SHARE,
    FUSION,
    RRF_K,
    SCORE_NOISE,
    WEAK_SHARE,
)


@dataclass(frozen=True)
class Candidates:
    """What the search by meaning and the search by words found in one base, each read `depth`
    deep, with what fusion needs to put them on one scale."""

    depth: int
    dense: tuple[Hit, ...] = ()
    """By meaning, best first: cosines."""
    words: tuple[Hit, ...] = ()
    """By words, best first: BM25 scores (positive, higher is better)."""
    cosine: Mapping[int, float] = field(default_factory=dict)
    """The cosine of every chunk of either list that has a vector (float64, computed the same
    way for every chunk whatever the lists, so one chunk always scores the same)."""
    bm25: Mapping[int, float] = field(default_factory=dict)
    """The BM25 score of every chunk of either list that holds a word of the question."""
    unrelated: float = 0.0
    """The question's mean cosine over the base's vectors."""
    vectors: int = 0
    """Chunks of the base with a vector: the weight of `unrelated` among several bases."""
    full: float = 0.0
    """The BM25 score of a chunk holding each of the question's words once."""
    model: str | None = None
    """What the question's cosines compare within: the label of the vectors it was compared
    with and the prefixes of the question and the chunks (search.embedding_space); None: no
    search by meaning."""
    dense_last: Hit | None = None
    """The last place the search by meaning read, before the chunks the search's snapshot lacks
    were dropped from `dense` (its rank: how many it read; its score: the most an unread chunk
    can have). None: `dense` is the whole read."""

    @property
    def dense_more(self) -> bool:
        """Whether a deeper read could find more by meaning: the read filled its depth, counted
        before the snapshot's drops (a list cut by them is not a list that ran out)."""
        read = self.dense_last.rank if self.dense_last is not None else len(self.dense)
        return self.depth > 0 and read >= self.depth

    def last_cosine(self) -> float | None:
        """The most a chunk the search by meaning did not read can have as cosine: the last
        place read's (None: it read every chunk with a vector)."""
        if not self.dense_more:
            return None
        if self.dense_last is not None:
            return self.dense_last.score
        last = self.dense[-1]
        return self.cosine.get(last.chunk_id, last.score)

    @property
    def words_more(self) -> bool:
        """Whether a deeper read could find more by words."""
        return self.depth > 0 and len(self.words) >= self.depth


@dataclass(frozen=True)
class Fused:
    """One fused place: the base (its index in the search) and the chunk with its fused score."""

    base: int
    hit: Hit


@dataclass(frozen=True)
class Ranking:
    """The fused list, best first, and how many of its first places no deeper read can change."""

    hits: tuple[Fused, ...]
    certain: int


Read = Callable[[int], Sequence[Candidates]]
"""Every base's candidates, each list read as deep as asked."""


def deepened(
    read: Read, *, depth: int, need: int, fusion: str = FUSION
) -> tuple[Sequence[Candidates], Ranking]:
    """Read the lists `depth` deep and fuse them, and deeper (twice as deep each time, at most
    CANDIDATES_DEEPEST) until the first `need` places are certain or nothing more can be read."""
    while True:
        found = read(depth)
        ranking = fuse(found, fusion=fusion)
        more = any(c.dense_more or c.words_more for c in found)
        if ranking.certain >= need or not more or depth >= CANDIDATES_DEEPEST:
            return found, ranking
        depth = min(2 * depth, CANDIDATES_DEEPEST)


def fuse(found: Sequence[Candidates], *, fusion: str = FUSION) -> Ranking:
    """Every base's candidates as one ranking (see the module): one normalisation when the bases
    searched by meaning share a model, else each base alone and the bases in turn."""
    models = {c.model for c in found if c.model is not None}
    if len(models) > 1:
        return _in_turn([fuse([c], fusion=fusion) for c in found])
    if fusion == "rrf":
        return _rrf(found)
    return _relative(found)


def rrf(*lists: Sequence[Hit], k: int = RRF_K) -> list[Hit]:
    """Fuse ranked lists of one base into one, best first; each Hit's score is Σ 1/(k + rank)."""
    scores: dict[tuple[int, int], float] = {}
    for hits in lists:
        for hit in hits:
            key = (0, hit.chunk_id)
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + hit.rank)
    return [f.hit for f in _ranked(scores)]


def merged_lists(found: Sequence[Candidates]) -> tuple[tuple[Fused, ...], tuple[Fused, ...]]:
    """The bases' lists by meaning, and by words, each merged into one list as one base would
    have it, best first: by cosine (bases of several models, whose cosines do not compare: the
    bases in turn), and by each chunk's BM25 as a share of what the question's words could
    score in its own base; ties by the base given first, then the lower chunk id. Each hit
    keeps its own score (its cosine, its BM25) and takes its rank in the merged list: the ranks
    `rrf` fuses, and those a search of several bases cites (`dense_rank`, `keyword_rank`)."""
    in_turn = len({c.model for c in found if c.model is not None}) > 1
    dense = sorted(
        ((b, h) for b, c in enumerate(found) for h in c.dense),
        key=lambda p: (
            (p[1].rank, p[0], p[1].chunk_id) if in_turn else (-p[1].score, p[0], p[1].chunk_id)
        ),
    )
    words = sorted(
        ((b, h) for b, c in enumerate(found) for h in c.words),
        key=lambda p: (-_share(p[1].score, found[p[0]].full), p[0], p[1].chunk_id),
    )
    return _placed(dense), _placed(words)


def _placed(ordered: Sequence[tuple[int, Hit]]) -> tuple[Fused, ...]:
    return tuple(Fused(b, Hit(h.chunk_id, h.score, n)) for n, (b, h) in enumerate(ordered, 1))


def _share(bm25: float, full: float) -> float:
    return bm25 / full if full > 0 else 0.0


def _rrf(found: Sequence[Candidates]) -> Ranking:
    """Reciprocal ranks over the bases' lists merged (merged_lists); ties by cosine (those of
    the list by meaning, and those looked up), then as `_ranked` says."""
    scores: dict[tuple[int, int], float] = {}
    for merged in merged_lists(found):
        for f in merged:
            key = (f.base, f.hit.chunk_id)
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + f.hit.rank)
    cosines = {
        (b, chunk_id): cosine
        for b, c in enumerate(found)
        for chunk_id, cosine in {**{h.chunk_id: h.score for h in c.dense}, **c.cosine}.items()
    }
    hits = _ranked(scores, cosines)
    return Ranking(tuple(hits), len(hits))


@dataclass(frozen=True)
class Scale:
    """One normalisation for every base fused together (the module's `relative`)."""

    unrelated: float
    spread: float
    words: float

    @classmethod
    def of(cls, found: Sequence[Candidates]) -> Scale:
        weighted = [(c.vectors, c.unrelated) for c in found if c.model is not None and c.vectors]
        total = sum(n for n, _ in weighted)
        unrelated = sum(n * u for n, u in weighted) / total if total else 0.0
        best = max((v for c in found for v in c.cosine.values()), default=unrelated)
        spread = max(best - unrelated, WEAK_SHARE * (1.0 - unrelated))
        shares = [max(h.score for h in c.words) / c.full for c in found if c.words and c.full > 0]
        return cls(unrelated, spread, max([WEAK_SHARE, *shares]))

    def meaning(self, cosine: float | None) -> float:
        if cosine is None or self.spread <= 0:
            return 0.0
        return max(0.0, (cosine - self.unrelated) / self.spread)

    def found(self, bm25: float | None, full: float) -> float:
        if bm25 is None or full <= 0:
            return 0.0
        return bm25 / full / self.words

    def score(self, cosine: float | None, bm25: float | None, full: float) -> float:
        return DENSE_SHARE * self.meaning(cosine) + (1.0 - DENSE_SHARE) * self.found(bm25, full)


def relative(
    dense: Sequence[Hit],
    keyword: Sequence[Hit],
    *,
    full: float,
    unrelated: float,
    cosine: Mapping[int, float] | None = None,
    bm25: Mapping[int, float] | None = None,
) -> list[Hit]:
    """One base's two lists fused by `relative` (the module): `dense` with cosines, `keyword`
    with BM25 scores, each best first; `cosine` and `bm25` the scores of the chunks the other
    list did not reach (the lists' own scores otherwise)."""
    found = Candidates(
        depth=0,
        dense=tuple(dense),
        words=tuple(keyword),
        cosine={**{h.chunk_id: h.score for h in dense}, **(cosine or {})},
        bm25={**{h.chunk_id: h.score for h in keyword}, **(bm25 or {})},
        unrelated=unrelated,
        vectors=1,
        full=full,
        model="" if dense or cosine else None,
    )
    return [f.hit for f in _relative([found]).hits]


def _relative(found: Sequence[Candidates]) -> Ranking:
    scale = Scale.of(found)
    scores: dict[tuple[int, int], float] = {}
    cosines: dict[tuple[int, int], float | None] = {}
    for b, c in enumerate(found):
        for chunk_id in dict.fromkeys([h.chunk_id for h in c.dense + c.words]):
            cosine = c.cosine.get(chunk_id)
            scores[(b, chunk_id)] = scale.score(cosine, c.bm25.get(chunk_id), c.full)
            cosines[(b, chunk_id)] = cosine
    hits = _ranked(scores, cosines)
    if not any(c.dense_more or c.words_more for c in found):
        return Ranking(tuple(hits), len(hits))
    unread = Unread.of(found, scale)
    certain = next(
        (n for n, f in enumerate(hits) if not unread.behind(f, cosines[(f.base, f.hit.chunk_id)])),
        len(hits),
    )
    return Ranking(tuple(hits), certain)


@dataclass(frozen=True)
class Unread:
    """The most a chunk outside every list can have: its fused score at most `score` (what the
    lists' last places score where a list was read to its depth; a list that ended sooner holds
    all it can find), and, where that is 0, its cosine at most `cosine` (None: it has none)."""

    score: float
    cosine: float | None

    @classmethod
    def of(cls, found: Sequence[Candidates], scale: Scale) -> Unread:
        score = max((_bound(c, scale) for c in found), default=0.0)
        cosine = max((v for c in found if (v := c.last_cosine()) is not None), default=None)
        return cls(score, cosine)

    def behind(self, place: Fused, cosine: float | None) -> bool:
        """Whether every unread chunk comes after this place, whatever it is. Scores are
        monotone in the cosine and the BM25 and never below 0: where the bound is 0, every
        unread chunk scores exactly 0, and a place of 0 comes before it by a higher cosine."""
        if place.hit.score > self.score + SCORE_NOISE:
            return True
        if self.score != 0.0:
            return False
        if place.hit.score > 0.0:
            return True
        return cosine is not None and (self.cosine is None or cosine > self.cosine)


def _bound(c: Candidates, scale: Scale) -> float:
    """The most a chunk of this base outside both of its lists can score: what their last places
    score where a list was read to its depth (a list that ended sooner holds all it can find)."""
    last_bm25 = c.words[-1].score if c.words_more else None
    return scale.score(c.last_cosine(), last_bm25, c.full)


def _in_turn(rankings: Sequence[Ranking]) -> Ranking:
    """Bases that cannot share a scale take turns: each base's first, then each one's second…
    (reciprocal rank across bases); certain up to the first place whose base's own is not."""
    places = [
        (rank, b, f)
        for b, ranking in enumerate(rankings)
        for rank, f in enumerate(ranking.hits, start=1)
    ]
    places.sort(key=lambda item: (item[0], item[1]))
    hits, certain = [], None
    for n, (rank, b, f) in enumerate(places):
        if certain is None and rank > rankings[b].certain:
            certain = n
        hits.append(Fused(b, Hit(f.hit.chunk_id, f.hit.score, n + 1)))
    return Ranking(tuple(hits), len(hits) if certain is None else certain)


def _ranked(
    scores: dict[tuple[int, int], float],
    cosines: Mapping[tuple[int, int], float | None] | None = None,
) -> list[Fused]:
    """(base, chunk) → score as fused places, best first: ties by the higher cosine (none
    last), then the base given first, then the lower chunk id."""
    known = cosines or {}

    def key(item: tuple[tuple[int, int], float]) -> tuple[float, float, int, int]:
        (b, c), score = item
        cosine = known.get((b, c))
        return (-score, math.inf if cosine is None else -cosine, b, c)

    order = sorted(scores.items(), key=key)
    return [
        Fused(b, Hit(chunk_id=c, score=s, rank=rank))
        for rank, ((b, c), s) in enumerate(order, start=1)
    ]
