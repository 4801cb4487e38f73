"""Parsing and chunking on every core: worker processes that turn a file's bytes into chunks.

The indexer, the one process that writes the base, opens and reads each file itself (once,
through files.open_inside, whose checks then stay in one place: O_NOFOLLOW, the descriptor's
real path inside the source, regular files only, a file that changes while read refused) and
hashes it; only a file whose content changed is handed to a worker, as bytes. A worker never
opens a file and never touches the base: it parses and chunks (parsing.parse, then
chunking.chunk, the very functions a run without workers calls, each parser's bounds on a
hostile file included) and sends the chunks back.

Each worker is a Python process of its own (`python -c`, this package imported from where
the indexer imported it) joined by two pipes, one job at a time; a thread of the indexer
feeds it and waits for its answer, so the workers parse while the indexer writes. Built here
rather than on concurrent.futures.ProcessPoolExecutor, because of what a pool must survive:

- the indexer killed (`kill -9`): a worker reads its jobs from a pipe only the indexer
  writes, so it ends at the pipe's end (ProcessPoolExecutor's workers hold both ends of
  their queue and wait on it forever);
- a worker killed (a parser crashing in C, the OOM killer): only the file it held is
  skipped, with why, and a new worker takes the next (a broken ProcessPoolExecutor fails
  every file in flight, and cannot say which one killed it);
- Ctrl-C: workers ignore SIGINT and end with the indexer, instead of each printing a
  traceback; and nothing re-runs the caller's main script (multiprocessing's spawn does).

Memory is a budget for the run, not a cap per worker, by one rule for PDFium and for the
parsers: each parse worker's data segment is capped (RLIMIT_DATA) at its share of
PARSE_MEMORY_BUDGET, and each starts its own PDFium worker (parsing/pdf.py) capped at its share
of PDF_MEMORY_BUDGET; at most PARSE_READERS_MAX large files (`large`: over LARGE_FILE_BYTES,
or a DOCX) and PDF_READERS_MAX PDFs are parsed at once. A file waits for a reader free while the files behind
it go on (a worker is never kept idle by one), so a run stays within both budgets whatever the
number of cores. A file past its worker's share is refused with why, and that worker replaced
(a parser that ran out of memory may leave its heap in pieces). A run of one parses in the
indexer only files that are not large: a large one goes to a worker process all the same
(`serve --index-workers 1` never holds a 50 MB parse).

A worker that does not answer within a file's deadline (parse_deadline_s: stopped, stuck in C,
quadratic on a hostile file) is killed; the file is skipped with why, and a new worker takes
the next file, so nothing a worker does can stop a run.

Answers are pickled: chunks of one document share their title and headings, which pickle
sends once (a page of 1,000 chunks under one long heading would otherwise send it 1,000
times); the sender is this package's own worker, nothing else writes to its pipe.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from metis_lite import parsing
from metis_lite.errors import ParseError
from metis_lite.indexing.ocr_pages import OnPage, answer_of, heard, sending
from metis_lite.parsing import ocr, pdf
from metis_lite.parsing.pdf import PDF_DEADLINE_S
from metis_lite.parsing.pdf_worker import PDF_MEMORY_BUDGET, PDF_MEMORY_MIN
from metis_lite.records import Chunk
from metis_lite.settings import (
    LARGE_FILE_BYTES,
    PARSE_DEADLINE_BYTES_PER_S,
    PARSE_DEADLINE_S,
    PARSE_MEMORY_BUDGET,
    PARSE_MEMORY_MIN,
)
from metis_lite.text import chunking, tokenizer

READY = b"ready"
"""What a worker says once it has started, before its first job."""

WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""A worker's BLAS runs one thread: NumPy (nesting.py) does element-wise work there, and N
workers each starting one BLAS thread per core would start N × cores threads."""

STOP_WAIT_S = 5.0
"""How long closing the pool waits for a worker to end once its job pipe is closed."""

PDF_READERS_MAX = PDF_MEMORY_BUDGET // PDF_MEMORY_MIN
"""The most PDFs a run's workers read at once (4): each worker's PDFium is capped at
PDF_MEMORY_BUDGET // min(workers, PDF_READERS_MAX), 256 MiB to 1 GiB."""

PARSE_READERS_MAX = PARSE_MEMORY_BUDGET // PARSE_MEMORY_MIN
"""The most large files (`large`) a run's workers parse at once (4): each worker is capped at
PARSE_MEMORY_BUDGET // min(workers, PARSE_READERS_MAX), 512 MiB to 2 GiB."""

