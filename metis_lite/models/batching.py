"""Run a `BertEncoder` over many token sequences: sorted by length, in small padded sub-batches,
on both cores.

Sorting by length keeps padding (work on nothing) small; small sub-batches keep temporaries
small. Two worker threads each run whole sub-batches while BLAS runs one thread apiece: NumPy
releases the GIL inside its loops, so the element-wise steps (GELU, softmax, LayerNorm), which
NumPy runs on one core, also use both. One sub-batch (a question) runs in the caller's thread.
BLAS stays at one thread for the whole call (threadpoolctl), a question's too: OpenBLAS's own
threads gain little on these sizes and lose badly when other processes hold the cores (a
question's small matrix products measured 10× slower with two BLAS threads on a busy machine).
Without threadpoolctl, everything runs in the caller's thread with BLAS as it is.

A sequence's result does not depend on the others in its sub-batch: padding is masked out of
attention and every other step works row by row, so a text embedded alone or in a batch gets
the same vector (to float32 rounding, as BLAS may block a matrix differently).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

import numpy as np

from metis_lite.models.bert import BertEncoder

TOKENS_PER_BATCH = 2048
"""Padded tokens in one sub-batch (8 passages of 256 tokens): large enough for BLAS to run at
full speed, small enough that its temporaries stay a few MB."""

SEQUENCES_PER_BATCH = 64
"""At most this many sequences in one sub-batch, however short."""

WORKERS = 2
"""Threads that run sub-batches; more than the machine's cores is never used."""

Head = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(hidden (b, length, hidden), mask (b, length)) → one row per sequence (b, d)."""


class BatchRunner:
    """An encoder with the threads that run it; one `run` at a time (a lock serialises calls)."""

    def __init__(self, encoder: BertEncoder, *, workers: int = WORKERS) -> None:
        self.encoder = encoder
        workers = max(1, min(workers, os.cpu_count() or 1))
        self._blas = _blas_controller()
        self._pool = None
        if workers > 1 and self._blas is not None:
            self._pool = ThreadPoolExecutor(workers, "bert")
        self._lock = threading.Lock()

    def run(
        self, sequences: Sequence[tuple[Sequence[int], Sequence[int]]], head: Head
    ) -> np.ndarray:
        """`head`'s rows for each (ids, type_ids) sequence, in the sequences' order."""
        order = sorted(range(len(sequences)), key=lambda n: len(sequences[n][0]))
        batches = _buckets([len(sequences[n][0]) for n in order])
        with self._lock, self._single_threaded_blas():
            if self._pool is None or len(batches) < 2:
                parts = [self._one(sequences, order[a:b], head) for a, b in batches]
            else:
                futures = [
                    self._pool.submit(self._one, sequences, order[a:b], head) for a, b in batches
                ]
                parts = [future.result() for future in futures]
        if not parts:
            raise ValueError("no sequences to run")
        out = np.empty((len(sequences), parts[0].shape[1]), parts[0].dtype)
        for (a, b), part in zip(batches, parts, strict=True):
            out[order[a:b]] = part
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _one(
        self,
        sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
        picked: list[int],
        head: Head,
    ) -> np.ndarray:
        length = max(len(sequences[n][0]) for n in picked)
        ids = np.zeros((len(picked), length), np.int64)
        types = np.zeros((len(picked), length), np.int64)
        mask = np.zeros((len(picked), length), np.float32)
        for row, n in enumerate(picked):
            token_ids, type_ids = sequences[n]
            ids[row, : len(token_ids)] = token_ids
            types[row, : len(type_ids)] = type_ids
            mask[row, : len(token_ids)] = 1.0
        return head(self.encoder.forward(ids, types, mask), mask)

    def _single_threaded_blas(self) -> Any:
        if self._blas is None:
            return nullcontext()
        return self._blas.limit(limits=1, user_api="blas")


def _buckets(lengths: list[int]) -> list[tuple[int, int]]:
    """[start, end) ranges over ascending `lengths`, each padded to its longest within budget."""
    ranges: list[tuple[int, int]] = []
    start = 0
    for end in range(1, len(lengths) + 1):
        size = end - start
        if size > SEQUENCES_PER_BATCH or (size > 1 and size * lengths[end - 1] > TOKENS_PER_BATCH):
            ranges.append((start, end - 1))
            start = end - 1
    if start < len(lengths):
        ranges.append((start, len(lengths)))
    return ranges


def _blas_controller() -> Any:
    """threadpoolctl's handle on the BLAS NumPy loaded; None when it cannot be had, and then one
    thread runs every sub-batch (two workers on a multi-threaded BLAS would fight for cores)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()
