"""A served base's sources followed by their file-system events (indexing/watch.py), as
`index --watch` follows them: each batch of changes wakes the base's indexer for a pass of the
paths it names (Batch.only: not a walk of the folders), and `serve --poll` stays the full
rescan's interval."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from metis_lite.base.core import Base
from metis_lite.indexing.watch import Watcher, roots

Only = Mapping[str, frozenset[str] | None]
"""Each source a pass reads, with its changed paths (None: read whole): Base.index's `only`."""

WAIT_S = 1.0
"""How long the follower waits for a batch before it checks whether it should stop."""

SOURCES_S = 10.0
"""How often the sources are read again from the base (one added or removed meanwhile)."""


class SourceFollower:
    """One base's sources watched in a thread of their own; `wake(only)` is called for each
    batch of changes a run reads (from that thread), with the paths it names (Batch.only)."""

    def __init__(
        self, base: Base, wake: Callable[[Only], None], log: Callable[[str], None]
    ) -> None:
        self.base = base
        self.wake = wake
        self.log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"watch-{base.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2 * WAIT_S + 1)

    def _loop(self) -> None:
        name = self.base.name
        watcher = Watcher(self.base.path, say=lambda line: self.log(f"base {name}: {line}"))
        try:
            waited = SOURCES_S
            while not self._stop.is_set():
                if waited >= SOURCES_S:
                    watcher.follow(roots(self.base.store))
                    waited = 0.0
                batch = watcher.wait(WAIT_S)
                waited += WAIT_S
                if batch is not None and not self._stop.is_set():
                    self.wake(batch.only)
        except Exception as exc:  # noqa: BLE001 - the rescans still keep the base indexed
            self.log(f"base {name}: its sources are no longer watched ({exc}); --poll rescans")
        finally:
            watcher.stop()