WORKER_START_S = 60.0
"""How long a new worker may take to start (Python and the parsers imported: ~0.3 s)."""


def pdf_readers(workers: int) -> int:
    """PDFs read at once by a pool of `workers` processes."""
    return max(1, min(workers, PDF_READERS_MAX))


def parse_readers(workers: int) -> int:
    """Large files parsed at once by a pool of `workers` processes."""
    return max(1, min(workers, PARSE_READERS_MAX))


def parse_deadline_s(job: ParseJob) -> float:
    """How long a worker may take over `job` before it is killed and the file refused."""
    deadline = PARSE_DEADLINE_S + len(job.data) / PARSE_DEADLINE_BYTES_PER_S
    return deadline + (PDF_DEADLINE_S if job.kind == "pdf" else 0.0) + ocr.deadline_s(job.kind)


@dataclass(frozen=True)
class ParseJob:
    """One file to parse: its name inside its source (its stem titles it, its suffix is said
    in errors), its kind, its bytes, the base's chunk size; `words_version`: the word rules
    of the base's words index, to compute the chunks' words too (None: the writer does);
    `title_suffix`: its site's title suffix, cut from its title (site_titles.py);
    `ocr_languages`: the languages its scanned pages are read in by OCR ("": not read)."""

    name: str
    kind: str
    data: bytes
    chunk_size: int
    words_version: int | None = None
    title_suffix: str = ""
    ocr_languages: str = ""


@dataclass(frozen=True)
class Parsed:
    """A file's title and chunks, or why it cannot be read (`refused`, a ParseError's
    message: the file is skipped with it and its indexed version kept, or removed when the
    message says the file holds nothing now: common.NOTHING_TO_READ). `words`: for each
    chunk, the words of its text and of its context (title and headings), joined
    (tokenizer.joined_words), when the job asked for them. `unread_pages`, `unread_why`: its
    scanned pages OCR did not read, and why (records.Document)."""

    title: str = ""
    chunks: tuple[Chunk, ...] = ()
    refused: str | None = None
    words: tuple[tuple[str, str], ...] = ()
    unread_pages: int = 0
    unread_why: str = ""

    def preset_words(self) -> dict[str, str]:
        """The chunks' words by text, as tokenizer.preset_words takes them."""
        preset = {}
        for chunk, (text_words, context_words) in zip(self.chunks, self.words, strict=False):
            preset[chunk.text] = text_words
            preset[context_of(chunk)] = context_words
        return preset


def context_of(chunk: Chunk) -> str:
    """The words index's `context` of a chunk, its title and headings, as the store writes
    it (store/documents.py); were the two to differ, the words would be computed again by
    the writer, not lost."""
    return " ".join((chunk.title, *chunk.headings))


def parse_chunks(job: ParseJob) -> Parsed:
    """Parse and chunk one file's bytes (and find their words, when asked): what a worker
    does with a job, and what a run without workers does in the indexer.

    Raises MemoryError when the parser ran out of memory (parsing.parse says so as a
    ParseError caused by one): that is the process's limit, not the file's fault, and the
    caller says which limit (parse_here, serve)."""
    try:
        options = {"title_suffix": job.title_suffix, "ocr_languages": job.ocr_languages}
        document = parsing.parse(Path(job.name), kind=job.kind, data=job.data, **options)
        chunks = chunking.chunk(document, chunk_size=job.chunk_size)
    except ParseError as exc:
        if isinstance(exc.__cause__, MemoryError):
            raise MemoryError(exc.message) from exc
        return Parsed(refused=exc.message)
    words: tuple[tuple[str, str], ...] = ()
    version = job.words_version
    if version is not None:
        words = tuple(
            (
                tokenizer.joined_words(c.text, version=version),
                tokenizer.joined_words(context_of(c), version=version),
            )
            for c in chunks
        )
    unread, why = document.unread_pages, document.unread_why
    return Parsed(document.title, tuple(chunks), words=words, unread_pages=unread, unread_why=why)


def parse_here(job: ParseJob, on_page: OnPage | None = None) -> Parsed:
    """`job` parsed in this process (a small file in a run of one, or no worker could start)."""
    try:
        with heard(job.name, on_page):
            return parse_chunks(job)
    except MemoryError:
        return Parsed(refused=f"unreadable {job.kind}: too large to read in memory")


