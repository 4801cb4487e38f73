"""The mark of a published copy (publish.py): which publication a file is, kept in `meta`.

A published copy is a base written once, under a temporary name, and put in place by a rename:
nothing writes it after that. It says so in its `meta` table (`published_id`, a random id new
with each publication, and `published_at`), and it is in rollback-journal mode, not WAL, so a
reader needs no -wal or -shm beside it (publish.py says when a reader may open it immutable).
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from metis_lite.errors import StoreError
from metis_lite.store.core import StoreCore, one


@dataclass(frozen=True)
class Publication:
    """Which publication a published copy is: `id` is new with each one, `at` its UTC time."""

    id: str
    at: str


class PublicationMixin(StoreCore):
    """The `published_id` and `published_at` rows of `meta`."""

    def publication(self) -> Publication | None:
        """The mark of a published copy, or None for a base that is not one."""
        rows = dict(
            self.db.execute(
                "SELECT key, value FROM meta WHERE key IN ('published_id', 'published_at')"
            )
        )
        if "published_id" not in rows:
            return None
        return Publication(str(rows["published_id"]), str(rows.get("published_at", "")))

    def mark_published(self, publication: Publication) -> None:
        """Mark this file a published copy and leave WAL mode (SQLite folds the WAL into the
        file and removes the -wal and -shm, which it does only while no other connection has
        the file open: a copy being published has none)."""
        with self.writing():
            self.db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [("published_id", publication.id), ("published_at", publication.at)],
            )
        mode = str(one(self.db.execute("PRAGMA journal_mode = DELETE"))[0]).lower()
        self._forget_wal()
        if mode != "delete":
            raise StoreError(f"{self.path} stayed in {mode} mode: another connection has it open")

    def journal_mode(self) -> str:
        """`wal` for a base written in place, `delete` for a published copy."""
        return str(one(self.db.execute("PRAGMA journal_mode"))[0]).lower()


def unmark(db: apsw.Connection) -> None:
    """Remove the mark from a new copy of a published copy (backup.py writes it with this, on
    the copy's own connection): a copy is a base to write, until it is published itself."""
    has_meta = one(db.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'meta'"))[0]
    if has_meta and db.execute("SELECT 1 FROM meta WHERE key = 'published_id'").fetchone():
        db.execute("DELETE FROM meta WHERE key IN ('published_id', 'published_at')")
