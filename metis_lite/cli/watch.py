"""`metis-lite index BASE --watch`: index, then keep indexing what changes, until Ctrl-C.

The sources are watched (indexing/watch.py) from before the first run, so nothing changed
during it is missed; each batch of changes is one run of the paths it names (listed alone, not
walked: indexing/changed.py), and a full rescan every --rescan seconds walks every source,
catching what no event said. Each run
is one line on stderr, with when the last event and the last rescan were:

    watching kb.db: run 3 (2 changes): 0 added, 2 updated, 0 removed, 41 unchanged (0.08 s) · last event 14:02:11 · last rescan 13:55:40

A skipped file or a warning is said when it is new (not at every run). Another process
indexing the base (BASE_BUSY) only delays a run. Ctrl-C between runs, or during one, ends it
with exit 130 and one line, `interrupted`.
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from metis_lite.cli.common import warn
from metis_lite.errors import EXIT_INTERRUPTED, BaseBusy, InvalidRequest
from metis_lite.indexing.watch import RESCAN_S, Batch, Watcher, roots

BUSY_RETRY_S = 5.0
"""While another process indexes the base, a run due is tried again this often."""

RUN_GAP_S = 0.5
"""A batch that comes sooner than this after the last run ended waits until then, joined by
what comes meanwhile: a file rewritten without pause is indexed at most twice a second."""

RESCAN_MIN_S = 1.0
"""The shortest --rescan: a full run of every source is a walk of every folder."""

RESCAN_MAX_S = 86_400.0
"""The longest --rescan, a day (as serve's --poll): a base that misses an event is stale no
longer than that."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("following the sources")
    group.add_argument(
        "--watch",
        action="store_true",
        help="after indexing, keep indexing what changes (file-system events, polled where"
        " there are none) until Ctrl-C (default: index once)",
    )
    group.add_argument(
        "--rescan",
        type=float,
        metavar="SECONDS",
        help=f"with --watch, a full run this often, to catch what no event said,"
        f" {RESCAN_MIN_S:g} to {RESCAN_MAX_S:g} (default {RESCAN_S:g})",
    )
    group.add_argument(
        "--poll-files",
        action="store_true",
        help="with --watch, poll the sources instead of asking for their events (a network"
        " mount is polled anyway; default: events)",
    )


def check(args: argparse.Namespace) -> None:
    """INVALID_REQUEST for --watch's options without it, with --json, or a bad --rescan."""
    if not args.watch:
        if args.rescan is not None or args.poll_files:
            raise InvalidRequest("--rescan and --poll-files go with --watch")
        return
    if args.json:
        raise InvalidRequest("--watch reports each run on stderr: not with --json")
    if args.rescan is not None and not RESCAN_MIN_S <= args.rescan <= RESCAN_MAX_S:
        raise InvalidRequest(
            f"--rescan must be a number of seconds from {RESCAN_MIN_S:g} to {RESCAN_MAX_S:g},"
            f" not {args.rescan:g}"
        )


def follow(base: Any, path: Path, args: argparse.Namespace, progress: Any) -> int:
    """Index `base` (an open Base, its sources added), then each batch of changes and each
    rescan, until Ctrl-C: exit 130. `progress` shows the first run (None: --quiet)."""
    rescan_s = RESCAN_S if args.rescan is None else args.rescan
    watcher = Watcher(base.path, say=warn, polling=args.poll_files)
    log = _Log(path, quiet=args.quiet)
    interrupts = getattr(args, "interrupts", None)  # main's (cli/interrupts.py)

    def index(**options: Any) -> Any:
        """One run; Ctrl-C during it ends it at its next safe point (KeyboardInterrupt here)."""
        with interrupts.watched() if interrupts else nullcontext() as stop:
            report = base.index(stop=stop, **options)
        if report.interrupted:
            raise KeyboardInterrupt
        return report

    try:
        watcher.follow(roots(base.store))
        with progress or nullcontext():
            first = index(reembed=args.reembed, progress=progress)
        log.ran(first, "start", rescan=True)
        sources = roots(base.store)
        watcher.follow(sources)
        warn(
            f"watching {path}: {_count(len(sources), 'source')} ({watcher.how}), a full rescan "
            f"every {rescan_s:g} s; Ctrl-C ends"
        )
        due: str | None = None  # why a run is due: a batch of changes, or "rescan"
        only: dict[str, frozenset[str] | None] | None = None  # a batch's paths, by source
        rescan_at = time.monotonic() + rescan_s
        ended = time.monotonic()
        while True:
            if due is None:
                batch = watcher.wait(max(0.0, rescan_at - time.monotonic()))
                if batch is not None and time.monotonic() < ended + RUN_GAP_S:
                    time.sleep(max(0.0, ended + RUN_GAP_S - time.monotonic()))
                    batch = watcher.join(batch)
                if batch is not None and batch.changes:
                    log.last_event = batch.at
                due = "rescan" if batch is None else _why(batch)
                only = None if batch is None else batch.only
            if watcher.unmounted:  # a run would empty it: none until it is back
                rescan_at, due = time.monotonic() + rescan_s, None
                continue
            try:
                report = index(only=only)
            except BaseBusy as exc:  # another process indexes it: this run waits its turn
                log.once(f"{path}: {exc.message}; the run waits for it")
                time.sleep(BUSY_RETRY_S)
                continue
            if due == "rescan":
                rescan_at = time.monotonic() + rescan_s
            log.ran(report, due, rescan=due == "rescan")
            ended = time.monotonic()
            due = None
            watcher.follow(roots(base.store))  # sources added or removed meanwhile
    except KeyboardInterrupt:  # between runs, or one stopped: what was written is whole
        warn("interrupted")
        return interrupts.exit_code if interrupts else EXIT_INTERRUPTED
    finally:
        watcher.stop()


def _why(batch: Batch) -> str:
    if not batch.changes:
        return f"{', '.join(batch.sources)} back"
    return _count(batch.changes, "change")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


class _Log:
    """Each run's line, and what it skipped or warned of when that is new."""

    def __init__(self, path: Path, *, quiet: bool) -> None:
        self.path = path
        self.quiet = quiet
        self.runs = 0
        self.last_event: float | None = None
        self.last_rescan: float | None = None
        self._said: set[str] = set()
        self._once: str | None = None

    def ran(self, report: Any, why: str, *, rescan: bool) -> None:
        self.runs += 1
        self._once = None
        if rescan:
            self.last_rescan = time.time()
        if not self.quiet:
            warn(
                f"watching {self.path}: run {self.runs} ({why}): {report.added} added, "
                f"{report.updated} updated, {report.removed} removed, {report.unchanged} "
                f"unchanged ({report.seconds:.2f} s) · last event {_clock(self.last_event)}"
                f" · last rescan {_clock(self.last_rescan)}"
            )
        lines = [f"  skipped {s.path}: {s.reason}" for s in report.skipped]
        lines += [f"warning: {w.code}: {w.message}" for w in report.warnings]
        for line in lines:
            if _key(line) not in self._said:
                warn(line)
        self._said = {_key(line) for line in lines}

    def once(self, line: str) -> None:
        if line != self._once:
            self._once = line
            warn(line)


def _key(line: str) -> str:
    """A line without its figures: a warning whose count changed is not new."""
    return "".join(c for c in line if not c.isdigit())


def _clock(at: float | None) -> str:
    return "none yet" if at is None else time.strftime("%H:%M:%S", time.localtime(at))
