"""Copies of documents and shared vectors: what a base holds once though it was given twice.

A file whose bytes and kind are those of an indexed document is recorded as a copy of it
(`document_copies`), not parsed, cut or embedded again: a docs folder that holds one page in
several places (Debian's Python docs do) indexes it once, and `sources` counts its copies.
Nothing indexed is lost when the original goes: a document removed or replaced hands its row,
with its chunks, words and vectors, to its first copy, which takes its place (`_promote_copy`,
called wherever a document is deleted), so nothing is embedded again either.

A chunk whose text the model was given before (`chunk_digests`: the digest of what each vector
was embedded from) gets that vector, copied: a notice every page repeats is embedded once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from metis_lite.store.core import now_iso
from metis_lite.store.documents import At, DocumentsMixin, StoredDocument, at_paths
from metis_lite.store.vectors import VectorsMixin


class CopiesMixin(DocumentsMixin, VectorsMixin):
    """Copies of documents, and vectors shared by chunks with the same text."""

    # -- copies -----------------------------------------------------------------------------

    def stored_of(self, source_id: int, at: At | None = None) -> dict[str, StoredDocument]:
        """What an index run finds of a source as stored, by path: its copies first (each
        with its document's id and hash, `copy`), then its documents, so a run that removes
        what is gone drops gone copies before a gone document looks for a copy to move to.
        `at`: only those at these paths or below (documents.At: a watch batch's run)."""
        where, args = at_paths("c.path", at)
        rows = self.db.execute(
            "SELECT d.id, c.path, d.content_hash, c.size, c.mtime FROM document_copies c"
            " JOIN documents d ON d.id = c.document_id WHERE c.source_id = ?"
            + where
            + " ORDER BY c.rowid",
            (source_id, *args),
        )
        copies = {r[1]: StoredDocument(r[0], r[1], r[2], r[3], r[4], copy=True) for r in rows}
        return {**copies, **self.documents_of(source_id, at)}

    def remove_stored(self, source_id: int, stored: StoredDocument) -> None:
        """Remove a document whose file is gone, or forget a copy whose file is."""
        if not stored.copy:
            self.remove_document(stored.id)
            return
        with self._transaction():
            self.db.execute(
                "DELETE FROM document_copies WHERE source_id = ? AND path = ?",
                (source_id, stored.path),
            )

    def original_of(
        self, content_hash: str, kind: str, *, other_than: tuple[int, str]
    ) -> int | None:
        """The id of the indexed document with these bytes and this kind (the oldest, should
        there be several), other than the one at `other_than` (source id, path); or None."""
        row: Any = self.db.execute(
            "SELECT id FROM documents WHERE content_hash = ? AND kind = ?"
            " AND NOT (source_id = ? AND path = ?) ORDER BY id LIMIT 1",
            (content_hash, kind, *other_than),
        ).fetchone()
        return int(row[0]) if row else None

    def record_copy(
        self, *, source_id: int, path: str, document_id: int, size: int, mtime: float | None
    ) -> None:
        """Record a file as a copy of a document, in one transaction; a document that was at
        its path (the file held other bytes before) goes, handing its place to its own first
        copy if it has one."""
        with self._transaction():
            old: Any = self.db.execute(
                "SELECT id FROM documents WHERE source_id = ? AND path = ?", (source_id, path)
            ).fetchone()
            if old is not None:
                self._delete_document(int(old[0]))
            self.db.execute(
                "INSERT INTO document_copies (source_id, path, document_id, size, mtime)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (source_id, path) DO UPDATE SET"
                " document_id = excluded.document_id, size = excluded.size, mtime = excluded.mtime",
                (source_id, path, document_id, size, mtime),
            )

    def copy_places(self, chunk_ids: Sequence[int]) -> dict[int, list[tuple[str, str]]]:
        """(source, path) of every copy of the documents holding these chunks, in the order
        the copies were recorded, by chunk id: a search cites a copy's file as another place
        of the passage (Result.also_in), since the copy holds it too."""
        if not chunk_ids:
            return {}
        marks = ",".join("?" * len(chunk_ids))
        places: dict[int, list[tuple[str, str]]] = {}
        for chunk_id, source, path in self.db.execute(
            "SELECT c.id, s.name, k.path FROM chunks c"
            " JOIN document_copies k ON k.document_id = c.document_id"
            f" JOIN sources s ON s.id = k.source_id WHERE c.id IN ({marks}) ORDER BY k.rowid",
            tuple(chunk_ids),
        ):
            places.setdefault(chunk_id, []).append((source, path))
        return places

    def _promote_copy(self, document_id: int) -> bool:
        """Inside a write, before a document is deleted: its first copy (the earliest
        recorded) takes its place, with its chunks, words and vectors, and the other copies
        stay its copies; True when one did (the document is then not to be deleted)."""
        rows: Any = self.db.execute(
            "SELECT rowid, source_id, path, size, mtime FROM document_copies"
            " WHERE document_id = ? ORDER BY rowid",
            (document_id,),
        ).fetchall()
        for rowid, source_id, path, size, mtime in rows:
            self.db.execute("DELETE FROM document_copies WHERE rowid = ?", (rowid,))
            taken = self.db.execute(
                "SELECT 1 FROM documents WHERE source_id = ? AND path = ?", (source_id, path)
            ).fetchone()
            if taken:  # a document there already (an older metis-lite indexed the copy itself)
                continue
            self.db.execute(
                "UPDATE documents SET source_id = ?, path = ?, size = ?, mtime = ?,"
                " indexed_at = ? WHERE id = ?",
                (source_id, path, size, mtime, now_iso(), document_id),
            )
            return True
        return False

    # -- shared vectors ---------------------------------------------------------------------

    def vectors_of_digests(self, model: str, digests: Iterable[bytes]) -> dict[bytes, bytes]:
        """The stored vector (float32 blob) of `model` embedded from each digest that has one:
        one query a batch (a chunk's digest probed by its index)."""
        wanted = list(set(digests))
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        rows: Any = self.db.execute(
            "SELECT d.digest, v.embedding FROM chunk_digests d JOIN vectors v"
            f" ON v.chunk_id = d.chunk_id WHERE d.digest IN ({marks}) AND v.model = ?"
            " GROUP BY d.digest",  # one of the chunks holding it: their vectors are the same
            (*wanted, model),
        )
        return {bytes(digest): bytes(vector) for digest, vector in rows}
