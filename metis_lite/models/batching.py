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
vector, bit for bit.

BLAS runs one thread while a call runs (ONE_BLAS_THREAD, threadpoolctl): OpenBLAS's own threads
gain little on these sizes and lose badly when other processes hold the cores (a question's
small matrix products measured 10× slower with two BLAS threads on a busy machine; our groups
wait on the pool's queue, they do not spin). The count is the process's, not a thread's, and
calls run at once (questions beside a batch, from several threads): set and restored around
each call, one call's end restored OpenBLAS's threads under another still running, whose
products then summed in another order (a vector differing in its last bits). So it is set as
the first call of the process begins and restored as the last one ends: each call runs on one
thread from its start to its end, and the rest of the process on as many as before whenever no
call runs, chiefly the search by meaning's product over every vector (retrieval/dense.py),
which reads memory faster on more: 100,000 × 384 vectors, p50 6.0 ms on two threads against
10.7 ms on one, on two cores loaded ~2.

A question never waits for a passage batch (`serve` searches while an index run embeds): batches
take turns (one at a time, `_batch_lock`), questions (one sequence alone, however long) take no
turn at all. A short question's parts run on threads of their own (never queued behind a
batch's sub-batches), and a batch's sub-batches wait between their steps while any question
runs (BertEncoder.forward's `pause`, steps of ~5-50 ms), so that the question has the cores but
for the step in flight. A question's p95 beside batches measured 1.4× its p95 alone with
multilingual-e5-small (28.8 against 20.5 ms) and 1.6× with all-MiniLM-L6-v2 (14.3 against 9.1
ms) on two cores loaded ~2.4 by other work, 1.2-2.2× in other runs as the load went
(benchmarks/bench_embedder.py); before, 120-540× (each question waited for a whole batch). The
vectors are the same, to the bit, alone, beside batches and from several threads at once
(tests/test_batching.py). A steady stream of questions holds an index run's embedding back:
searches come first.
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
import threadpoolctl
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
    """An encoder with the threads that run it. `run` may be called from several threads: one
    batch at a time (a lock), questions at any time, beside a batch and each other.

    `workers`: threads that run sub-batches, by default one per core the process may run on
    (allowed_cores); a number given is used as given (at least 1)."""

    def __init__(self, encoder: BertEncoder, *, workers: int | None = None) -> None:
        self.encoder = encoder
        workers = allowed_cores() if workers is None else max(1, workers)
        ONE_BLAS_THREAD.prepare()
        self._pool = ThreadPoolExecutor(workers, "bert") if workers > 1 else None
        self._workers = workers if self._pool is not None else 1
        helpers = min(self._workers, SHORT_GROUPS) - 1  # a question's parts but the caller's
        self._question_pool = ThreadPoolExecutor(helpers, "bert-q") if helpers else None
        self._batch_lock = threading.Lock()
        self._choice = QuestionChoice()
        self._choice_lock = threading.Lock()
        self._asking = 0  # questions running now
        self._answered = threading.Condition()  # notified when none is

    @property
    def workers(self) -> int:
        """Threads that run sub-batches (1: everything runs in the caller's thread)."""
        return self._workers

    def run(
        self, sequences: Sequence[tuple[Sequence[int], Sequence[int]]], head: Head
    ) -> np.ndarray:
        """`head`'s rows for each (ids, type_ids) sequence, in the sequences' order; one
        sequence alone is a question, which never waits for a batch."""
        if len(sequences) == 1:
            with ONE_BLAS_THREAD:
                return self._question(sequences[0], head)
        order = sorted(range(len(sequences)), key=lambda n: len(sequences[n][0]))
        batches = _buckets([len(sequences[n][0]) for n in order], self._workers)
        with self._batch_lock, ONE_BLAS_THREAD:
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
        """One sequence, while a batch running meanwhile waits (`_let_questions_by`): a short
        one's products' groups run in parts (the caller's thread and the questions' own) or all
        in the caller's thread, whichever has lately been faster here (QuestionChoice); a
        longer one whole in the caller's thread, as a sub-batch of one."""
        ids, types = (np.asarray(part, np.int64) for part in sequence)
        with self._answered:
            self._asking += 1
        try:
            if len(ids) > SHORT_MAX_TOKENS:
                return self._one([sequence], [0], head, pause=_go_on)
            return self._question_now(ids, types, head)
        finally:
            with self._answered:
                self._asking -= 1
                if not self._asking:
                    self._answered.notify_all()

    def _question_now(self, ids: np.ndarray, types: np.ndarray, head: Head) -> np.ndarray:
        pool = self._question_pool
        with self._choice_lock:
            parted = pool is not None and self._choice.parted()
        started = time.perf_counter()
        parts = min(self._workers, SHORT_GROUPS) if parted else 1
        hidden = self.encoder.forward_short(ids, types, parts=parts, pool=pool)
        if pool is not None:
            seconds = time.perf_counter() - started
            with self._choice_lock:
                self._choice.took(parted, seconds)
        return head(hidden, np.zeros(1, np.int64))

    def close(self) -> None:
        """Let the threads go. A call still running (a batch an interrupted index run
        dropped) is not waited for: its sub-batches not begun are cancelled (it raises
        CancelledError), and those begun end by themselves."""
        for pool in (self._pool, self._question_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def _one(
        self,
        sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
        picked: list[int],
        head: Head,
        pause: Callable[[], None] | None = None,
    ) -> np.ndarray:
        """One sub-batch; it waits between its steps while a question runs (`pause` None), or
        as `pause` says."""
        lengths = [len(sequences[n][0]) for n in picked]
        total = sum(lengths)
        ids = np.fromiter(chain.from_iterable(sequences[n][0] for n in picked), np.int64, total)
        types = np.fromiter(chain.from_iterable(sequences[n][1] for n in picked), np.int64, total)
        starts = np.cumsum([0, *lengths[:-1]])
        hidden = self.encoder.forward(ids, types, lengths, pause=pause or self._let_questions_by)
        return head(hidden, starts)

    def _let_questions_by(self) -> None:
        """Called by a sub-batch between its steps: wait while a question runs, so that the
        question has the cores (a few ms of a sub-batch's work at most run beside it)."""
        if self._asking:  # read without the lock: a question just begun waits one step more
            with self._answered:
                self._answered.wait_for(lambda: not self._asking)


class OneBlasThread:
    """`with` it: BLAS runs one thread in the whole process while any call is inside, and as
    many as before once none is. The count is the process's, so it is set as the first call
    enters and restored as the last one leaves, never under a call still running (the module
    says why)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._controller: ThreadpoolController | None = None
        self._limiter: Any = None

    def prepare(self) -> ThreadpoolController:
        """The BLAS libraries loaded, found once (threadpoolctl, ~10 ms): a runner asks when
        made, so that its first call does not pay for it."""
        with self._lock:
            return self._found()

    def _found(self) -> ThreadpoolController:
        if self._controller is None:
            self._controller = ThreadpoolController().select(user_api="blas")
        return self._controller

    def __enter__(self) -> None:
        with self._lock:
            if not self._inside:
                controller = self._found()
                self._limiter = _as_any_thread(lambda: controller.limit(limits=1))
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._inside -= 1
            if not self._inside:
                _as_any_thread(self._limiter.restore_original_limits)
                self._limiter = None


def _as_any_thread(change: Callable[[], Any]) -> Any:
    """`change` (of BLAS's threads) from this thread, whichever holds them: threadpoolctl 3.8
    lets one thread alone set OpenBLAS's count (the first to, while it lives) and silently
    ignores the others, so the hold is let go before and after."""
    release = getattr(threadpoolctl.OpenBLASController, "clear_controlling_thread", None)
    if release is not None:
        release(force=True)
    try:
        return change()
    finally:
        if release is not None:
            release(force=True)


ONE_BLAS_THREAD = OneBlasThread()
"""The process's: every runner's calls enter it (embedded models and cross-encoders alike)."""


class QuestionChoice:
    """Whether the next question runs in parts on the workers or whole: parts when the other
    cores are free (each reads a share of the weights), whole when another process holds them
    (the parts would wait for it). Both give the same vector, bit for bit. Each way's time is
    followed as a moving average, the faster chosen, and one question in PROBE_EVERY runs the
    other way, so that the choice follows the machine's load. Not thread-safe: the runner
    holds its own lock around each call."""

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


def _go_on() -> None:
    """A pause that does not wait: a long question's own pass (it must not wait for itself)."""
