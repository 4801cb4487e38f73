"""Models for tests that need an embedding model and a reranker that always answer, fast, in
any process: the embedding of a text is its words hashed into DIMENSION buckets (so texts that
share words are close), and the reranker scores a passage by the question's words it holds.
`attach` gives them to an open Base, which then never loads the models its spec names."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from metis_lite.base.core import Base
from metis_lite.text.tokenizer import tokens

DIMENSION = 64


def _bucket(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")


class WordsEmbedder:
    name = "words-hash"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in tokens(text):
                out[row, _bucket(word) % DIMENSION] += 1.0
            out[row, 0] += 1e-3  # never the zero vector
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def close(self) -> None:
        pass


class OverlapReranker:
    name = "words-overlap"

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        asked = set(tokens(question))
        return [float(len(asked & set(tokens(p)))) for p in passages]

    def close(self) -> None:
        pass


def attach(base: Base) -> Base:
    base._embedder = WordsEmbedder()  # the seam a test has into a Base
    base._reranker = OverlapReranker()
    return base
