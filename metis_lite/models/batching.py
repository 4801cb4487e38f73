"""Run a `BertEncoder` over many token sequences: sorted by length, packed into small
sub-batches, on every core the process may run on.

A sub-batch packs its sequences end to end with no padding (see `BertEncoder.forward`), so a
text gets the same vector alone or in any batch (to float32 rounding, as BLAS may block a
larger matrix differently). Sorting by length first puts sequences of one length side by side,
where attention runs them together, and gives sub-batches of like cost; small sub-batches keep
temporaries small. One worker thread per allowed core (`os.sched_getaffinity`: a process
pinned with `taskset` or a container's CPU set uses what it was given, not the machine's count;
`workers=` overrides) each runs whole sub-batches while BLAS runs one thread apiece: NumPy
releases the GIL inside its loops, so the element-wise steps (GELU, softmax, LayerNorm), which
NumPy runs on one core, also use every core. A question (one short sequence) is run the other
way (BertEncoder.forward_short): each product as a sum of small blocks, in groups that up to
SHORT_GROUPS workers take at once, while that is faster than running them all in the caller's
thread (QuestionChoice: not when another process holds the other cores); both give the same
vector, bit for bit. BLAS stays at one thread for the whole call (threadpoolctl): OpenBLAS's own
threads gain little on these sizes and lose badly when other processes hold the cores (a
question's small matrix products measured 10× slower with two BLAS threads on a busy machine;
our groups wait on the pool's queue, they do not spin).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from metis_lite.models.bert import SHORT_GROUPS, BertEncoder

TOKENS_PER_BATCH = 2048
"""Tokens in one sub-batch (8 passages of 256 tokens): enough rows for BLAS to run at full
speed, few enough that the temporaries stay a few MB."""

SHORT_MAX_TOKENS = 32
"""A call of one sequence up to this long (a question) runs BertEncoder.forward_short; a longer
one, or several, run whole sub-batches: past ~32 tokens the blocks grow too thin to gain (e5 on
the project's Xeon, p50 in one thread: 8 tokens 15.9 ms in blocks against 23.2 whole, 16 tokens
19.8 against 26.6, 32 tokens 32.9 against 36.8, 40 tokens 43.7 against 38.7)."""

PARALLEL_MIN_TOKENS = 256
"""A call with fewer tokens per worker than this runs in the caller's thread alone."""


Head = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(packed hidden states (tokens, hidden), each sequence's first row (b,)) → (b, d), one row
per sequence; sequence i's rows run from starts[i] to starts[i + 1] (or the end)."""


class BatchRunner:
    """An encoder with the threads that run it; one `run` at a time (a lock serialises calls).

    `workers`: threads that run sub-batches, by default one per core the process may run on
    (allowed_cores); a number given is used as given (at least 1)."""

    def __init__(self, encoder: BertEncoder, *, workers: int | None = None) -> None:
        self.encoder = encoder
        workers = allowed_cores() if workers is None else max(1, workers)
        self._blas = ThreadpoolController()
        self._pool = ThreadPoolExecutor(workers, "bert") if workers > 1 else None
        self._workers = workers if self._pool is not None else 1
        self._lock = threading.Lock()
        self._choice = QuestionChoice()

    @property
    def workers(self) -> int:
        """Threads that run sub-batches (1: everything runs in the caller's thread)."""
        return self._workers

    def run(
        self, sequences: Sequence[tuple[Sequence[int], Sequence[int]]], head: Head
    ) -> np.ndarray:
        """`head`'s rows for each (ids, type_ids) sequence, in the sequences' order."""
        if len(sequences) == 1 and len(sequences[0][0]) <= SHORT_MAX_TOKENS:
            return self._question(sequences[0], head)
        order = sorted(range(len(sequences)), key=lambda n: len(sequences[n][0]))
        batches = _buckets([len(sequences[n][0]) for n in order], self._workers)
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

    def _question(self, sequence: tuple[Sequence[int], Sequence[int]], head: Head) -> np.ndarray:
        """One short sequence, its products' groups run on the workers or all in the caller's
        thread, whichever has lately been faster here (QuestionChoice)."""
        ids, types = (np.asarray(part, np.int64) for part in sequence)
        with self._lock, self._single_threaded_blas():
            parted = self._pool is not None and self._choice.parted()
            started = time.perf_counter()
            parts = min(self._workers, SHORT_GROUPS) if parted else 1
            hidden = self.encoder.forward_short(ids, types, parts=parts, pool=self._pool)
            if self._pool is not None:
                self._choice.took(parted, time.perf_counter() - started)
        return head(hidden, np.zeros(1, np.int64))

    def close(self) -> None:
        """Let the threads go. A call still running (a batch an interrupted index run
        dropped) is not waited for: its sub-batches not begun are cancelled (it raises
        CancelledError), and those begun end by themselves."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _one(
        self,
        sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
        picked: list[int],
        head: Head,
    ) -> np.ndarray:
        lengths = [len(sequences[n][0]) for n in picked]
        total = sum(lengths)
        ids = np.fromiter(chain.from_iterable(sequences[n][0] for n in picked), np.int64, total)
        types = np.fromiter(chain.from_iterable(sequences[n][1] for n in picked), np.int64, total)
        starts = np.cumsum([0, *lengths[:-1]])
        return head(self.encoder.forward(ids, types, lengths), starts)

    def _single_threaded_blas(self) -> Any:
        return self._blas.limit(limits=1, user_api="blas")


class QuestionChoice:
    """Whether the next question runs in parts on the workers or whole: parts when the other
    cores are free (each reads a share of the weights), whole when another process holds them
    (the parts would wait for it). Both give the same vector, bit for bit. Each way's time is
    followed as a moving average, the faster chosen, and one question in PROBE_EVERY runs the
    other way, so that the choice follows the machine's load. Not thread-safe: the runner's
    lock serialises it."""

    PROBE_EVERY = 8
    SMOOTHING = 0.25
    """Weight of the newest time in a way's moving average."""

    def __init__(self) -> None:
        self.seconds: dict[bool, float | None] = {True: None, False: None}
        self.asked = 0

    def parted(self) -> bool:
        self.asked += 1
        parted, whole = self.seconds[True], self.seconds[False]
        if parted is None or whole is None:
            return parted is None
        faster = parted <= whole
        return faster if self.asked % self.PROBE_EVERY else not faster

    def took(self, parted: bool, seconds: float) -> None:
        before = self.seconds[parted]
        self.seconds[parted] = (
            seconds if before is None else before + self.SMOOTHING * (seconds - before)
        )


def allowed_cores() -> int:
    """Cores this process may run on: its CPU affinity (taskset, cgroups' cpusets), or the
    machine's count where the platform has no affinity (macOS, Windows)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _buckets(lengths: list[int], workers: int) -> list[tuple[int, int]]:
    """[start, end) ranges that cut `lengths` into sub-batches of about equal tokens, each
    within TOKENS_PER_BATCH where it can be, as many as a multiple of `workers` (so that no
    worker idles while another runs a last one) when there is enough work for them all."""
    total = sum(lengths)
    count = -(-total // TOKENS_PER_BATCH)
    if workers > 1 and total >= workers * PARALLEL_MIN_TOKENS:
        count = -(-count // workers) * workers
    count = min(count, len(lengths))
    ranges: list[tuple[int, int]] = []
    start = seen = 0
    for end, n in enumerate(lengths[:-1], start=1):
        seen += n
        if len(ranges) < count - 1 and seen * count >= total * (len(ranges) + 1):
            ranges.append((start, end))
            start = end
    if lengths:
        ranges.append((start, len(lengths)))
    return ranges
