"""The bases an index service serves: opened once, kept indexed, searched one or several at once.

No HTTP here (that is api.py): this module opens the bases named on the command line, keeps
each one's sources indexed by a background thread (on request and every `poll_s` seconds;
`Base.index` is incremental, so an idle pass is cheap), and answers a question from one base
or from several, merged:

- several bases are searched in parallel on a small thread pool;
- results are merged by the reranker's score when every base reranked, else by the fused score
  (reciprocal-rank scores depend on ranks only, so they compare across bases); ties keep the
  order of the bases as asked, then each base's own order;
- `took` holds, per step, the slowest base (they ran side by side) and the wall time in all;
- each warning and each result names its base.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import apsw

from metis_lite.base import Base
from metis_lite.errors import BaseBusy, BaseNotFound, InvalidRequest, MetisError
from metis_lite.ingest import IndexReport
from metis_lite.records import Answer, Filters, Took
from metis_lite.serialize import SCORE_DIGITS, answer_to_json, result_to_json, status_to_json
from metis_lite.settings import TOP_K
from metis_lite.store import IndexerLock
from metis_lite.webserver import log_exception

SEARCH_THREADS = 4
"""Bases searched side by side for one question asked of several."""

BUSY_RETRIES = 5
"""An indexing pass that meets another writer's commit (SQLITE_BUSY) goes on this many times;
each retry keeps what was written and resumes where it stopped (indexing is incremental)."""

STOP_WAIT_S = 5.0
"""At shutdown, how long to wait for an indexing pass to stop at its next file."""

BASE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A base's name in URLs: letters, digits, '.', '_', '-'."""

Log = Callable[[str], None]


def log_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class SearchRequest:
    """A question as the API takes it, already checked (api.py parses the JSON)."""

    question: str
    mode: str = "hybrid"
    top_k: int = TOP_K
    rerank: bool = True
    filters: Filters = Filters()
    bases: tuple[str, ...] = ()


class _Stopped(Exception):
    """Raised from the progress callback to end an indexing pass when the service stops."""


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
        self._thread = threading.Thread(target=self._loop, name=f"index-{base.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def busy(self) -> bool:
        """A pass is running or asked for (in this process, or another process indexes)."""
        with self._lock:
            if self._pending or self._running:
                return True
        return IndexerLock(self.base.path).held_elsewhere()

    def request(self) -> None:
        """Start a pass now; BASE_BUSY while one runs (here or in another process)."""
        with self._lock:
            if self._pending or self._running or IndexerLock(self.base.path).held_elsewhere():
                raise BaseBusy(f"{self.base.name} is being indexed; searches still work")
            self._pending = True
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT_S)

    def _loop(self) -> None:
        due = self.poll_s > 0  # a first pass at start, then every poll_s
        while not self._stop.is_set():
            if not due:
                self._wake.wait(self.poll_s if self.poll_s > 0 else None)
            due = False
            if self._stop.is_set():
                return
            self._wake.clear()
            with self._lock:
                self._pending, self._running = False, True
            try:
                self._pass()
            finally:
                with self._lock:
                    self._running = False

    def _pass(self) -> None:
        name = self.base.name
        try:
            report = self._index()
        except (_Stopped, BaseBusy):
            return  # stopping; or another process indexes it and the next pass catches up
        except MetisError as exc:
            self.log(f"indexing {name} failed: {exc.code}: {exc.message}")
            return
        except Exception as exc:  # a pass must never end the thread that keeps the base fresh
            log_exception(f"indexing {name}", exc, with_message=True)
            return
        if report.added or report.updated or report.removed or report.embedded:
            self.log(
                f"indexed {name}: {report.added} added, {report.updated} updated, "
                f"{report.removed} removed, {len(report.skipped)} skipped, {report.embedded} "
                f"embedded; {report.chunks} chunks ({report.seconds:.1f} s)"
            )
            for warning in report.warnings:
                self.log(f"indexing {name}: warning: {warning.code}: {warning.message}")

    def _index(self) -> IndexReport:
        for attempt in range(BUSY_RETRIES + 1):
            try:
                return self.base.index(progress=self._check_stop)
            except apsw.BusyError:
                # Another connection committed between this pass's read and its write (a
                # search count): what was written stays, and the next try goes on from there.
                if attempt == BUSY_RETRIES:
                    raise
                self.log(f"indexing {self.base.name}: the base was busy; going on from there")
        raise AssertionError("unreachable")

    def _check_stop(self, stage: str, done: int, total: int) -> None:
        if self._stop.is_set():
            raise _Stopped


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


