"""A base that follows its sources: their file-system events, grouped into batches, each batch
one index run (`metis-lite index BASE --watch`).

Each source is watched by `watchfiles` (the Rust `notify` crate: inotify on Linux, FSEvents on
macOS, ReadDirectoryChangesW on Windows), in a thread of its own: a folder source with every
folder below it, a file source through its folder (that file's events only). watchfiles groups
the events it sees into one batch until STEP_MS pass without one, or DEBOUNCE_MS since the
first (so a `git checkout` of 1,000 files is one batch, or a few, and an editor's save by
rename — a temporary file written, renamed over the document — one change); while a run goes
on, the next batches wait, and the run after it covers them all. A batch names its changed
paths, and its run lists those alone (changed.py), not walking the folder: a save in a folder
of 100,000 files costs that file.

Only what a run would read asks for a run: a file of a kind a base reads that is not hidden
and not left out by the folder's rules (ignore.py: its ignore files, its --exclude patterns),
a folder (a folder moved in or out), or an ignore file itself (what a run leaves out changes).
The base's own files (BASE, BASE-wal, BASE-shm, BASE-journal, BASE.lock) never do: a base
kept inside the folder it indexes does not run after itself.

A source folder that disappears (deleted, moved, unmounted) is said once, its thread ends,
and its documents are kept (a run skips a missing source folder: ingest.py); it is watched
again, with a run, when it comes back. A folder that is there but on another file system than
when first watched, and empty (a drive unmounted from it, its mount point left) is `unmounted`:
a run would find it empty and remove its documents, so the caller runs none until it is back.

Where events cannot be had — the OS watch limit reached (inotify's max_user_watches: one watch
a folder), or the folder on a network mount, where another machine's changes make no event
here — the source is polled instead (POLL_DELAY_MS), said once. A full rescan on a timer (the
caller's) catches whatever was missed.
"""

from __future__ import annotations

import errno
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import watchfiles

from metis_lite import parsing
from metis_lite.indexing.changed import excluded
from metis_lite.indexing.ignore import IGNORE_FILES, SPHINX_BUILD_MARKS, Patterns, Rules
from metis_lite.store import Store

__all__ = ["DEBOUNCE_MS", "RESCAN_S", "Batch", "Root", "Watcher", "joined", "roots"]

DEBOUNCE_MS = 1600
"""The longest watchfiles groups events into one batch (its own default): a file rewritten
without pause still asks for a run this often, never once per write."""

STEP_MS = 50
"""A batch ends once this long passes with no event (watchfiles' default): a save, or a
checkout of many files, is one batch; a change is searchable well within 2 s of its save
(benchmarks/bench_watch.py)."""

CHECK_MS = 1000
"""How often a watch thread checks that its source folder is still the one it watches
(gone, moved, unmounted, or replaced by another folder of the same name)."""

POLL_DELAY_MS = 1000
"""A polled source is listed again this often (watchfiles' default is 300 ms: a folder of
100,000 files stat'ed three times a second would keep a core busy)."""

RESCAN_S = 600.0
"""A full run every 10 minutes, changed or not, by default (`--rescan`): what no event said
(a folder polled on a mount, a change while the watch restarted) is found within it."""

NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs", "fuse.sshfs"}
    | {"fuse.rclone", "davfs", "fuse.davfs", "lustre", "gpfs", "fuse.s3fs", "fuse.gcsfuse"}
)
"""File systems (as /proc/self/mounts names them) whose changes made on another machine
make no inotify event here: a source on one is polled."""

BASE_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal", ".lock")
"""The base file and those SQLite and the indexer lock keep beside it."""


@dataclass(frozen=True)
class Root:
    """A source as it is watched: its folder (or file) and the rules of its folder."""

    source: str
    path: Path
    file: bool = False
    excludes: tuple[str, ...] = ()
    no_ignore: bool = False

    @property
    def watched(self) -> Path:
        """The folder a watch is put on: the source's own, or a file source's folder."""
        return self.path.parent if self.file else self.path


