"""Ctrl-C (SIGINT) and SIGTERM while a command runs: one line, an exit code, no traceback.

`main` holds an `Interrupts` for the whole command. A signal asks the command to stop:

- inside `watched()` (an index run, which looks at `stop` between its transactions), it sets
  `stop` and nothing more: the run ends at its next safe point, within a fraction of a
  second, and the command says what was done;
- elsewhere (start-up: imports, opening the base, a command that has no such points), it
  raises KeyboardInterrupt there, and `main` says `interrupted`;
- a second signal ends the process at once (os._exit): what SQLite wrote is whole, as after
  any kill (the WAL), and the next run goes on from there.

The exit code is 128 + the signal's number, as shells report a command a signal ended: 130
for SIGINT, 143 for SIGTERM. Handlers are set only from the main thread (where Python runs
them) and put back as they were when the command ends, so a program that calls `main` keeps
its own.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from metis_lite.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

EXIT_CODES: dict[int, int] = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}
"""What stops a command (Ctrl-C, and what a service manager or `kill` sends), and its exit."""

AGAIN = b"interrupted again: stopped at once (what was written is whole; run it again to go on)\n"
"""What a second signal says, written straight to stderr's descriptor (safe in a handler)."""


class Interrupts:
    """The command's SIGINT and SIGTERM handlers (see the module), from `with` to its end."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.signal: int | None = None
        """The first signal caught (None: none)."""
        self._watched = False
        self._before: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        """The signal caught's; 130 (SIGINT's) for a KeyboardInterrupt none of ours."""
        return EXIT_INTERRUPTED if self.signal is None else EXIT_CODES[self.signal]

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for number in EXIT_CODES:
                self._before[number] = signal.signal(number, self._caught)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, before in self._before.items():
            signal.signal(number, before)
        self._before.clear()

    @contextmanager
    def watched(self) -> Iterator[threading.Event]:
        """Inside, a signal only sets the `stop` it yields: the work looks at it."""
        self._watched = True
        try:
            yield self.stop
        finally:
            self._watched = False

    def _caught(self, number: int, frame: FrameType | None) -> None:
        if self.signal is not None:
            os.write(2, AGAIN)
            os._exit(EXIT_CODES[number])
        self.signal = number
        self.stop.set()
        if not self._watched:
            raise KeyboardInterrupt