def out_of_memory(limit: int) -> str:
    """Why a file a worker capped at `limit` bytes ran out of memory on is refused."""
    return (
        f"it needs more than {limit >> 20:,} MiB of memory to parse (a parse worker's share "
        "of the run's memory; a tag bomb?)"
    )


class WorkerFailed(RuntimeError):
    """A worker failed on a job with an error that is not the file's (a bug): the run stops
    with the worker's traceback, as it would have in-process."""


class ParsePool:
    """`workers` processes that parse jobs. `submit` hands back a Future of the job's Parsed;
    answers come in any order. With `workers` 1, each job is parsed at once in the caller's
    thread: here when not `large`, else by one worker process (started at the
    first such file, kept for the next).

    `fallback` says why worker processes could not be started (then jobs are parsed in the
    indexer's threads instead, and the run goes on). At most `pdf_readers` PDFs and
    `parse_readers` large files are parsed at once, each worker capped at `parse_memory` bytes
    and its PDFium at `pdf_memory` (see the module). `on_page`: each page OCR reads (ocr_pages)."""

    def __init__(self, workers: int, on_page: OnPage | None = None) -> None:
        self.workers, self.on_page = max(1, workers), on_page
        self.fallback: str | None = None
        self.pdf_readers = pdf_readers(self.workers)
        self.pdf_memory = PDF_MEMORY_BUDGET // self.pdf_readers
        self.parse_readers = parse_readers(self.workers)
        self.parse_memory = PARSE_MEMORY_BUDGET // self.parse_readers
        self._jobs: deque[tuple[ParseJob, Future[Parsed]] | None] = deque()
        self._queued = threading.Condition()  # guards _jobs and _free
        self._free = {"pdf": self.pdf_readers, "large": self.parse_readers}
        self._lock = threading.Lock()
        self._running: set[_Worker] = set()
        self._solo: _Worker | None = None  # a run of one's worker, for its large files
        self._threads = [
            threading.Thread(target=self._serve, name=f"parse-{n}", daemon=True)
            for n in range(self.workers if self.workers > 1 else 0)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, job: ParseJob) -> Future[Parsed]:
        future: Future[Parsed] = Future()
        if not self._threads:
            future.set_running_or_notify_cancel()
            if not large(job):
                future.set_result(parse_here(job, self.on_page))
            else:
                self._solo, parsed = self._parse(self._solo, job)
                future.set_result(parsed)
        else:
            with self._queued:
                self._jobs.append((job, future))
                self._queued.notify()
        return future

    def close(self, *, abort: bool = False) -> None:
        """End the workers once their jobs are done; `abort`: cancel the jobs not started
        and stop the workers at once (the run failed or was stopped)."""
        if abort:
            with self._queued:
                for item in self._jobs:
                    if item is not None:
                        item[1].cancel()
                self._jobs.clear()
            with self._lock:
                for worker in self._running:
                    worker.kill()
        with self._queued:
            self._jobs.extend(None for _ in self._threads)
            self._queued.notify_all()
        for thread in self._threads:
            thread.join()
        if self._solo is not None:
            self._solo.close()
            self._forget(self._solo)
            self._solo = None

    def __enter__(self) -> ParsePool:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(abort=exc_type is not None)

    def _serve(self) -> None:
        """One worker's thread: start the worker, hand it each job, and a new one after a
        worker died, ran past a file's deadline or out of memory (the file skipped with why)."""
        worker: _Worker | None = None
        try:
            while (item := self._take()) is not None:
                job, future = item
                try:
                    if not future.set_running_or_notify_cancel():
                        continue
                    try:
                        worker, parsed = self._parse(worker, job)
                    except BaseException as exc:
                        future.set_exception(exc)
                        continue
                    future.set_result(parsed)
                finally:
                    self._done(job)
        finally:
            if worker is not None:
                worker.close()
                self._forget(worker)

    def _parse(self, worker: _Worker | None, job: ParseJob) -> tuple[_Worker | None, Parsed]:
        """`job` parsed by `worker` (a new one when None), and the worker for the next job
        (None: it died, ran past the job's deadline or out of memory, and was closed)."""
        if worker is None and self.fallback is None:
            worker = self._start()
        if worker is None:
            return None, parse_here(job, self.on_page)
        try:
            parsed, alive = worker.parse(job, parse_deadline_s(job), self.on_page)
        except _Died as died:
            self._forget(worker)
            return None, Parsed(refused=died.reason)
        if not alive:
            worker.close()
            self._forget(worker)
            return None, parsed
        return worker, parsed

    def _take(self) -> tuple[ParseJob, Future[Parsed]] | None:
        """The first job queued that this thread may parse now (None: the pool closes): a PDF
        only while fewer than `pdf_readers` are being parsed, a large file only while fewer
        than `parse_readers` are, else the jobs behind it."""
        with self._queued:
            while True:
                for at, item in enumerate(self._jobs):
                    needs = _readers(item[0]) if item is not None else ()
                    if all(self._free[reader] > 0 for reader in needs):
                        del self._jobs[at]
                        for reader in needs:
                            self._free[reader] -= 1
                        return item
                self._queued.wait()

    def _done(self, job: ParseJob) -> None:
        with self._queued:
            for reader in _readers(job):
                self._free[reader] += 1
            self._queued.notify_all()

    def _start(self) -> _Worker | None:
        try:
            worker = _Worker(self.pdf_memory, self.parse_memory)
        except _Died as died:
            self.fallback = f"parse workers could not start ({died.reason}): parsed here"
            return None
        with self._lock:
            self._running.add(worker)
        return worker

    def _forget(self, worker: _Worker | None) -> None:
        with self._lock:
            self._running.discard(worker)  # type: ignore[arg-type]