@dataclass(frozen=True)
class Batch:
    """What asks for a run: `changes` paths that a run reads changed (0: a source folder came
    back), the last of them at `at` (time.time()), in `sources`; `paths`, each source's
    changed paths (a source without them is read whole: one come back)."""

    changes: int
    at: float
    sources: tuple[str, ...]
    paths: tuple[tuple[str, frozenset[str] | None], ...] = ()

    @property
    def only(self) -> dict[str, frozenset[str] | None]:
        """The run this batch asks for (ingest.index's `only`): each source's changed paths,
        None for one read whole."""
        paths = dict(self.paths)
        return {source: paths.get(source) for source in self.sources}


def joined(
    earlier: Mapping[str, frozenset[str] | None], later: Mapping[str, frozenset[str] | None]
) -> dict[str, frozenset[str] | None]:
    """Two runs' `only` (Batch.only) as one: each source's paths joined, None (read whole)
    where either reads it whole."""
    both = dict(earlier)
    for source, paths in later.items():
        have = both.get(source, frozenset())
        both[source] = None if paths is None or have is None else have | paths
    return both


def roots(store: Store) -> tuple[Root, ...]:
    """The base's sources as they are watched (the notes, which have no folder, are not)."""
    options = store.source_options()
    found = []
    for source_id, name, path in store.sources():
        if path is None:
            continue
        read = options.get(source_id)
        found.append(
            Root(
                name,
                Path(path),
                file=read is not None and read.kind == "file",
                excludes=read.excludes if read else (),
                no_ignore=read.no_ignore if read else False,
            )
        )
    return tuple(found)


@dataclass(frozen=True)
class _Event:
    """What a watch thread tells the waiting one: `changes` a run reads (at `at`), or its
    folder gone, or the watch failed with `error` (`polling`: it was polling)."""

    root: Root
    changes: int = 0
    at: float = 0.0
    paths: frozenset[str] = frozenset()
    gone: bool = False
    error: BaseException | None = None
    polling: bool = False


