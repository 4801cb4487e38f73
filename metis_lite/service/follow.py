"""The copies a read-only service serves: each base's path watched, a new file put in place of
the one served between requests, the old one closed once no request can be reading it.

`metis-lite serve --read-only` answers from files a publisher replaces by renaming a new copy
over them (publish.py). Every WATCH_S a thread looks at each base's path — a stat, which opens
nothing — and when the path names another file than the one served (a new inode), or the one
served as immutable was written after all, it opens the new file as a read-only Base, warms it
(its vectors and words index read into memory; the older copy's models handed over, so none is
loaded again) and puts it in the older one's place in one step. The bases opened at start are
warmed by the same thread first, while they are searched already (FTS5 answers until then). A request that starts after
that is answered from the new copy; one that started before finishes on the old one.

Every request holds what it reads with `pinned()`, and so does each MCP tool call, from its start
to its end (agents.Agent's `hold`): /mcp stops waiting at its deadline and answers 503, ending
its request, while the call's thread may still search. A Base put out of service is closed — every
descriptor of its file with it — once every request that began before the switch has ended
(requests count by epoch: one that starts after the switch cannot reach the old Base). A file
that cannot be opened (damaged, not a base, from a newer metis-lite) does not replace the copy
served: it is logged once, said in /v1/health, and tried again when the path changes again. A
path that goes away leaves the copy served as it is, and /v1/health says so too.

A reader switches only to a file `publish` made (publish.published_file: its publication mark,
no writer's file beside it), looked at first as an immutable file, so that nothing is made
beside whatever lies there: an ordinary base moved over a published copy is not served (and
gets no -wal or -shm from the reader, which would keep every later `publish` out), the copy
served is kept, and /v1/health says why. The bases opened at start are served whatever they
are (a live base, read beside its indexer, is a reader's too); what replaces one must be
published. A later `publish` to the path is served as any new copy is.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from metis_lite.base.core import Base
from metis_lite.copies.publish import Copy, FileState, file_state, published_file
from metis_lite.errors import BaseNotFound, MetisError, StoreError

WATCH_S = 0.5
"""How often each served path is looked at (one stat): a new copy is served within this long
of its publication, plus the time to open and warm it."""

Log = Callable[[str], None]
OpenBase = Callable[[str, Path], Base]


@dataclass(frozen=True)
class BaseHealth:
    """What /v1/health says of one base: open or not, which file it serves, and why not."""

    name: str
    open: bool
    copy: Copy | None = None
    warm: bool | None = None
    """A read-only service's: what searches read is in memory (None: not said)."""
    error: MetisError | None = None
    """Why the base is not open (it could not be opened, or was found damaged)."""
    replacement: MetisError | None = None
    """Why the newer file at its path is not served, or that the path is gone (the older copy
    still is): /v1/health says `degraded` while there is one."""


def open_reader(name: str, path: Path) -> Base:
    return Base(path, name=name, read_only=True)


