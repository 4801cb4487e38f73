"""What a base keeps beside its documents on purpose: facts (memory.py decides which replaces
which; these write, inside its writing()) and saved evaluation sets with their runs.

A fact's text, subject and key never hold a NUL (INVALID_REQUEST, nothing written): C code
that reads the base (the sqlite3 shell, an FTS5 tokenizer, whatever a client hands the text
to) ends a string at its first NUL, so what follows one would be stored and not shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from metis_lite.errors import InvalidRequest
from metis_lite.store.core import now_iso, one
from metis_lite.store.schema import SchemaMixin


class FactsMixin(SchemaMixin):
    """Rows of `facts`, `eval_sets` and `eval_runs`."""

    # -- facts ------------------------------------------------------------------------------

    def missing_facts(self, fact_ids: Iterable[int]) -> list[int]:
        return [
            i
            for i in fact_ids
            if self.db.execute("SELECT 1 FROM facts WHERE id = ?", (i,)).fetchone() is None
        ]

    def fact_rows(self, where: str, params: Sequence[Any] = (), *, columns: str) -> list[tuple]:
        return self.db.execute(f"SELECT {columns} FROM facts WHERE {where}", params).fetchall()

    def next_fact_id(self) -> int:
        return int(one(self.db.execute("SELECT coalesce(max(id), 0) + 1 FROM facts"))[0])

    def insert_fact(
        self,
        *,
        fact_id: int,
        document_id: int,
        text: str,
        stated_at: str,
        subject: str | None,
        key: str | None,
        replaced_by: int | None,
        replaced_at: str | None,
    ) -> None:
        """A new fact; one born replaced (an older fact imported late) says by which fact, and
        `replaced_at` when that fact was stated. INVALID_REQUEST for a NUL in its text, subject
        or key (the module says why): the transaction it is part of writes nothing."""
        for name, value in (("text", text), ("subject", subject), ("key", key)):
            if value is not None and "\x00" in value:
                raise InvalidRequest(f"a fact's {name} cannot hold a NUL character (U+0000)")
        with self._transaction():
            self.db.execute(
                "INSERT INTO facts (id, document_id, text, stated_at, subject, key, replaced_by,"
                " replaced_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    fact_id,
                    document_id,
                    text,
                    stated_at,
                    subject,
                    key,
                    replaced_by,
                    replaced_at if replaced_by else None,
                ),
            )

    def mark_replaced(self, fact_ids: Iterable[int], *, by: int, at: str) -> None:
        with self._transaction():
            for fact_id in fact_ids:
                self.db.execute(
                    "UPDATE facts SET replaced_by = ?, replaced_at = ? WHERE id = ?",
                    (by, at, fact_id),
                )

    # -- saved evaluations ------------------------------------------------------------------

    def save_eval_set(self, name: str, items: str, origin: str) -> None:
        self.ensure_schema_objects()
        with self._transaction():
            self.db.execute(
                "INSERT INTO eval_sets (name, items, origin, saved_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET items = excluded.items,"
                " origin = excluded.origin, saved_at = excluded.saved_at",
                (name, items, origin, now_iso()),
            )

    def record_eval_run(self, name: str, *, ran_at: str, spec: str, metrics: str) -> None:
        self.ensure_schema_objects()
        with self._transaction():
            self.db.execute(
                "INSERT INTO eval_runs (set_id, ran_at, spec, metrics)"
                " SELECT id, ?, ?, ? FROM eval_sets WHERE name = ?",
                (ran_at, spec, metrics, name),
            )