class Watcher:
    """Every source of a base watched, each in a thread; `wait` gives the next batch.

    `own`: the base file (its files never ask for a run); `say`: where a line for a person
    goes (a source gone or back, a source polled and why); `polling`: poll every source."""

    def __init__(self, own: Path, *, say: Callable[[str], None], polling: bool = False) -> None:
        self.own = frozenset(str(own) + suffix for suffix in BASE_FILE_SUFFIXES)
        self.say = say
        self.polling = polling
        self._events: queue.Queue[_Event] = queue.Queue()
        self._threads: dict[Root, tuple[threading.Thread, threading.Event]] = {}
        self._polled: set[Root] = set()
        self._missing: set[Root] = set()
        self._roots: tuple[Root, ...] = ()
        self._devices: dict[Path, int] = {}  # each folder's file system when first watched

    @property
    def how(self) -> str:
        """How the sources are watched, for a person."""
        polled = len(self._threads) if self.polling else len(self._polled & set(self._threads))
        if not polled:
            return "file-system events"
        if polled == len(self._threads):
            return f"polled every {POLL_DELAY_MS / 1000:g} s"
        return f"file-system events, {polled} polled every {POLL_DELAY_MS / 1000:g} s"

    def follow(self, roots: Sequence[Root]) -> None:
        """Watch these sources (and stop watching those no longer among them)."""
        self._roots = tuple(roots)
        for root in [r for r in self._threads if r not in self._roots]:
            self._end(root)
        self._missing &= set(self._roots)
        for root in self._roots:
            if root not in self._threads and root not in self._missing:
                if self._there(root):
                    self._start(root)
                else:
                    self._lost(root)

    def wait(self, timeout: float) -> Batch | None:
        """The next batch of changes, or a source come back; None after `timeout` seconds
        without either."""
        deadline = time.monotonic() + timeout
        while True:
            back = [root for root in sorted(self._missing, key=str) if self._there(root)]
            if back:
                for root in back:
                    self._missing.discard(root)
                    self.say(f"source {root.source} is back ({root.path}): watched again")
                    self._start(root)
                return Batch(0, time.time(), tuple(r.source for r in back))
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                event = self._events.get(timeout=min(left, CHECK_MS / 1000))
            except queue.Empty:
                continue
            batch = self.join(self._take(event, []))
            if batch is not None:
                return batch

    def join(self, batch: Batch | None) -> Batch | None:
        """`batch` with what came meanwhile joined to it, without waiting."""
        while True:
            try:
                more = self._events.get_nowait()
            except queue.Empty:
                return batch
            batch = self._take(more, [] if batch is None else [batch])

    def stop(self) -> None:
        for root in list(self._threads):
            self._end(root)

    def _take(self, event: _Event, batches: list[Batch]) -> Batch | None:
        """An event's part of the batch (None: it asks for no run); a source gone or failed
        is handled here, in the waiting thread."""
        if event.gone:
            self._threads.pop(event.root, None)
            if event.root in self._roots:
                self._lost(event.root)
            return batches[0] if batches else None
        if event.error is not None:
            self._failed(event, event.error)
            return batches[0] if batches else None
        if event.root not in self._threads:
            return batches[0] if batches else None  # no longer a source
        earlier = batches[0] if batches else Batch(0, 0.0, ())
        source = event.root.source
        sources = tuple(dict.fromkeys((*earlier.sources, source)))
        paths = joined(earlier.only, {source: event.paths})
        changes, at = earlier.changes + event.changes, max(earlier.at, event.at)
        return Batch(changes, at, sources, tuple(paths.items()))

    @property
    def unmounted(self) -> tuple[Root, ...]:
        """Sources whose folder is there, empty, on another file system than when first
        watched: a drive unmounted, its mount point left. A run would find it empty and
        remove its documents, so the caller runs none until it is back."""
        return tuple(r for r in self._missing if r.watched.is_dir() and not self._there(r))

    def _there(self, root: Root) -> bool:
        """Whether a source's folder is there, on the file system it was first watched on."""
        try:
            now = os.stat(root.watched)
        except OSError:
            return False
        if not stat.S_ISDIR(now.st_mode):
            return False
        if self._devices.setdefault(root.watched, now.st_dev) == now.st_dev:
            return True
        try:  # an empty folder where another file system was: its mount point, unmounted
            with os.scandir(root.watched) as entries:
                if next(entries, None) is None:
                    return False
        except OSError:
            return False
        self._devices[root.watched] = now.st_dev  # mounted again (a new device number)
        return True

    def _lost(self, root: Root) -> None:
        self._missing.add(root)
        what = f"the folder of source {root.source}" if root.file else f"source {root.source}"
        if root in self.unmounted:
            self.say(
                f"{what} is on another file system now ({root.watched}: unmounted?): no run "
                "until it is back, so its documents are kept"
            )
            return
        self.say(
            f"{what} is missing ({root.watched}): not watched until it is back; "
            "its documents are kept"
        )

    def _failed(self, event: _Event, error: BaseException) -> None:
        self._threads.pop(event.root, None)
        if event.root not in self._roots:
            return
        if not event.polling and _watch_limit(error):
            self.say(
                f"source {event.root.source}: the OS limit of watched folders is reached "
                f"({error}); it is polled instead, every {POLL_DELAY_MS / 1000:g} s "
                "(on Linux, sysctl fs.inotify.max_user_watches raises the limit)"
            )
            self._polled.add(event.root)
            self._start(event.root)
            return
        if not self._there(event.root):
            self._lost(event.root)
            return
        self.say(
            f"source {event.root.source} cannot be watched ({error}); the rescans still index it"
        )

    def _start(self, root: Root) -> None:
        if root not in self._polled and not self.polling:
            mount = network_mount(root.watched)
            if mount is not None:
                self.say(
                    f"source {root.source} lies on a network mount ({mount}): polled every "
                    f"{POLL_DELAY_MS / 1000:g} s, another machine's changes make no event here"
                )
                self._polled.add(root)
        stop = threading.Event()
        thread = threading.Thread(
            target=self._watch,
            args=(root, stop, self.polling or root in self._polled),
            name=f"watch-{root.source}",
            daemon=True,
        )
        self._threads[root] = (thread, stop)
        thread.start()

    def _end(self, root: Root) -> None:
        thread, stop = self._threads.pop(root)
        stop.set()
        thread.join(2 * CHECK_MS / 1000)

    def _watch(self, root: Root, stop: threading.Event, polling: bool) -> None:
        """One source's thread: its batches, those a run reads put on the queue, until it is
        stopped or its folder is no longer the one it watched."""
        try:
            first = os.stat(root.watched)
            relevant = _Relevance(root, self.own)
            for changes in watchfiles.watch(
                root.watched,
                watch_filter=None,
                debounce=DEBOUNCE_MS,
                step=STEP_MS,
                stop_event=stop,
                rust_timeout=CHECK_MS,
                yield_on_timeout=True,
                raise_interrupt=False,
                force_polling=polling,
                poll_delay_ms=POLL_DELAY_MS,
                recursive=not root.file,
                ignore_permission_denied=True,
            ):
                count, paths = relevant.read(changes) if changes else (0, frozenset())
                if count:
                    self._events.put(_Event(root, count, time.time(), paths))
                if not _same(root.watched, first):
                    self._events.put(_Event(root, gone=True))
                    return
        except Exception as exc:  # noqa: BLE001 - said by the waiting thread, never lost
            if not stop.is_set():
                self._events.put(_Event(root, error=exc, polling=polling))


