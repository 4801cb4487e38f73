"""Reciprocal-rank fusion: each chunk scores Σ 1/(RRF_K + rank) over the lists it is in.

Ranks, not raw scores, are combined, so a cosine and a BM25 score need no calibration
(spec, "Fusion"). Ties keep the order of first appearance, dense list first.
"""

from __future__ import annotations

from collections.abc import Sequence

from metis_lite.records import Hit
from metis_lite.settings import RRF_K


def rrf(*lists: Sequence[Hit], k: int = RRF_K) -> list[Hit]:
    """Fuse ranked lists into one, best first; each Hit's score is its fused score."""
    scores: dict[int, float] = {}
    for hits in lists:
        for hit in hits:
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + 1.0 / (k + hit.rank)
    order = sorted(scores.items(), key=lambda item: -item[1])
    return [Hit(chunk_id=c, score=s, rank=rank) for rank, (c, s) in enumerate(order, start=1)]
