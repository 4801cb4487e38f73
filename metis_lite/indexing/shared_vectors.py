"""Chunks with the same text embedded once: a licence notice on 40 pages costs one vector.

What the model is given for a chunk is the document prefix, its title and headings and its
text; its sha256 is the chunk's digest, stored with the vector (`chunk_digests`). Before a
batch goes to the model (pipeline.Embedding), each chunk whose digest already has a vector of
the run's model in the base gets that vector, copied; one whose digest is in a batch on its
way waits for that batch's answer; the rest are sent, each text once however many chunks of
the batch hold it. The vector is the one the model would give again: the same model, the same
text.
"""

from __future__ import annotations

import hashlib

import numpy as np

from metis_lite.store import Store


def digest_of(text: str) -> bytes:
    """The digest of what the model is given (prefix included)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class SharedVectors:
    """One run's chunks waiting on a batch in flight, by digest, and the vectors it copied."""

    def __init__(self, store: Store, model: str) -> None:
        self.store = store
        self.model = model
        self.copied = 0  # vectors copied from a chunk with the same text, not embedded
        self._waiting: dict[bytes, list[int]] = {}  # digest → chunks its batch answers

    def split(self, batch: list[tuple[int, str]]) -> tuple[list[bytes], list[str], int]:
        """(digests, texts) to embed, each text once, from (chunk id, text as given to the
        model) pairs, and the vectors written meanwhile: those of chunks whose text has a
        vector in the base (copied, in one transaction). Chunks whose text is in a batch on
        its way, or twice in this one, get its answer (`answered`)."""
        digests = [digest_of(text) for _, text in batch]
        found = self.store.vectors_of_digests(
            self.model, (d for d in digests if d not in self._waiting)
        )
        send: dict[bytes, str] = {}
        for (chunk_id, text), digest in zip(batch, digests, strict=True):
            if digest in found:
                continue
            if digest not in self._waiting:
                send[digest] = text
            self._waiting.setdefault(digest, []).append(chunk_id)
        copies = [
            (chunk_id, found[digest], digest)
            for (chunk_id, _), digest in zip(batch, digests, strict=True)
            if digest in found
        ]
        written = self.store.put_vectors(self.model, copies) if copies else 0
        self.copied += written
        return list(send), list(send.values()), written

    def answered(
        self, digests: list[bytes], vectors: np.ndarray
    ) -> list[tuple[int, np.ndarray, bytes]]:
        """(chunk id, vector, digest) for every chunk waiting on a batch just answered."""
        items = [
            (chunk_id, vector, digest)
            for digest, vector in zip(digests, vectors, strict=True)
            for chunk_id in self._waiting.pop(digest, ())
        ]
        self.copied += len(items) - len(digests)
        return items
