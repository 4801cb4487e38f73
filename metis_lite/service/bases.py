"""The bases an index service serves: opened once, kept indexed, searched one or several at once.

Below the HTTP edge (metis_lite/http/ calls it; it imports nothing of HTTP and answers
dataclasses): this module opens the bases named on the command line, keeps each one's sources
indexed by a background thread (on request, when its sources change (sources.py), and every
`poll_s` seconds; `Base.index` is incremental, so an idle pass is cheap), and answers a
question from one base (`search`, an `Answer`) or from several (`search_many`, a `MultiAnswer`:
multi.py's merge, on this service's thread pool).

A base that cannot be used (damaged, another program's file or no file at all, from a newer
metis-lite, on a disk too full for its -shm, unreadable) does not stop the service: the others
are served, and every request naming it is answered with its error (BASE_DAMAGED, DISK_FULL
…), as is every request to a base found damaged while served.

A read-only service (`serve --read-only`) indexes and writes nothing: each base's path is
followed to the newest copy published there (copies.py), and each request holds the copies it
reads until it ends (`request`), so none is closed under it.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import apsw

from metis_lite.base.core import Base, BaseStatus
from metis_lite.base.multi import SEARCH_THREADS, MultiAnswer, search_bases
from metis_lite.errors import (
    BaseBusy,
    BaseNotFound,
    BaseReadOnly,
    InvalidRequest,
    MetisError,
    StoreError,
)
from metis_lite.escapes import escape_controls
from metis_lite.indexing.ingest import IndexReport
from metis_lite.indexing.watch import joined
from metis_lite.records import Answer, Filters
from metis_lite.service.follow import BaseHealth, Copies, health_of
from metis_lite.service.sources import SourceFollower
from metis_lite.settings import TOP_K
from metis_lite.store import IndexerLock

BUSY_RETRIES = 5
"""An indexing pass that meets another writer's commit (SQLITE_BUSY) goes on this many times;
each retry keeps what was written and resumes where it stopped (indexing is incremental)."""

STOP_WAIT_S = 5.0
"""At shutdown, how long to wait for an indexing pass to stop: it stops at its next point
between transactions, within a fraction of a second (indexing/pipeline.py), recorded as
interrupted; a pass that has not stopped by then is a daemon thread, ended with the process."""

BASE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A base's name in URLs: letters, digits, '.', '_', '-'."""

UNUSABLE = StoreError
"""Errors of a base file that cannot be used as it is (damaged, another program's file or not
a file at all, from a newer metis-lite, on a full disk, unreadable): the service serves the
other bases. A base that is not there (BASE_NOT_FOUND) is a mistake in the command line
instead: nothing starts (open_bases)."""

UNWRITABLE = "a published copy, a read-only file or a read-only file system"
"""What a base the service may not write is, for a person."""

Log = Callable[[str], None]