SURE = "sure"
PERHAPS = "perhaps"


class _Relevance:
    """Which changed paths of a batch a run reads (see the module), the folders' rules read
    once a batch."""

    def __init__(self, root: Root, own: frozenset[str]) -> None:
        self.root = root
        self.own = own

    def read(self, changes: Iterable[tuple[watchfiles.Change, str]]) -> tuple[int, frozenset[str]]:
        """The changes of a batch a run reads (0: the batch asks for no run), and their paths
        (those a run limited to them lists: changed.py)."""
        stacks: dict[str, tuple[Patterns, ...] | None] = {}
        rules = Rules(
            self.root.path,
            self.root.source,
            self.root.excludes,
            read_files=not self.root.no_ignore,
            warnings=[],  # a run says them
        )
        verdicts = {path: self._reads(change, path, rules, stacks) for change, path in changes}
        sure = sum(1 for verdict in verdicts.values() if verdict == SURE)
        # A deletion of no kind read (a folder moved out, or an editor's temporary file renamed
        # over its document) asks for a run, counted as one change when nothing else did.
        paths = frozenset(path for path, verdict in verdicts.items() if verdict is not None)
        return sure or int(PERHAPS in verdicts.values()), paths

    def _reads(
        self,
        change: watchfiles.Change,
        path: str,
        rules: Rules,
        stacks: dict[str, tuple[Patterns, ...] | None],
    ) -> str | None:
        """SURE: a run reads what changed; PERHAPS: it may (a deletion of no kind read: a folder
        moved out leaves only its own name behind); None: it does not."""
        if path in self.own:
            return None
        if self.root.file:
            return SURE if path == str(self.root.path) else None
        try:
            parts = Path(path).relative_to(self.root.path).parts
        except ValueError:
            return None
        if not parts:
            return None
        *folders, name = parts
        if any(part.startswith(".") for part in folders):
            return None
        if name.startswith("."):  # hidden, but an ignore file changes what a run reads
            return SURE if name in IGNORE_FILES and not self.root.no_ignore else None
        if name in SPHINX_BUILD_MARKS:  # a folder that becomes a Sphinx build, or is one no more
            return SURE if not self.root.no_ignore else None
        folder = os.path.isdir(path)
        verdict = SURE
        if parsing.kind_of(Path(name)) is None and not folder:
            if change != watchfiles.Change.deleted:
                return None
            verdict = PERHAPS
        if rules.active and excluded(rules, folders, name, folder, self.root.path, stacks) is True:
            return None  # (None: an ignore file on the way cannot be read; a run says why)
        return verdict


def _same(folder: Path, first: os.stat_result) -> bool:
    """Whether `folder` is still the folder that was watched (not gone, nor another)."""
    try:
        now = os.stat(folder)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (first.st_dev, first.st_ino)


def _watch_limit(error: BaseException) -> bool:
    """Whether a watch failed for the OS's limit of watches (inotify's ENOSPC) or of open
    descriptors (kqueue's EMFILE), said by notify as an OSError or in its message."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EMFILE):
        return True
    text = str(error).lower()
    return any(
        words in text
        for words in ("watch limit", "no space left", "too many open files", "maxfileswatch")
    )


def network_mount(folder: Path, mounts: Path = Path("/proc/self/mounts")) -> str | None:
    """The file system type of the mount holding `folder` when it is a network one
    (NETWORK_FILESYSTEMS), else None (and None where mounts cannot be read: not Linux)."""
    try:
        lines = mounts.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    best, kind = "", ""
    where = str(folder)
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind if kind in NETWORK_FILESYSTEMS else None
