"""A base's spec, its indexing runs and its per-day search counts (counts only, never what
was asked)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import apsw

from metis_lite.errors import BaseBusy, BaseReadOnly, DiskFull
from metis_lite.store.core import StoreCore, now_iso


class RunsMixin(StoreCore):
    """The `spec`, `runs` and `search_counts` tables."""

    # -- spec -------------------------------------------------------------------------------

    def spec(self) -> dict[str, Any]:
        return {
            key: json.loads(value) for key, value in self.db.execute("SELECT key, value FROM spec")
        }

    def set_spec(self, values: dict[str, Any]) -> None:
        with self._transaction():
            self.db.executemany(
                "INSERT INTO spec (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [(key, json.dumps(value)) for key, value in values.items()],
            )

    # -- runs -------------------------------------------------------------------------------

    def start_run(self) -> int:
        with self._transaction():
            self.db.execute(
                "INSERT INTO runs (started_at, state) VALUES (?, 'running')", (now_iso(),)
            )
            return int(self.db.last_insert_rowid())

    def record_run(self, run_id: int, **counts: int) -> None:
        """A running run's counts so far, which status shows while it goes on: written in the
        transaction that wrote what they count, when one is open."""
        sets = ", ".join(f"{name} = ?" for name in counts)
        with self._transaction():
            self.db.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*counts.values(), run_id))

    def finish_run(self, run_id: int, *, state: str, **counts: int) -> None:
        sets = ", ".join(f"{name} = ?" for name in counts)
        with self._transaction():
            self.db.execute(
                f"UPDATE runs SET finished_at = ?, state = ?{', ' + sets if sets else ''} WHERE id = ?",
                (now_iso(), state, *counts.values(), run_id),
            )

    def last_run(self) -> dict[str, Any] | None:
        cursor = self.db.execute("SELECT * FROM runs ORDER BY id DESC LIMIT 1")
        row = cursor.fetchone()
        if row is None:
            return None
        names = [d[0] for d in cursor.getdescription()]
        return dict(zip(names, row, strict=True))

    # -- search counts ----------------------------------------------------------------------

    def count_searches(self, searches: int) -> bool:
        """Add to today's count of searches (never what was asked), only when no other
        connection is writing: it never waits for one. Returns whether the count was written
        (a full disk or a read-only base keep it out too: a count is not worth failing or
        holding up a search for)."""
        day = _today()
        try:
            with self.writing(wait=False):
                self.db.execute(
                    "INSERT INTO search_counts (day, searches) VALUES (?, ?)"
                    " ON CONFLICT (day) DO UPDATE SET searches = searches + excluded.searches",
                    (day, searches),
                )
        except (apsw.BusyError, BaseBusy, BaseReadOnly, DiskFull):
            return False
        return True

    def search_counts(self, days: int = 30, *, pending: int = 0) -> dict[str, int]:
        """Searches per day, the latest first; `pending`: counted and not yet written, added
        to today's."""
        rows = self.db.execute(
            "SELECT day, searches FROM search_counts ORDER BY day DESC LIMIT ?", (days,)
        )
        counts = dict(rows)
        if pending:
            day = _today()
            today = counts.pop(day, 0) + pending
            counts = {day: today, **counts}  # the latest day first
        return counts


def _today() -> str:
    """The day a search is counted in (UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%d")
