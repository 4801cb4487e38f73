"""How sequences are cut into sub-batches (batching._buckets), that a runner's results come
back in the sequences' order whatever the cut, and that a runner takes as many threads as the
process has cores (under `taskset`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from threadpoolctl import ThreadpoolController

from metis_lite.models import batching
from metis_lite.models.batching import PARALLEL_MIN_TOKENS, TOKENS_PER_BATCH, BatchRunner

lengths_lists = st.lists(st.integers(min_value=1, max_value=512), max_size=200).map(sorted)


@given(lengths_lists, st.integers(min_value=1, max_value=4))
def test_buckets_cover_every_sequence_once_in_order(lengths, workers):
    ranges = batching._buckets(lengths, workers)
    assert [n for a, b in ranges for n in range(a, b)] == list(range(len(lengths)))
    assert all(b > a for a, b in ranges)


@given(lengths_lists, st.integers(min_value=2, max_value=4))
def test_never_more_sub_batches_than_the_work_needs(lengths, workers):
    total = sum(lengths)
    needed = -(-total // TOKENS_PER_BATCH)
    if total >= workers * PARALLEL_MIN_TOKENS:
        needed = -(-needed // workers) * workers
    assert len(batching._buckets(lengths, workers)) <= max(1, needed)


@given(st.integers(min_value=1, max_value=512), st.integers(min_value=1, max_value=100))
def test_like_sequences_give_every_worker_the_same_share(length, count):
    ranges = batching._buckets([length] * count, 2)
    if length * count >= 2 * PARALLEL_MIN_TOKENS and count >= 2:
        assert len(ranges) % 2 == 0
        sizes = [b - a for a, b in ranges]
        assert max(sizes) - min(sizes) <= 1


def test_sub_batches_are_about_equal_and_within_budget():
    ranges = batching._buckets([250] * 32, 2)
    assert ranges == [(0, 8), (8, 16), (16, 24), (24, 32)]
    ranges = batching._buckets([265] * 30, 2)
    sizes = [sum([265] * (b - a)) for a, b in ranges]
    assert len(ranges) == 4 and max(sizes) <= TOKENS_PER_BATCH + 265
    assert batching._buckets([12], 2) == [(0, 1)]
    assert batching._buckets([], 2) == []


class _RowEncoder:
    """Stands in for BertEncoder: each token's hidden state is (its id, its type id)."""

    def forward(self, ids, types, lengths, *, pause=None):
        assert sum(lengths) == len(ids) == len(types)
        if pause is not None:
            pause()
        return np.stack([ids, types], axis=1).astype(np.float32)


def test_runner_returns_rows_in_the_sequences_order():
    sequences = [([n] * (1 + (n * 37) % 300), [n % 2] * (1 + (n * 37) % 300)) for n in range(60)]

    def first_row(hidden, starts):
        return hidden[starts]

    for workers in (1, 2):
        runner = BatchRunner(_RowEncoder(), workers=workers)
        try:
            rows = runner.run(sequences, first_row)
        finally:
            runner.close()
        np.testing.assert_array_equal(rows[:, 0], np.arange(60))
        np.testing.assert_array_equal(rows[:, 1], np.arange(60) % 2)


_WORKERS_PROBE = (
    "import os, sys; from metis_lite.models.batching import BatchRunner, allowed_cores;"
    " r = BatchRunner(object(), workers=int(sys.argv[1]) if len(sys.argv) > 1 else None);"
    " print(allowed_cores(), r.workers, len(os.sched_getaffinity(0))); r.close()"
)


def _workers_under(cores: str, *args: str) -> list[int]:
    done = subprocess.run(
        ["taskset", "-c", cores, sys.executable, "-c", _WORKERS_PROBE, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [int(n) for n in done.stdout.split()]


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) is not installed")
def test_workers_follow_the_cores_the_process_may_run_on():
    assert _workers_under("0") == [1, 1, 1]
    every = sorted(os.sched_getaffinity(0))
    allowed = ",".join(map(str, every))
    assert _workers_under(allowed) == [len(every)] * 3
    cores, workers, _ = _workers_under("0", "3")  # an override is used as given
    assert (cores, workers) == (1, 3)


def test_a_runner_made_in_a_pinned_process_is_told_its_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 5, 7})
    assert batching.allowed_cores() == 5
    runner = BatchRunner(_RowEncoder())
    try:
        assert runner.workers == 5
    finally:
        runner.close()
    monkeypatch.delattr(os, "sched_getaffinity")
    assert batching.allowed_cores() == (os.cpu_count() or 1)