def log_stderr(line: str) -> None:
    """A log line as an admin's terminal shows it: file names and messages escaped, never
    obeyed (escapes.py)."""
    print(escape_controls(line), file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class SearchRequest:
    """A question as the service takes it, already checked at the edge that received it."""

    question: str
    mode: str = "hybrid"
    top_k: int = TOP_K
    rerank: bool = True
    filters: Filters = Filters()
    bases: tuple[str, ...] = ()
    fusion: str | None = None  # "relative" or "rrf"; None: the bases' own
    collapse: bool = True  # one result per text (retrieval/collapse.py)


class Indexer:
    """Keeps one base's sources indexed: one pass at a time, on request or every poll_s."""

    def __init__(self, base: Base, *, poll_s: float, log: Log) -> None:
        self.base = base
        self.poll_s = poll_s
        self.log = log
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pending = False
        self._running = False
        self._said: str | None = None  # the last failure logged, not said again until it changes
        self._thread = threading.Thread(target=self._loop, name=f"index-{base.name}", daemon=True)
        # Its sources' changes wake it at once for a pass of their paths (sources.py); poll_s
        # stays the full rescan's. None: the next pass reads every source whole.
        self._only: dict[str, frozenset[str] | None] | None = None
        self._sources = SourceFollower(base, self._changed, log) if poll_s > 0 else None

    def start(self) -> None:
        self._thread.start()
        if self._sources is not None and self.base.writable:
            self._sources.start()

    @property
    def busy(self) -> bool:
        """A pass is running or asked for (in this process, or another process indexes)."""
        with self._lock:
            if self._pending or self._running:
                return True
        return IndexerLock(self.base.path).held_elsewhere()

    def request(self) -> None:
        """Start a pass now; BASE_BUSY while one runs (here or in another process);
        STORE_ERROR for a lock file that no pass could take (IndexerLock.check)."""
        IndexerLock(self.base.path).check()
        with self._lock:
            if self._pending or self._running or IndexerLock(self.base.path).held_elsewhere():
                raise BaseBusy(f"{self.base.name} is being indexed; searches still work")
            self._pending, self._only = True, None
        self._wake.set()

    def stop(self) -> None:
        if self._sources is not None:
            self._sources.stop()
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT_S)

    def _changed(self, only: Mapping[str, frozenset[str] | None]) -> None:
        """A batch of its sources' changes (SourceFollower): joined to the next pass's paths."""
        with self._lock:
            if self._only is not None:
                self._only = joined(self._only, only)
        self._wake.set()

    def _loop(self) -> None:
        due = self.poll_s > 0  # a first pass at start, then every poll_s
        while not self._stop.is_set():
            if not due and not self._wake.wait(self.poll_s if self.poll_s > 0 else None):
                with self._lock:
                    self._only = None  # the poll's pass: a full rescan
            due = False
            if self._stop.is_set():
                return
            self._wake.clear()
            with self._lock:
                self._pending, self._running = False, True
                only, self._only = self._only, {}
            try:
                if only != {} and not self._pass(only):  # {}: woken with nothing to read
                    with self._lock:
                        self._only = None  # what it had to read, the next pass reads whole
            finally:
                with self._lock:
                    self._running = False

    def _pass(self, only: Mapping[str, frozenset[str] | None] | None) -> bool:
        """One pass (`only`: Base.index's); False when it did not end (busy, failed, stopped)."""
        name = self.base.name
        try:
            self.base.check_usable()
            if not self.base.writable:
                self._say(f"base {name} cannot be written ({UNWRITABLE}): searched, not indexed")
                return False
            report = self._index(only)
        except BaseBusy:
            return False  # another process indexes it, and the next pass catches up
        except MetisError as exc:
            self._say(f"indexing {name} failed: {exc.code}: {exc.message}")
            return False
        except Exception as exc:  # a pass must never end the thread that keeps the base fresh
            lines = traceback.format_exception(exc)
            self._say(f"indexing {name} failed: " + "".join(lines).rstrip())
            return False
        self._said = None
        if report.interrupted:  # the service stops: the next start goes on from there
            self.log(
                f"indexing {name} interrupted: {report.embedded} of "
                f"{report.embedded + report.without_vector} chunks embedded"
            )
            return False
        if report.added or report.updated or report.removed or report.embedded:
            self.log(
                f"indexed {name}: {report.added} added, {report.updated} updated, "
                f"{report.removed} removed, {len(report.skipped)} skipped, {report.embedded} "
                f"embedded; {report.chunks} chunks ({report.seconds:.1f} s)"
            )
            for warning in report.warnings:
                self.log(f"indexing {name}: warning: {warning.code}: {warning.message}")
        return True

    def _say(self, line: str) -> None:
        """Log why a pass did not run, once: every poll that meets the same (a read-only or
        damaged base) is quiet until it changes or a pass succeeds."""
        if line != self._said:
            self._said = line
            self.log(line)

    def _index(self, only: Mapping[str, frozenset[str] | None] | None) -> IndexReport:
        for attempt in range(BUSY_RETRIES + 1):
            try:
                return self.base.index(stop=self._stop, only=only)
            except apsw.BusyError:
                # Another connection committed between this pass's read and its write (a
                # search count): what was written stays, and the next try goes on from there.
                if attempt == BUSY_RETRIES:
                    raise
                self.log(f"indexing {self.base.name}: the base was busy; going on from there")
        raise AssertionError("unreachable")


def parse_base_arg(arg: str) -> tuple[str, Path]:
    """`PATH` (named by its file stem) or `NAME=PATH`."""
    if "=" in arg and not Path(arg).exists():
        name, _, path = arg.partition("=")
    else:
        name, path = Path(arg).stem, arg
    if not BASE_NAME.fullmatch(name):
        raise InvalidRequest(
            f"{name!r} cannot name a base: use letters, digits, '.', '_' or '-' (NAME=PATH)"
        )
    return name, Path(path)


class OpenBases(dict[str, Base]):
    """The bases named on the command line that opened, by name; `refused` holds the error of
    each that could not be used, `order` every name as given, `paths` each one's file."""

    def __init__(
        self,
        opened: Mapping[str, Base],
        refused: Mapping[str, StoreError],
        order: Sequence[str],
        paths: Mapping[str, Path] | None = None,
    ) -> None:
        super().__init__(opened)
        self.refused = dict(refused)
        self.order = tuple(order)
        self.paths = dict(paths or {name: base.path for name, base in opened.items()})


def open_bases(
    args: Sequence[str],
    *,
    log: Log | None = None,
    workers: int | None = None,
    read_only: bool = False,
) -> OpenBases:
    """Open the bases named on the command line; each must exist (BASE_NOT_FOUND: the service
    creates none). One that cannot be used (UNUSABLE: any STORE_ERROR of its file) is logged
    and left out while another one opens; when none opens, the first one's error is raised.
    `workers`: each base's cores (Base.workers: its indexing and its embedded models; None,
    every core). `read_only`: each is opened so that nothing is written to it
    (Base.read_only)."""
    named: dict[str, Path] = {}
    for arg in args:
        name, path = parse_base_arg(arg)
        if name in named:
            raise InvalidRequest(f"two bases are named {name!r}: name one with NAME=PATH")
        named[name] = path
    if not named:
        raise InvalidRequest("name at least one base to serve")
    opened: dict[str, Base] = {}
    refused: dict[str, StoreError] = {}
    try:
        for name, path in named.items():
            try:
                opened[name] = Base(path, name=name, workers=workers, read_only=read_only)
            except BaseNotFound:
                raise
            except UNUSABLE as exc:
                refused[name] = exc
    except BaseException:
        for base in opened.values():
            base.close()
        raise
    if not opened:
        raise next(iter(refused.values()))
    for name, error in refused.items():
        (log or log_stderr)(f"warning: base {name} is not served: {error.code}: {error.message}")
    return OpenBases(opened, refused, tuple(named), named)


