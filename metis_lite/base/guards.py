"""The two guards every public method of a Base passes: a damaged base is refused from the
first time SQLite finds it malformed, and a write to a read-only Base or a published copy is
refused before anything is done; and the same two questions for a caller to ask first
(Guards). The first guard is also a block (`guarding`), for what is read outside a method:
the opening of a Base (its spec is read then, so a damaged page of it is found there), and the
connections a search or a document's read holds while its caller reads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Concatenate, ParamSpec, Protocol, TypeVar

import apsw

from metis_lite.errors import BaseDamaged, BaseReadOnly
from metis_lite.store import connection
from metis_lite.store.pool import StorePool


class Guarded(Protocol):
    """What the guards read of a Base."""

    path: Path
    name: str
    read_only: bool
    published: bool
    _damaged: str | None


P = ParamSpec("P")
R = TypeVar("R")
B = TypeVar("B", bound=Guarded)


def usable(method: Callable[Concatenate[B, P], R]) -> Callable[Concatenate[B, P], R]:
    """BASE_DAMAGED, from the first time SQLite finds the file malformed, for every later call
    too: a damaged base is never written again by this Base (reopen it once it is replaced)."""

    @functools.wraps(method)
    def guarded(self: B, *args: P.args, **kwargs: P.kwargs) -> R:
        with guarding(self):
            return method(self, *args, **kwargs)

    return guarded


@contextmanager
def guarding(base: Guarded) -> Iterator[None]:
    """`usable` as a block: BASE_DAMAGED at once for a base already found damaged, and for
    SQLite's word that a page read inside is malformed (remembered: every later call says
    so); an I/O error is said as one (connection.read_failure). Without it, apsw's own
    exception would reach the command line as a traceback, and the service as a 500."""
    if base._damaged is not None:
        raise BaseDamaged(base._damaged)
    try:
        yield
    except (apsw.Error, BaseDamaged) as exc:
        found = connection.damage(exc, base.path)
        if found is None:
            failure = connection.read_failure(exc, base.path)  # an I/O error, said as such
            if failure is None:
                raise
            raise failure from exc
        base._damaged = found.message
        raise BaseDamaged(found.message) from exc


def writes(method: Callable[Concatenate[B, P], R]) -> Callable[Concatenate[B, P], R]:
    """BASE_READ_ONLY, before anything is done (not even BASE.lock made), for a write to a
    read-only Base or to a published copy."""

    @functools.wraps(method)
    def guarded(self: B, *args: P.args, **kwargs: P.kwargs) -> R:
        if self.read_only or self.published:
            what = "served read-only" if self.read_only else "a published copy"
            raise BaseReadOnly(
                f"base {self.name} is {what}: it is searched, never written; write to the "
                "base it was published from, and publish it again"
            )
        return method(self, *args, **kwargs)

    return guarded


class Guards:
    """A Base's answers to a caller who asks before calling (the service, before it queues an
    index run): whether the base is damaged, and whether anything may be written to it."""

    read_only: bool
    published: bool
    _damaged: str | None
    _pool: StorePool

    def check_usable(self) -> None:
        """BASE_DAMAGED once SQLite found the file malformed (every later call says so too)."""
        if self._damaged is not None:
            raise BaseDamaged(self._damaged)

    @property
    def writable(self) -> bool:
        """Whether anything may be written to the file: False for a Base served read-only, a
        published copy, and a file SQLite opened read-only (a read-only file or file
        system), which is searched and never indexed."""
        if self.read_only or self.published:
            return False
        with self._pool.borrow() as store:
            return not store.db.readonly("main")