def test_a_question_runs_the_way_that_has_lately_been_faster():
    choice = batching.QuestionChoice()
    ways = []
    for n in range(1, 41):
        parted = choice.parted()
        ways.append(parted)
        if n <= 20:  # parts faster (the other cores free) ...
            choice.took(parted, 0.010 if parted else 0.020)
        else:  # ... then slower (another process took them)
            choice.took(parted, 0.040 if parted else 0.020)
    assert ways[:2] == [True, False]  # each way tried once
    assert ways[2:20].count(True) >= 15  # then mostly parts, the other way now and then
    assert False in ways[2:20]
    assert ways[30:].count(False) >= 8  # the moving average follows: whole from then on


class _ShortEncoder(_RowEncoder):
    def __init__(self):
        self.calls = []

    def forward(self, ids, types, lengths, *, pause=None):
        self.calls.append("whole")
        return super().forward(ids, types, lengths, pause=pause)

    def forward_short(self, ids, types, *, parts, pool):
        self.calls.append(f"short {parts}")
        return super().forward(ids, types, [len(ids)])


def test_a_short_sequence_alone_runs_on_the_workers_or_in_the_callers_thread():
    encoder = _ShortEncoder()
    runner = BatchRunner(encoder, workers=3)
    try:
        assert runner.workers == 3  # threadpoolctl is a dependency: never one thread for all
        rows = [runner.run([([7, 8, 9], [0, 1, 1])], lambda h, s: h[s]) for _ in range(3)]
        assert encoder.calls[:2] == ["short 3", "short 1"]  # each way tried once, then chosen
        assert all(np.array_equal(r, [[7.0, 0.0]]) for r in rows)
        encoder.calls.clear()
        long = batching.SHORT_MAX_TOKENS + 1
        runner.run([([1] * long, [0] * long)], lambda h, s: h[s])  # too long: a sub-batch
        runner.run([([1], [0]), ([2], [0])], lambda h, s: h[s])  # two: sub-batches
        assert encoder.calls == ["whole", "whole"]
    finally:
        runner.close()

    alone = BatchRunner(_ShortEncoder(), workers=1)  # one worker: the caller's thread only
    try:
        alone.run([([5], [0])], lambda h, s: h[s])
        assert alone.encoder.calls == ["short 1"]
    finally:
        alone.close()


class _HeldEncoder(_ShortEncoder):
    """A sub-batch of several sequences waits until the test lets it go: a passage batch that
    takes as long as the test wants."""

    def __init__(self):
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def forward(self, ids, types, lengths, *, pause=None):
        if len(lengths) > 1:
            self.entered.set()
            assert self.release.wait(60)
        return super().forward(ids, types, lengths, pause=pause)


class _PartedEncoder(_HeldEncoder):
    """A question's parts are run on the pool it is given, as BertEncoder.forward_short's are."""

    def forward_short(self, ids, types, *, parts, pool):
        if parts > 1:
            pool.submit(self.calls.append, "a part on the pool").result(timeout=60)
        return super().forward_short(ids, types, parts=parts, pool=pool)


def test_a_question_does_not_wait_for_a_passage_batch():
    encoder = _PartedEncoder()
    runner = BatchRunner(encoder, workers=2)
    passages = [([n] * 300, [0] * 300) for n in range(8)]
    batch = threading.Thread(target=runner.run, args=(passages, lambda h, s: h[s]))
    batch.start()
    try:
        assert encoder.entered.wait(60)  # the batch holds the workers
        answers = []
        long = batching.SHORT_MAX_TOKENS + 8
        asking = threading.Thread(
            target=lambda: answers.extend(
                runner.run([question], lambda h, s: h[s])
                for question in [([7, 8], [0, 0]), ([9] * long, [1] * long)]
            )
        )
        asking.start()
        asking.join(30)
        assert not asking.is_alive(), "a question waited for the batch"
        assert np.array_equal(answers[0], [[7.0, 0.0]]) and np.array_equal(answers[1], [[9, 1]])
        assert "a part on the pool" in encoder.calls and "short 2" in encoder.calls
        assert "whole" in encoder.calls  # the longer one, in its caller's thread
    finally:
        encoder.release.set()
        batch.join(60)
        runner.close()


class _HeldQuestionEncoder(_ShortEncoder):
    """A question runs until the test lets it go."""

    def __init__(self):
        super().__init__()
        self.asked, self.answer = threading.Event(), threading.Event()

    def forward_short(self, ids, types, *, parts, pool):
        self.asked.set()
        assert self.answer.wait(60)
        return super().forward_short(ids, types, parts=parts, pool=pool)