ZIP_KINDS = frozenset({"docx", "epub", "odt", "pptx"})
"""Kinds that are zip archives of XML: small on disk, large once inflated."""


def large(job: ParseJob) -> bool:
    """Whether parsing `job` may cost much memory: a file over LARGE_FILE_BYTES, or a zip
    (DOCX, EPUB, ODT, PPTX), whose XML may inflate 100×: 256 KiB of it may hold 2 million
    elements."""
    return len(job.data) > LARGE_FILE_BYTES or job.kind in ZIP_KINDS


def _readers(job: ParseJob) -> tuple[str, ...]:
    """The readers of the pool a job holds while parsed: "pdf" for a PDF, "large" for a
    large file."""
    return (("pdf",) if job.kind == "pdf" else ()) + (("large",) if large(job) else ())


class _Died(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Worker:
    """One worker process and the indexer's ends of its two pipes."""

    def __init__(self, pdf_memory: int, parse_memory: int) -> None:
        self.memory = parse_memory
        self.expired = False  # killed by the watch: its job ran past its deadline
        jobs_read, jobs_write = os.pipe()
        results_read, results_write = os.pipe()
        package_root = str(Path(__file__).resolve().parent.parent)
        program = _boot(package_root, jobs_read, results_write, pdf_memory, parse_memory)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", program],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(jobs_read, results_write),
                env={**os.environ, **WORKER_ENV},
            )
        except OSError as exc:
            for fd in (jobs_read, jobs_write, results_read, results_write):
                os.close(fd)
            raise _Died(f"{exc.strerror or exc}") from exc
        os.close(jobs_read)
        os.close(results_write)
        self._jobs = Connection(jobs_write, readable=False)
        self._results = Connection(results_read, writable=False)
        try:
            started = self._results.poll(WORKER_START_S)
            ready = self._results.recv_bytes() if started else b""
        except (EOFError, OSError):
            ready = b""
        if ready != READY:
            self.kill()
            self.close()
            raise _Died(self._how())

    def parse(self, job: ParseJob, deadline_s: float, said: OnPage | None) -> tuple[Parsed, bool]:
        """The worker's answer for `job`, and whether the worker goes on (False: it ran out
        of memory and ended, or ran past the deadline just as it answered). Raises _Died when
        it died, or did not answer within `deadline_s` (then it is killed). `said`: on_page."""
        _WATCH.start(self, deadline_s)
        try:
            self._jobs.send_bytes(pickle.dumps(dataclasses.replace(job, data=b"")))
            self._jobs.send_bytes(job.data)
            status, value = answer_of(self._results, job.name, said)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            self.close()
            if self.expired:
                raise _Died(
                    f"its parse took longer than {deadline_s:,.0f} s, so the worker process "
                    "reading it was stopped (a stuck or hostile parse?); the rest of the run "
                    "went on"
                ) from exc
            raise _Died(
                f"its parser ended the worker process reading it ({self._how()}): a crash, or "
                f"it needed more than {self.memory >> 20:,} MiB of memory (a parse worker's "
                "share of the run's); the rest of the run went on"
            ) from exc
        finally:
            _WATCH.stop(self)
        if status == "failed":
            raise WorkerFailed(f"a parse worker failed on {job.name}:\n{value}")
        return value, status == "parsed" and not self.expired

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()

    def close(self) -> None:
        """Close its job pipe (it ends there) and wait for it; killed if it does not end."""
        for end in (self._jobs, self._results):
            try:
                end.close()
            except OSError:
                pass
        try:
            self.process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _how(self) -> str:
        try:
            code = self.process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"