class Copies:
    """Keeps `bases` (the Service's own dict, updated in place) on the newest file at each
    base's path; `refused` (the Service's too) loses a base once a file at its path opens."""

    def __init__(
        self,
        bases: dict[str, Base],
        refused: dict[str, StoreError],
        paths: Mapping[str, Path],
        *,
        log: Log,
        watch_s: float = WATCH_S,
        open_base: OpenBase = open_reader,
    ) -> None:
        self.bases = bases
        self.refused = refused
        self.paths = dict(paths)
        self.log = log
        self.watch_s = watch_s
        self._open_base = open_base
        self.replacements: dict[str, MetisError] = {}
        """The error of each newer file that could not be opened, by base name."""
        self._tried: dict[str, FileState | None] = {
            name: _state(path) for name, path in self.paths.items() if name in refused
        }
        self._gone: set[str] = set()
        self._pins = _Pins(wake=self._wake_up)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="copies", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop watching and close every Base put out of service (requests have ended)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        for base in self._pins.take(everything=True):
            base.close()

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Hold every base served now until the block ends (one request)."""
        with self._pins.pinned():
            yield

    def health(self, names: Sequence[str]) -> list[BaseHealth]:
        return health_of(self.bases, self.refused, names, self.replacements, warmth=True)

    # -- the watching thread --------------------------------------------------------------

    def _wake_up(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        for name, base in list(self.bases.items()):  # those opened at start, one by one
            if self._stop.is_set():
                return
            try:
                base.warm()
            except Exception as exc:  # searched all the same, by FTS5 until read
                self.log(f"warning: base {name} could not be read into memory: {exc}")
        looked = -self.watch_s
        while not self._stop.is_set():
            for base in self._pins.take():  # woken by the end of a request that held one
                base.close()
            if time.monotonic() - looked >= self.watch_s:  # each path at most every watch_s
                looked = time.monotonic()
                for name, path in self.paths.items():
                    if self._stop.is_set():
                        return
                    try:
                        self._look(name, path)
                    except Exception as exc:  # the thread that keeps copies fresh must not end
                        lines = "".join(traceback.format_exception(exc)).rstrip()
                        self.log(f"watching {name} ({path}) failed: {lines}")
            self._wake.wait(max(0.0, self.watch_s - (time.monotonic() - looked)))
            self._wake.clear()

    def _look(self, name: str, path: Path) -> None:
        now = _state(path)
        if now is None:
            if name not in self._gone:
                self._gone.add(name)
                self.replacements[name] = BaseNotFound(
                    f"{path} is gone: what was opened from it is kept until a copy is "
                    "published there"
                )
                self.log(f"warning: {path} is gone: base {name} goes on serving the copy it has")
            return
        if name in self._gone:  # back: what is there now is looked at afresh
            self._gone.discard(name)
            self.replacements.pop(name, None)
            self._tried.pop(name, None)
        current = self.bases.get(name)
        if current is not None and current.copy is not None and current.copy.serves(now):
            return
        if name in self._tried and self._tried[name] == now:
            return  # this very file was refused already
        try:
            new = self._opened(name, path, current)
        except MetisError as exc:
            self._tried[name] = now
            self.replacements[name] = exc
            self.log(
                f"warning: the new file at {path} is not served ({exc.code}: {exc.message}); "
                f"base {name} {'goes on serving the copy it has' if current else 'stays closed'}"
            )
            return
        self._tried.pop(name, None)
        self.replacements.pop(name, None)
        self.bases[name] = new
        self.refused.pop(name, None)
        if current is not None:
            self._pins.retire(current)
        said = new.copy.publication if new.copy else None
        published = f", published {said.at} ({said.id})" if said else ""
        self.log(f"serving {name}: a new copy of {path}{published}")

    def _opened(self, name: str, path: Path, current: Base | None) -> Base:
        """The published file at `path` opened and warmed (StoreError when it is not one: see
        the module), to be put in `current`'s place."""
        state, publication = published_file(path)
        new = self._open_base(name, path)
        try:
            opened = new.copy
            if opened is None or not (
                opened.state.same_file(state) and opened.publication == publication
            ):  # replaced between the look and the open: looked at again at the next one
                raise StoreError(f"{path} was replaced while it was opened")
            if current is not None:
                new.take_models(current)
            new.warm()
        except BaseException:
            new.close()
            raise
        return new


def health_of(
    bases: Mapping[str, Base],
    refused: Mapping[str, MetisError],
    names: Sequence[str],
    replacements: Mapping[str, MetisError],
    *,
    warmth: bool = False,
) -> list[BaseHealth]:
    """Each named base's health: open (reading its last run from it), or its error; with
    `warmth`, whether each open one is warm."""
    found = []
    for name in names:
        base = bases.get(name)
        if base is None:
            error = refused.get(name) or StoreError(f"base {name} is not open")
            found.append(BaseHealth(name, False, error=error, replacement=replacements.get(name)))
            continue
        try:
            copy = base.served_copy()
        except (MetisError, OSError) as exc:
            error = exc if isinstance(exc, MetisError) else StoreError(f"{base.path}: {exc}")
            found.append(BaseHealth(name, False, error=error))
            continue
        warm = base.warmed if warmth else None
        found.append(BaseHealth(name, True, copy, warm, replacement=replacements.get(name)))
    return found


class _Pins:
    """Which requests may still be reading a Base put out of service (the module docstring)."""

    def __init__(self, *, wake: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._epoch = 0
        self._active: Counter[int] = Counter()
        self._retired: list[tuple[int, Base]] = []
        self._wake = wake

    @contextmanager
    def pinned(self) -> Iterator[None]:
        with self._lock:
            epoch = self._epoch
            self._active[epoch] += 1
        try:
            yield
        finally:
            with self._lock:
                self._active[epoch] -= 1
                if not self._active[epoch]:
                    del self._active[epoch]
                waiting = bool(self._retired)
            if waiting:
                self._wake()  # the watching thread closes what no request holds now

    def retire(self, base: Base) -> None:
        """Put `base` out of service: requests from now on are of a newer epoch."""
        with self._lock:
            self._epoch += 1
            self._retired.append((self._epoch, base))

    def take(self, *, everything: bool = False) -> list[Base]:
        """The retired Bases no request can be reading any more (all of them at shutdown)."""
        with self._lock:
            oldest = min(self._active, default=None)
            free = [
                (epoch, base)
                for epoch, base in self._retired
                if everything or oldest is None or oldest >= epoch
            ]
            self._retired = [item for item in self._retired if item not in free]
        return [base for _, base in free]


def _state(path: Path) -> FileState | None:
    try:
        return file_state(path)
    except OSError:
        return None