def test_a_batch_waits_between_its_steps_while_a_question_runs():
    """... and goes on with BLAS still at one thread when the question that began first ends."""
    encoder = _HeldQuestionEncoder()
    runner = BatchRunner(encoder, workers=2)
    threads_seen = []

    def forward(ids, types, lengths, *, pause):
        pause()
        threads_seen.append(_blas_threads())
        return np.stack([ids, types], axis=1).astype(np.float32)

    encoder.forward = forward
    asking = threading.Thread(target=runner.run, args=([([7], [0])], lambda h, s: h[s]))
    answers = []
    batch = threading.Thread(
        target=lambda: answers.append(
            runner.run([([n] * 300, [0] * 300) for n in range(8)], lambda h, s: h[s])
        )
    )
    with ThreadpoolController().limit(limits=2, user_api="blas"):
        asking.start()
        try:
            assert encoder.asked.wait(60)
            batch.start()
            batch.join(0.5)
            assert batch.is_alive() and not answers  # it waits at its first step ...
            encoder.answer.set()
            asking.join(60)
            batch.join(60)
            assert not batch.is_alive()  # ... and goes on once the question is answered
            np.testing.assert_array_equal(answers[0][:, 0], np.arange(8))
            assert threads_seen and all(seen == [1] * len(seen) for seen in threads_seen)
        finally:
            encoder.answer.set()
            runner.close()


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in ThreadpoolController().select(user_api="blas").info()]


def test_blas_runs_one_thread_while_any_call_runs_and_as_before_once_none_does():
    """The count is the process's: a question that ends while a batch still runs leaves it at
    one thread for the batch; the last call out restores what was there before, even when
    another thread holds it (threadpoolctl 3.8 lets one thread alone set it)."""
    encoder = _HeldEncoder()
    runner = BatchRunner(encoder, workers=2)
    seen = []
    encoder.forward_short = lambda ids, types, *, parts, pool: (
        seen.append(_blas_threads()) or np.stack([ids, types], axis=1).astype(np.float32)
    )
    batch = threading.Thread(
        target=runner.run, args=([([n] * 300, [0] * 300) for n in range(8)], lambda h, s: h[s])
    )
    with ThreadpoolController().limit(limits=2, user_api="blas"):  # this thread holds it
        assert set(_blas_threads()) == {2}
        batch.start()
        try:
            assert encoder.entered.wait(60)
            asking = threading.Thread(target=runner.run, args=([([7], [0])], lambda h, s: h[s]))
            asking.start()  # asked and answered beside the batch
            asking.join(60)
            assert seen == [[1] * len(seen[0])] and set(_blas_threads()) == {1}
        finally:
            encoder.release.set()
            batch.join(60)
            runner.close()
        assert set(_blas_threads()) == {2}


@pytest.fixture(scope="module")
def minilm():
    from metis_lite.models.embedded import EmbeddedEmbedder

    embedder = EmbeddedEmbedder(model="all-MiniLM-L6-v2", workers=2)
    yield embedder
    embedder.close()


QUESTIONS = (
    "how many holidays do I get",
    "what is Xid 79 on a server node",
    "configuração do proxy",
    "who approves a PO-2231 warranty claim",
    "memory errors after the firmware update",
    "vacation days per year",
)


def test_vectors_are_the_same_to_the_bit_alone_and_beside_batches_from_several_threads(minilm):
    """Questions asked alone, then by three threads at once while a fourth embeds passage
    batches without pause: each question's vector is the one it got alone, to the last bit,
    and each batch's vectors are those it got with no question beside it."""
    words = "the leave policy gives every employee twenty five days of paid vacation".split()
    passages = [" ".join(words[n % 5 :] * (2 + n % 7)) for n in range(16)]
    alone = {q: minilm.embed([q]) for q in QUESTIONS}
    batch_alone = minilm.embed(passages)
    stop, begun = threading.Event(), threading.Event()
    batches, asked, within = [], [], []
    begun_batches = [0]

    def indexing():
        while not stop.is_set():
            begun_batches[0] += 1
            begun.set()
            batches.append(minilm.embed(passages))

    def asking(offset):
        for n in range(2 * len(QUESTIONS)):
            question = QUESTIONS[(offset + n) % len(QUESTIONS)]
            batch = (begun_batches[0], len(batches))
            asked.append((question, minilm.embed([question])))
            # asked and answered while one batch ran (begun, not done, the same one after)
            within.append(batch[0] > batch[1] and batch == (begun_batches[0], len(batches)))

    indexer = threading.Thread(target=indexing)
    indexer.start()
    try:
        assert begun.wait(60)
        askers = [threading.Thread(target=asking, args=(k,)) for k in range(3)]
        for thread in askers:
            thread.start()
        for thread in askers:
            thread.join(120)
    finally:
        stop.set()
        indexer.join(120)
    assert len(asked) == 3 * 2 * len(QUESTIONS) and any(within) and batches
    for question, vector in asked:
        assert np.array_equal(vector, alone[question]), question
    assert all(np.array_equal(vectors, batch_alone) for vectors in batches)
