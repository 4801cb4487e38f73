"""How sequences are cut into sub-batches (batching._buckets), that a runner's results come
back in the sequences' order whatever the cut, and that a runner takes as many threads as the
process has cores (under `taskset`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

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

    def forward(self, ids, types, lengths):
        assert sum(lengths) == len(ids) == len(types)
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

    def forward(self, ids, types, lengths):
        self.calls.append("whole")
        return super().forward(ids, types, lengths)

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
