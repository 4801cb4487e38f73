"""The two guards every public method of a Base passes: a damaged base is refused from the
first time SQLite finds it malformed, and a write to a read-only Base or a published copy is
refused before anything is done."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, Protocol, TypeVar

import apsw

from metis_lite import connection
from metis_lite.errors import BaseDamaged, BaseReadOnly


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
        if self._damaged is not None:
            raise BaseDamaged(self._damaged)
        try:
            return method(self, *args, **kwargs)
        except (apsw.Error, BaseDamaged) as exc:
            found = connection.damage(exc, self.path)
            if found is None:
                failure = connection.read_failure(exc, self.path)  # an I/O error, said as such
                if failure is None:
                    raise
                raise failure from exc
            self._damaged = found.message
            raise BaseDamaged(found.message) from exc

    return guarded


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
