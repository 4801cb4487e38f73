"""The seam every provider implements: an Embedder turns texts into unit vectors, a Reranker
scores passages against a question.

Providers raise `ModelUnavailable` subclasses when the model does not answer within its
deadline (or refuses, or the connection fails) and `ModelAnswerInvalid` when it answers
something unusable (wrong dimension, NaN, fewer vectors than texts, garbage). Callers decide
how to degrade; providers never return partial results silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Embedder(Protocol):
    name: str
    """The model's name, recorded with every vector it makes (e.g. "all-MiniLM-L6-v2")."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 array (len(texts), dimension), each row L2-normalised. Prefixes are the
        caller's business: texts arrive as they must be embedded."""
        ...

    def close(self) -> None: ...


class Reranker(Protocol):
    name: str

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """One relevance score per passage, in the passages' order (higher is better)."""
        ...

    def close(self) -> None: ...