class _Watch:
    """One thread for the process that kills each worker whose job runs past its deadline
    (a thread per job would cost a thread's start for each file of a run)."""

    def __init__(self) -> None:
        self._due: dict[_Worker, float] = {}
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def start(self, worker: _Worker, seconds: float) -> None:
        """Kill `worker` in `seconds` unless stopped first."""
        with self._changed:
            self._due[worker] = time.monotonic() + seconds
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="parse-deadlines")
                self._thread.daemon = True
                self._thread.start()
            self._changed.notify()

    def stop(self, worker: _Worker) -> None:
        with self._changed:
            self._due.pop(worker, None)

    def _watch(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                for worker in [w for w, due in self._due.items() if due <= now]:
                    del self._due[worker]
                    worker.expired = True  # before the kill, which its reader then sees
                    worker.kill()
                self._changed.wait(min(self._due.values(), default=now + 3600) - now)


_WATCH = _Watch()


def _boot(package_root: str, jobs: int, results: int, pdf_memory: int, parse_memory: int) -> str:
    """The worker's program: ignore Ctrl-C from its first line (a terminal sends it to the
    whole process group: the indexer ends its workers, and a worker still importing would print
    a traceback), import this package from where the indexer imported it (its folder first on
    sys.path only while `metis_lite` itself is imported, so that nothing installed beside it
    shadows the standard library), then serve, capped at `parse_memory` bytes and its PDFium at
    `pdf_memory`."""
    return (
        "import signal\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "import sys\n"
        f"sys.path.insert(0, {package_root!r})\n"
        "try:\n"
        "    import metis_lite\n"
        "finally:\n"
        f"    sys.path.remove({package_root!r})\n"
        "from metis_lite.indexing.parse_pool import serve\n"
        f"serve({jobs}, {results}, {pdf_memory}, {parse_memory})\n"
    )


def cap_memory(limit: int) -> None:
    """Cap this process's data segment at `limit` bytes: the soft limit only, so that its
    PDFium worker, which inherits it, may set its own (pdf_worker.cap_memory); where the OS
    has no such limit, run uncapped."""
    try:
        import resource

        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ImportError, AttributeError, ValueError, OSError):
        pass


def serve(
    jobs_fd: int,
    results_fd: int,
    pdf_memory: int = PDF_MEMORY_BUDGET,
    parse_memory: int = PARSE_MEMORY_BUDGET,
) -> None:
    """A worker's loop: parse each job read from `jobs_fd`, answer on `results_fd`, until the
    job pipe ends (the indexer closed it, or ended however it ended), or a job ran it out of
    memory (answered "spent": the indexer starts another worker). Its data segment is capped
    at `parse_memory` bytes, its PDFium worker at `pdf_memory`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pdf.set_memory_cap(pdf_memory)
    cap_memory(parse_memory)
    jobs = Connection(jobs_fd, writable=False)
    results = Connection(results_fd, readable=False)
    results.send_bytes(READY)
    while True:
        answer: tuple[str, object]
        try:
            job = pickle.loads(jobs.recv_bytes())
            data = jobs.recv_bytes()
        except EOFError:
            return
        except MemoryError:  # the file itself is past the cap
            data = b""
            answer = ("spent", Parsed(refused=out_of_memory(parse_memory)))
        else:
            try:
                with sending(results):
                    answer = ("parsed", parse_chunks(dataclasses.replace(job, data=data)))
            except MemoryError:
                answer = ("spent", Parsed(refused=out_of_memory(parse_memory)))
            except Exception:
                answer = ("failed", traceback.format_exc())
        del data
        try:
            message = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        except MemoryError:  # the answer itself is past the cap
            answer = ("spent", Parsed(refused=out_of_memory(parse_memory)))
            message = pickle.dumps(answer)
        results.send_bytes(message)
        if answer[0] == "spent":
            return
