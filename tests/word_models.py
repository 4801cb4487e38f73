"""Models for tests that need an embedding model and a reranker that always answer, fast, in
any process: the embedding of a text is its words hashed into DIMENSION buckets (so texts that
share words are close), and the reranker scores a passage by the question's words it holds.

Importing this module registers them as the provider "words" (registry.register), in any
process that imports it; `attach` makes an open Base one whose spec names them (WORDS), and
`serving(model)` is a provider that hands one given object to every base that makes a model
of its name while it is registered (registry.registered): a test watches that object."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from metis_lite.base.core import Base
from metis_lite.models import registry
from metis_lite.models.base import Kind, Provider
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


WORDS = {"provider": "words"}
"""The embedding spec, and the reranker spec, of a base these models serve; its vectors are
labelled "words" (the registry's rule for a provider that names no model)."""

PROVIDERS = (
    Provider("words", "embedding", lambda options, making: WordsEmbedder()),
    Provider("words", "reranker", lambda options, making: OverlapReranker()),
)
registry.register(*PROVIDERS)


def serving(
    model: Any, *, name: str = "words", kind: Kind = "embedding", options: Any = None
) -> Provider:
    """A provider named `name` whose every model is `model`, taking `options` (say, a `model`
    whose name labels its vectors): with registry.registered, a base that makes its model in
    the block gets that very object, and keeps it."""
    return Provider(name, kind, lambda given, making: model, options=options or {})


def attach(base: Base) -> Base:
    """`base`, its spec naming the word models (a base holding no vectors of another model):
    every search and index run of it, in any process that imports this module, uses them."""
    spec = base.spec
    if dict(spec.embedding) != WORDS or spec.reranker is None or dict(spec.reranker) != WORDS:
        base.configure(embedding=WORDS, reranker=WORDS)
    return base
