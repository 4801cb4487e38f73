"""One index run's writing: each document written as soon as it is parsed, vectors alongside.

    ingest.py reads, checks and hashes each file ─ParseJob─▶ ParsePool (a process per core)
      ─Parsed─▶ Pipeline: in the order the files were read, each document with its chunks and
                their words in one transaction: searchable by words from that commit on
      Embedding: chunks lacking a vector, a batch at a time, embedded on a thread of their
                own while files are parsed and written (a model on another machine) or once
                they all are (the embedded model, which needs the cores the workers use);
                each batch's vectors written between two documents: searchable by meaning as
                they arrive

One writer: every transaction is this process's, on the run's one connection, in the thread
that runs the run (the caller holds the IndexerLock); workers only parse, the embedding
thread only computes. Writing in the order the files were read (not as parses finish) gives
the same chunk ids, and so the same base, whatever the number of workers.

A kill at any moment leaves every document whole or absent (each is one transaction) and
every written vector whole; what it had not reached, the next run does: a file not written
is still new or changed, a chunk without a vector still lacks one. A run asked to stop (its
`stop` event: Ctrl-C, SIGTERM, a service closing) stops the same way, sooner and tidier: at its
next point between transactions it hands out no more batches, drops the one in flight (its
chunks wait for the next run, as a killed run's do) and raises Interrupted; every wait of the
run looks at `stop` every STOP_POLL_S, so a batch that takes minutes does not hold it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from metis_lite.errors import ModelAnswerInvalid, ModelError
from metis_lite.indexing.parse_pool import Parsed, ParseJob, ParsePool
from metis_lite.indexing.shared_vectors import SharedVectors
from metis_lite.models.base import Embedder
from metis_lite.store import Store

Progress = Callable[[str, int, int], None]
"""progress(stage, done, total), from the thread that runs the run: "files" (files done, of
the files the run's sources hold: written, unchanged or skipped), "chunks" (chunks written by
this run; total 0: not known ahead) or "vectors" (vectors written by this run, of those
written plus the chunks still waiting for one); and "ocr NAME" (OCR reads page `done` of the
`total` of the file NAME next: ocr_pages.py), from the thread that waits for its parse."""

PARSE_AHEAD = 8
"""Files handed to each worker ahead of the one written next: a worker that finishes always
has its next file while the writer is busy with an earlier one, or waits for one large file
(LaTeX's 1,611-page source3.pdf takes PDFium ~6 s; with 2 ahead, texlive's PDFs indexed in
10.5-13 s on 2 workers, with 8 in 9.3 s)."""

PENDING_BYTES_MAX = 64 * 1024 * 1024
"""The most bytes of files read and not yet written that a run holds (at least one file,
whatever its size): reading runs ahead of the workers by this much at most."""

GROUP_CHUNKS_MAX = 2_000
"""Documents parsed by the time the writer reaches them are written together, in one
transaction of this many chunks at most: FTS5 writes its words once a transaction, so one of
many small documents costs a fraction of one each, and what it holds is searchable ~0.1 s
later. Each document is still whole or absent: a transaction holds whole documents only."""

EMBED_AHEAD = 2
"""Batches handed to the embedding thread at once: the next one starts as soon as the last
one is answered, while the writer stores it."""

STOP_POLL_S = 0.1
"""How often a run waiting for a parse or a batch looks whether it was asked to stop: a stop
is seen within this, well inside the second a Ctrl-C may take, at ten wake-ups a second."""


class Interrupted(Exception):
    """The run was asked to stop (its `stop` event was set): raised between transactions, so
    everything written is whole; ingest records the run as interrupted."""


@dataclass
class _Entry:
    """A file read, in read order: its parse (None: nothing to parse), what writes it."""

    parse: Future[Parsed] | None
    done: Callable[[Parsed | None], int]
    size: int


class Embedding:
    """Vectors for every chunk lacking one of `model`, made on a thread while the run writes:
    `feed` hands the next batches to the thread, `collect` writes those answered. Not
    `alongside` (a model that runs on this machine's cores), they wait for the words pass:
    two cores embedding beside two parse workers took the words of Python's 530 HTML pages
    from 1.7 s to 4.3 s, to save at most those seconds of a run's ~20 minutes of vectors.

    A model that fails (down, a wrong answer, not installed) stops the embedding for the run;
    `failure` says why, and its chunks wait for the next run, found by words meanwhile."""

    def __init__(
        self,
        store: Store,
        embedder: Callable[[], Embedder],
        *,
        model: str,
        document_prefix: str,
        dimension: int | None,
        batch: int,
        progress: Progress | None = None,
        alongside: bool = True,
        stop: threading.Event | None = None,
    ) -> None:
        self.store = store
        self.alongside = alongside
        self.stop = stop or threading.Event()  # set: the run stops (Interrupted)
        self.model = model
        self.dimension = dimension
        self.written = 0
        self.failure: ModelError | None = None
        self._embedder = embedder
        self._provider: Embedder | None = None
        self._prefix = document_prefix
        self._batch = batch
        self._progress = progress
        self._after = 0  # chunks up to this id were read, their vectors written or on the way
        self.words_done = False  # until then only whole batches are embedded
        self._more = True  # chunks lacking a vector may lie past _after (a query would tell)
        self._inflight: deque[tuple[list[bytes], Future[np.ndarray]]] = deque()
        self.shared = SharedVectors(store, model)  # a text embedded once (shared_vectors.py)
        self._requests: queue.SimpleQueue[tuple[list[str], Future[np.ndarray]] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        if progress:
            progress("vectors", 0, self.waiting())  # what waits before the run writes any

    def wrote_chunks(self) -> None:
        """The run wrote chunks: some lack a vector past what `feed` last looked at."""
        self._more = True

    def feed(self) -> None:
        """Hand the thread the next batches of chunks lacking a vector, up to EMBED_AHEAD:
        whole batches while the words pass writes more chunks, the last part one after. It
        queries the base only when chunks were written since it last found none (a run over
        an unchanged folder asks once, not once a file)."""
        if not (self.alongside or self.words_done) or self.stop.is_set():
            return
        while self._more and self.failure is None and len(self._inflight) < EMBED_AHEAD:
            with self.store.snapshot():
                batch = self.store.chunks_lacking_vectors(
                    self.model, self._batch, after=self._after
                )
                last = self.store.chunks_generation()[1] if not batch else 0
            if not batch:  # every chunk up to the last one has its vector, or is on the way
                self._after, self._more = max(self._after, last), False
                return
            if len(batch) < self._batch and not self.words_done:
                self._more = False  # a whole batch once more chunks are written
                return
            self._after = batch[-1][0]
            digests, texts, copied = self.shared.split([(i, self._prefix + t) for i, t in batch])
            self._wrote(copied)
            if not texts:  # each had its vector, or waits for one on its way
                continue
            future: Future[np.ndarray] = Future()
            self._requests.put((texts, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="embed", daemon=True)
                self._thread.start()
            self._inflight.append((digests, future))

    @property
    def next_answer(self) -> Future[np.ndarray] | None:
        """The batch answered next, to wait on; None when none is on the way."""
        return self._inflight[0][1] if self._inflight else None

    def collect(self) -> None:
        """Write the vectors of every batch answered so far, in order, each batch committed."""
        while self._inflight and self._inflight[0][1].done():
            digests, future = self._inflight.popleft()
            try:
                vectors = future.result()
                if self.dimension is None:
                    self.dimension = int(vectors.shape[1])
                elif vectors.shape[1] != self.dimension:
                    raise _dimension_error(int(vectors.shape[1]), self.dimension)
            except ModelError as exc:
                self._stop(exc)
                return
            items = self.shared.answered(digests, vectors)
            self._wrote(self.store.put_vectors(self.model, items))

    def _wrote(self, vectors: int) -> None:
        """Count vectors written (embedded, or copied from a chunk with the same text)."""
        if vectors:
            self.written += vectors
            if self._progress:
                self._progress("vectors", self.written, self.written + self.waiting())

    def finish(self) -> None:
        """Embed until no chunk lacks a vector (or the model failed)."""
        self.words_done = self._more = True
        while True:
            self.check()
            self.feed()
            answer = self.next_answer
            if answer is None:
                return
            self.wait([answer])
            self.collect()

    def check(self) -> None:
        """Interrupted when the run was asked to stop."""
        if self.stop.is_set():
            raise Interrupted

    def wait(self, pending: list[Future[Any]]) -> None:
        """Wait until one of `pending` is done; Interrupted as soon as the run is asked to
        stop (seen within STOP_POLL_S)."""
        while not wait(pending, timeout=STOP_POLL_S, return_when=FIRST_COMPLETED).done:
            self.check()

    def waiting(self) -> int:
        """Chunks of the base without a vector of the model, now."""
        return self.store.counts()["chunks"] - self.store.chunks_with_vector(self.model)

    def close(self) -> None:
        """Let the thread go; a batch it is still embedding (a run that failed or was
        stopped) is dropped, and nothing waits for it (a daemon thread: Ctrl-C ends at once)."""
        for _, future in self._inflight:
            future.cancel()
        self._requests.put(None)

    def _serve(self) -> None:
        """The embedding thread: each batch in turn; the model is made by its first one (so
        the run writes while the model loads)."""
        while (request := self._requests.get()) is not None:
            texts, future = request
            if not future.set_running_or_notify_cancel():
                continue
            try:
                if self._provider is None:
                    self._provider = self._embedder()
                future.set_result(_embedding_of(self._provider)(texts))
            except BaseException as exc:
                future.set_exception(exc)

    def _stop(self, failure: ModelError) -> None:
        self.failure = failure
        for _, future in self._inflight:
            future.cancel()
        self._inflight.clear()


class Pipeline:
    """The files of one run, written in the order they were read as their parses come back,
    and the embedding's vectors written between them (see the module).

    `read` is told of every file the run reads, in order; `finish_words` writes what is left
    to write, `finish_vectors` embeds what is left to embed. `written` is called inside each
    transaction that writes documents, after them (the run records its counts so far there:
    status says them while it goes on)."""

    def __init__(
        self,
        store: Store,
        pool: ParsePool,
        embedding: Embedding,
        *,
        files: int,
        progress: Progress | None = None,
        written: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        self._written = written  # told inside each transaction of documents, after them
        self.embedding = embedding
        self.files = files
        self.files_done = 0
        self.chunks_written = 0
        self.words_seconds: float | None = None
        self._started = time.perf_counter()
        self._progress = progress
        self._queue: deque[_Entry] = deque()
        self._parsing = 0  # entries of the queue with a parse
        self._bytes = 0
        if progress:
            progress("files", 0, files)  # the run's size, before its first file is done

    def read(self, job: ParseJob | None, done: Callable[[Parsed | None], int]) -> None:
        """A file was read: `job` to parse it (None: nothing to parse, it is unchanged or
        skipped), `done` to write it once parsed (called with its Parsed, or None), in the
        thread of the run, in read order; `done` returns the chunks it wrote."""
        future = self.pool.submit(job) if job is not None else None
        size = len(job.data) if job is not None else 0
        self._queue.append(_Entry(future, done, size))
        if future is not None:
            self._parsing += 1
            self._bytes += size
        self._advance(block=False)
        while self._parsing >= self.pool.workers * (PARSE_AHEAD + 1) or (
            self._bytes > PENDING_BYTES_MAX and self._parsing > 1
        ):
            self._advance(block=True)

    def finish_words(self) -> None:
        """Write every file read; from here the run's documents are all searchable by words."""
        while self._queue:
            self._advance(block=True)
        self.words_seconds = time.perf_counter() - self._started

    def finish_vectors(self) -> None:
        self.embedding.finish()

    def _advance(self, *, block: bool) -> None:
        """Write the files at the head of the queue whose parse is done and the vectors
        answered; with `block`, first wait until one of them is ready. Interrupted when the
        run was asked to stop: before it writes, or between two transactions."""
        self.embedding.check()
        self.embedding.feed()
        if block and self._queue and not self._head_ready():
            pending: list[Future[Any]] = [
                f for f in (self._queue[0].parse, self.embedding.next_answer) if f is not None
            ]
            self.embedding.wait(pending)
        self.embedding.collect()
        while self._head_ready():
            group = self._ready_group()
            written = self._write(group)
            if any(written):
                self.embedding.wrote_chunks()
            for chunks in written:  # told once committed: a callback that raises loses nothing
                self.files_done += 1
                if chunks:
                    self.chunks_written += chunks
                    if self._progress:
                        self._progress("chunks", self.chunks_written, 0)
                if self._progress:
                    self._progress("files", self.files_done, self.files)
            self.embedding.check()
            self.embedding.feed()
            self.embedding.collect()

    def _ready_group(self) -> list[_Entry]:
        """The entries at the head whose parse is done, up to GROUP_CHUNKS_MAX chunks."""
        group: list[_Entry] = []
        chunks = 0
        while self._head_ready() and (not group or chunks < GROUP_CHUNKS_MAX):
            entry = self._queue.popleft()
            if entry.parse is not None:
                self._parsing -= 1
                self._bytes -= entry.size
                chunks += len(entry.parse.result().chunks)
            group.append(entry)
        return group

    def _write(self, group: list[_Entry]) -> list[int]:
        """Write a group of files, those parsed in one transaction; the chunks of each."""
        if not any(entry.parse is not None for entry in group):
            return [entry.done(None) for entry in group]
        with self.store.writing():
            chunks = [
                entry.done(entry.parse.result() if entry.parse is not None else None)
                for entry in group
            ]
            if self._written is not None:
                self._written()
            return chunks

    def _head_ready(self) -> bool:
        if not self._queue:
            return False
        head = self._queue[0].parse
        return head is None or head.done()


def _embedding_of(provider: Embedder) -> Callable[[list[str]], np.ndarray]:
    """What embeds a run's batch: the provider's `embed_documents` where it has one (an HTTP
    provider: the batch spread over each of its servers, each piece given time by its length
    rather than a question's deadline, since a run loses nothing by waiting), else `embed`."""
    documents = getattr(provider, "embed_documents", None)
    return documents if callable(documents) else provider.embed


def _dimension_error(got: int, expected: int) -> ModelError:
    return ModelAnswerInvalid(
        f"the embedding model answered vectors of dimension {got}; the base's vectors have "
        f"{expected}: index with --reembed to change the model"
    )