class Service:
    """The served bases, their indexers and the searches asked of them."""

    def __init__(
        self,
        bases: dict[str, Base],
        *,
        poll_s: float,
        search_threads: int = SEARCH_THREADS,
        log: Log = log_stderr,
        read_only: bool = False,
    ) -> None:
        self.bases = bases
        self.refused: dict[str, StoreError] = dict(getattr(bases, "refused", {}))
        """Bases named to be served that could not be used, with their error."""
        self.names: tuple[str, ...] = getattr(bases, "order", (*bases, *self.refused))
        self.read_only = read_only
        """Nothing is indexed or written (`serve --read-only`): each base's path is followed
        to the newest copy published there instead (copies.py)."""
        self.indexers = {
            name: Indexer(b, poll_s=poll_s, log=log) for name, b in bases.items() if not read_only
        }
        paths = getattr(bases, "paths", {name: b.path for name, b in bases.items()})
        self.copies = Copies(bases, self.refused, paths, log=log) if read_only else None
        self._pool = ThreadPoolExecutor(search_threads, thread_name_prefix="search")

    def start(self) -> None:
        for indexer in self.indexers.values():
            indexer.start()
        if self.copies is not None:
            self.copies.start()

    def close(self) -> None:
        for indexer in self.indexers.values():
            indexer.stop()
        if self.copies is not None:
            self.copies.close()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for base in self.bases.values():
            base.close()

    def base(self, name: str) -> Base:
        """The open base of that name; its error for one named but not usable; BASE_NOT_FOUND."""
        base = self.bases.get(name)
        if base is None:
            refused = self.refused.get(name)
            if refused is not None:
                raise type(refused)(refused.message)
            raise BaseNotFound(f"no base named {name!r} is served here")
        return base

    # -- status and indexing --------------------------------------------------------------

    def status(self, name: str) -> BaseStatus:
        """The base's status; `Indexing` while a pass runs here or in another process."""
        status = self.base(name).status()
        indexer = self.indexers.get(name)
        if indexer is not None and indexer.busy:
            status = dataclasses.replace(status, state="Indexing")
        return status

    def statuses(
        self, names: Sequence[str]
    ) -> tuple[list[BaseStatus], list[tuple[str, StoreError]]]:
        """The status of each usable base of `names`, and the error of each that is not (one
        refused at start, or found damaged since): one bad base never hides the others."""
        found: list[BaseStatus] = []
        unavailable: list[tuple[str, StoreError]] = []
        for name in names:
            try:
                found.append(self.status(name))
            except UNUSABLE as exc:
                unavailable.append((name, exc))
        return found, unavailable

    def index_now(self, name: str) -> None:
        """Start an indexing pass of the base now; refused with the base's code when it is
        damaged (BASE_DAMAGED) or cannot be written (BASE_READ_ONLY), BASE_BUSY while one
        runs."""
        base = self.base(name)
        base.check_usable()
        if self.read_only:
            raise BaseReadOnly(
                f"base {name} is served read-only: index the base it was published from, and "
                "publish it again"
            )
        if not base.writable:
            raise BaseReadOnly(
                f"base {name} cannot be written ({UNWRITABLE}): it is searched, never indexed"
            )
        self.indexers[name].request()

    # -- a reader's copies ----------------------------------------------------------------

    def request(self) -> AbstractContextManager[None]:
        """Hold what one request reads until it ends: a read-only service closes a replaced
        copy only once no request that began before the switch is left (copies.py)."""
        return self.copies.pinned() if self.copies is not None else nullcontext()

    def health(self, names: Sequence[str]) -> list[BaseHealth]:
        """Whether each named base is open, and which file it serves."""
        if self.copies is not None:
            return self.copies.health(names)
        return health_of(self.bases, self.refused, names, {})

    # -- search ---------------------------------------------------------------------------

    def search(self, name: str, request: SearchRequest) -> Answer:
        """One base's answer, exactly as the CLI's --json prints it once serialized."""
        return self.base(name).search(
            request.question,
            mode=request.mode,
            top_k=request.top_k,
            rerank=request.rerank,
            filters=request.filters,
            fusion=request.fusion,
            collapse=request.collapse,
        )

    def search_many(self, request: SearchRequest) -> MultiAnswer:
        """One question asked of several bases at once, merged (multi.py)."""
        bases = {name: self.base(name) for name in request.bases}
        return search_bases(
            bases,
            request.question,
            mode=request.mode,
            top_k=request.top_k,
            rerank=request.rerank,
            filters=request.filters,
            fusion=request.fusion,
            collapse=request.collapse,
            executor=self._pool,
        )