def open_bases(args: Sequence[str]) -> dict[str, Base]:
    """Open the bases named on the command line; each must exist (the service creates none)."""
    named: dict[str, Path] = {}
    for arg in args:
        name, path = parse_base_arg(arg)
        if name in named:
            raise InvalidRequest(f"two bases are named {name!r}: name one with NAME=PATH")
        if not path.is_file():
            raise InvalidRequest(
                f"no base at {path}: create it first with `metis-lite index {path} FOLDER`"
            )
        named[name] = path
    if not named:
        raise InvalidRequest("name at least one base to serve")
    bases: dict[str, Base] = {}
    try:
        for name, path in named.items():
            bases[name] = Base(path, name=name)
    except BaseException:
        for base in bases.values():
            base.close()
        raise
    return bases


class Service:
    """The served bases, their indexers and the searches asked of them."""

    def __init__(
        self,
        bases: dict[str, Base],
        *,
        poll_s: float,
        search_threads: int = SEARCH_THREADS,
        log: Log = log_stderr,
    ) -> None:
        self.bases = bases
        self.names = tuple(bases)
        self.indexers = {name: Indexer(b, poll_s=poll_s, log=log) for name, b in bases.items()}
        self._pool = ThreadPoolExecutor(search_threads, thread_name_prefix="search")

    def start(self) -> None:
        for indexer in self.indexers.values():
            indexer.start()

    def close(self) -> None:
        for indexer in self.indexers.values():
            indexer.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for base in self.bases.values():
            base.close()

    def base(self, name: str) -> Base:
        base = self.bases.get(name)
        if base is None:
            raise BaseNotFound(f"no base named {name!r} is served here")
        return base

    # -- status and indexing --------------------------------------------------------------

    def status(self, name: str) -> dict[str, Any]:
        out = status_to_json(self.base(name).status())
        if self.indexers[name].busy:
            out["state"] = "Indexing"
        return out

    def index_now(self, name: str) -> None:
        self.base(name)
        self.indexers[name].request()

    # -- search ---------------------------------------------------------------------------

    def _ask(self, name: str, request: SearchRequest) -> Answer:
        return self.base(name).search(
            request.question,
            mode=request.mode,
            top_k=request.top_k,
            rerank=request.rerank,
            filters=request.filters,
        )

    def search(self, name: str, request: SearchRequest) -> dict[str, Any]:
        """One base's answer, exactly as the CLI's --json prints it."""
        return answer_to_json(self._ask(name, request))

    def search_many(self, request: SearchRequest) -> dict[str, Any]:
        """One question asked of several bases at once, merged (see the module)."""
        names = request.bases
        for name in names:
            self.base(name)
        started = time.perf_counter()
        futures = [self._pool.submit(self._ask, name, request) for name in names]
        answers = []
        for name, future in zip(names, futures, strict=True):
            try:
                answers.append(future.result())
            except MetisError as exc:
                for other in futures:
                    other.cancel()
                raise _named(exc, name) from exc
        wall_ms = (time.perf_counter() - started) * 1000.0
        return merge(names, answers, mode=request.mode, top_k=request.top_k, wall_ms=wall_ms)


def _named(exc: MetisError, name: str) -> MetisError:
    """The same error, its message prefixed with the base it came from."""
    try:
        named = type(exc)(f"{name}: {exc.message}")
    except TypeError:
        return exc
    named.code, named.status = exc.code, exc.status
    return named


def merge(
    names: Sequence[str], answers: Sequence[Answer], *, mode: str, top_k: int, wall_ms: float
) -> dict[str, Any]:
    """Several bases' answers as one (see the module for the order)."""
    reranked = bool(answers) and all(answer.reranked for answer in answers)
    ranked = []
    for position, (name, answer) in enumerate(zip(names, answers, strict=True)):
        for rank, result in enumerate(answer.results):
            score = result.scores.rerank if reranked else result.scores.fused
            score = float(score if score is not None else result.score)
            ranked.append((-score, position, rank, name, result))
    ranked.sort(key=lambda entry: entry[:3])
    results = []
    for negative, _, _, name, result in ranked[:top_k]:
        item = result_to_json(result)
        item["score"] = round(-negative, SCORE_DIGITS)
        item["base"] = name
        results.append(item)
    warnings = [
        {"code": w.code, "message": f"{name}: {w.message}", "base": name}
        for name, answer in zip(names, answers, strict=True)
        for w in answer.warnings
    ]
    took = {
        step.name: round(max((getattr(a.took, step.name) for a in answers), default=0.0), 3)
        for step in fields(Took)
        if step.name != "total"
    }
    took["total"] = round(wall_ms, 3)
    return {
        "mode": mode,
        "reranked": reranked,
        "warnings": warnings,
        "took": took,
        "results": results,
    }
