"""A base's sources and documents: adding and removing them, each document with its chunks
and their words in one transaction (a crash leaves the old version whole or the new one)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metis_lite.errors import InvalidRequest, SourceNotFound, SourceOverlap
from metis_lite.records import Chunk, SourceInfo
from metis_lite.store.core import StoreCore, now_iso

SOURCE_KINDS = ("folder", "file")
"""What a source's path is: a folder, whose files are read, or one file, read alone."""


@dataclass(frozen=True)
class SourceOptions:
    """How a run reads a source (source_options): a folder or a file; a folder's exclude
    patterns (gitignore syntax, in order) and whether its ignore files are read; the
    languages OCR reads it in ("": the default, source_ocr)."""

    kind: str = "folder"
    excludes: tuple[str, ...] = ()
    no_ignore: bool = False
    ocr_languages: str = ""


@dataclass(frozen=True)
class StoredDocument:
    id: int
    path: str
    content_hash: str
    size: int
    mtime: float | None
    copy: bool = False  # a copy of the document `id` (document_copies.py), not the document itself


class DocumentsMixin(StoreCore):
    """Sources and documents (with their chunks and words)."""

    # -- sources ----------------------------------------------------------------------------

    def sources(self) -> list[tuple[int, str, str | None]]:
        return list(self.db.execute("SELECT id, name, path FROM sources ORDER BY id"))

    def source_infos(self) -> tuple[SourceInfo, ...]:
        """Each source with its documents and chunks, and how it is read, in the order they
        were added."""
        rows: list[Any] = self.db.execute(
            "SELECT s.id, s.name, s.path, s.added_at, count(DISTINCT d.id), count(c.id),"
            " (SELECT count(*) FROM document_copies WHERE source_id = s.id)"
            " FROM sources s LEFT JOIN documents d ON d.source_id = s.id"
            " LEFT JOIN chunks c ON c.document_id = d.id GROUP BY s.id ORDER BY s.id"
        ).fetchall()
        options = self.source_options()
        infos = []
        for source_id, name, path, added, docs, chunks, copies in rows:
            read = options.get(source_id, SourceOptions())
            infos.append(
                SourceInfo(
                    name,
                    path,
                    docs,
                    chunks,
                    added,
                    kind="notes" if path is None else read.kind,
                    excludes=read.excludes,
                    no_ignore=read.no_ignore,
                    ocr_languages=read.ocr_languages,
                    copies=copies,
                )
            )
        return tuple(infos)

    def source_options(self) -> dict[int, SourceOptions]:
        """How each source is read, by source id (a source without a row: SourceOptions())."""
        return {
            int(source_id): SourceOptions(kind, tuple(json.loads(excludes)), bool(no_ignore), ocr)
            for source_id, kind, excludes, no_ignore, ocr in self.db.execute(
                "SELECT source_id, kind, excludes, no_ignore, coalesce(languages, '')"
                " FROM source_options LEFT JOIN source_ocr USING (source_id)"
            )
        }

    def add_source(
        self,
        name: str,
        path: str | None,
        *,
        kind: str = "folder",
        excludes: tuple[str, ...] | None = None,
        no_ignore: bool | None = None,
        ocr_languages: str | None = None,
    ) -> int:
        """Add a source (a folder or a file, or None for the base's notes), or give one of
        that name its new path; SOURCE_OVERLAP when the path lies inside another source or
        holds one (its files would be indexed twice). Paths are compared as given: resolve
        them first. `kind` is what the path is now; `excludes` and `no_ignore` (a folder's:
        ignore.py), when given, replace the source's, else it keeps them (none when new);
        so do `ocr_languages` ("": back to the default)."""
        if kind not in SOURCE_KINDS:
            raise InvalidRequest(f"a source is one of {', '.join(SOURCE_KINDS)}, not {kind!r}")
        with self._transaction():
            rows: list[Any] = self.db.execute("SELECT id, name, path FROM sources").fetchall()
            if path is not None:
                _check_no_overlap(path, [(n, p) for _, n, p in rows if n != name and p])
            row = next((r for r in rows if r[1] == name), None)
            if row:
                source_id = int(row[0])
                if path is not None and row[2] != path:
                    self.db.execute("UPDATE sources SET path = ? WHERE id = ?", (path, source_id))
            else:
                self.db.execute(
                    "INSERT INTO sources (name, path, added_at) VALUES (?, ?, ?)",
                    (name, path, now_iso()),
                )
                source_id = int(self.db.last_insert_rowid())
            if path is not None:
                self._set_options(source_id, kind, excludes, no_ignore)
            if ocr_languages is not None:
                self.db.execute("DELETE FROM source_ocr WHERE source_id = ?", (source_id,))
                if ocr_languages:
                    from metis_lite.parsing import ocr  # its languages checked (not a search's)

                    self.db.execute(
                        "INSERT INTO source_ocr (source_id, languages) VALUES (?, ?)",
                        (source_id, ocr.check_languages(ocr_languages)),
                    )
            return source_id

    def _set_options(
        self, source_id: int, kind: str, excludes: tuple[str, ...] | None, no_ignore: bool | None
    ) -> None:
        """Record how a source is read: its kind; its patterns and ignore files when given."""
        self.db.execute(
            "INSERT INTO source_options (source_id, kind) VALUES (?, ?)"
            " ON CONFLICT (source_id) DO UPDATE SET kind = excluded.kind",
            (source_id, kind),
        )
        if excludes is not None:
            self.db.execute(
                "UPDATE source_options SET excludes = ? WHERE source_id = ?",
                (json.dumps(list(excludes)), source_id),
            )
        if no_ignore is not None:
            self.db.execute(
                "UPDATE source_options SET no_ignore = ? WHERE source_id = ?",
                (int(no_ignore), source_id),
            )

    def remove_source(self, name: str) -> int:
        """Remove a folder source with its documents, chunks, words and vectors, in one
        transaction; returns the documents removed. SOURCE_NOT_FOUND for an unknown name."""
        with self._transaction():
            row = self.db.execute("SELECT id, path FROM sources WHERE name = ?", (name,)).fetchone()
            if row is None:
                known = ", ".join(n for _, n, _ in self.sources()) or "none"
                raise SourceNotFound(f"{self.path} has no source {name!r} (its sources: {known})")
            if row[1] is None:
                raise InvalidRequest(
                    f"{name} holds the base's facts, which are never deleted: it cannot be removed"
                )
            removed = self.remove_documents_of(int(row[0]))
            self.db.execute("DELETE FROM sources WHERE id = ?", (row[0],))
            return removed

    def remove_documents_of(self, source_id: int) -> int:
        """Remove every document of a source (one transaction), and its copies of documents;
        returns how many documents. A document with a copy in another source moves there."""
        with self._transaction():
            self.db.execute("DELETE FROM document_copies WHERE source_id = ?", (source_id,))
            ids = [
                r[0]
                for r in self.db.execute(
                    "SELECT id FROM documents WHERE source_id = ?", (source_id,)
                )
            ]
            for document_id in ids:
                self._delete_document(document_id)
            return len(ids)

    # -- documents --------------------------------------------------------------------------

    def documents_of(self, source_id: int, at: At | None = None) -> dict[str, StoredDocument]:
        """A source's documents by path (`at`: only those at these paths or below: At)."""
        where, args = at_paths("path", at)
        rows = self.db.execute(
            "SELECT id, path, content_hash, size, mtime FROM documents WHERE source_id = ?" + where,
            (source_id, *args),
        )
        return {r[1]: StoredDocument(r[0], r[1], r[2], r[3], r[4]) for r in rows}

    def replace_document(
        self,
        *,
        source_id: int,
        path: str,
        kind: str,
        title: str,
        content_hash: str,
        size: int,
        mtime: float | None,
        chunks: Sequence[Chunk],
    ) -> int:
        """Write a document and its chunks (and their words) in one transaction, replacing any
        earlier version: a crash leaves either the old document whole or the new one whole. A
        chunk whose title, headings and text are an earlier version's keeps that chunk's vector
        (what it would be embedded as is the same): a document cut again by newer chunking
        rules, or edited in one place, is embedded again only where its chunks changed."""
        with self._transaction():
            # Take the write lock before reading: a transaction that reads first holds a snapshot
            # that another connection's commit (a search count) makes stale, and SQLite then
            # refuses its first write at once (SQLITE_BUSY_SNAPSHOT), busy timeout or not.
            self.db.execute("UPDATE meta SET value = value WHERE 0")
            old = self.db.execute(
                "SELECT id FROM documents WHERE source_id = ? AND path = ?", (source_id, path)
            ).fetchone()
            kept: dict[tuple[str, str, str], tuple[str, bytes, bytes | None]] = {}
            if old:
                kept = {  # with the digest of what it was embedded from (document_copies.py), if known
                    (title, headings, text): (model, embedding, digest)
                    for title, headings, text, model, embedding, digest in self.db.execute(
                        "SELECT c.title, c.headings, c.text, v.model, v.embedding, g.digest"
                        " FROM chunks c JOIN vectors v ON v.chunk_id = c.id"
                        " LEFT JOIN chunk_digests g ON g.chunk_id = c.id WHERE c.document_id = ?",
                        (old[0],),
                    )
                }
                self._delete_document(old[0])
            self.db.execute(  # a copy whose file changed is a document of its own now
                "DELETE FROM document_copies WHERE source_id = ? AND path = ?", (source_id, path)
            )
            self.db.execute(
                "INSERT INTO documents (source_id, path, kind, title, content_hash, size, mtime, indexed_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (source_id, path, kind, title, content_hash, size, mtime, now_iso()),
            )
            document_id = self.db.last_insert_rowid()
            for ordinal, chunk in enumerate(chunks):
                headings = json.dumps(list(chunk.headings))
                self.db.execute(
                    "INSERT INTO chunks (document_id, ordinal, text, title, headings, page, line)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        document_id,
                        ordinal,
                        chunk.text,
                        chunk.title,
                        headings,
                        chunk.page,
                        chunk.line,
                    ),
                )
                chunk_id = self.db.last_insert_rowid()
                if chunk.anchor is not None or chunk.ocr:
                    self.db.execute(
                        "INSERT INTO chunk_places (chunk_id, anchor, ocr) VALUES (?, ?, ?)",
                        (chunk_id, chunk.anchor, int(chunk.ocr)),
                    )
                self.db.execute(
                    "INSERT INTO chunks_fts (rowid, text, context) VALUES (?, ?, ?)",
                    (chunk_id, chunk.text, " ".join((chunk.title, *chunk.headings))),
                )
                vector = kept.get((chunk.title, headings, chunk.text))
                if vector is not None:
                    self.db.execute(
                        "INSERT INTO vectors (chunk_id, model, embedding) VALUES (?, ?, ?)",
                        (chunk_id, *vector[:2]),
                    )
                    if vector[2] is not None:
                        self.db.execute(
                            "INSERT INTO chunk_digests (chunk_id, digest) VALUES (?, ?)",
                            (chunk_id, vector[2]),
                        )
            return int(document_id)

    def remove_document(self, document_id: int) -> None:
        with self._transaction():
            self._delete_document(document_id)

    def _delete_document(self, document_id: int) -> None:
        if self._promote_copy(document_id):
            return  # its first copy took its place, chunks and vectors and all
        self.db.execute(
            "DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE document_id = ?)",
            (document_id,),
        )
        # Chunks and their vectors go by ON DELETE CASCADE; the trigger logs vector removals.
        self.db.execute("DELETE FROM documents WHERE id = ?", (document_id,))

    def _promote_copy(self, document_id: int) -> bool:
        """Before a document is deleted: whether a copy of it took its place (document_copies.py)."""
        return False


At = tuple[frozenset[str], tuple[str, ...]]
"""Paths of a source, and folders ('work/') whose paths below: what a run of a watch batch's
changed paths may replace or remove (indexing/changed.py), read without reading the rest."""


def at_paths(column: str, at: At | None) -> tuple[str, tuple[str, ...]]:
    """The SQL condition (" AND …") and its arguments that keep the paths `at` names (none:
    all); each folder a range of `column`'s index ('work/' to 'work0', '/' + 1)."""
    if at is None:
        return "", ()
    names, below = at
    ranges = [f" OR ({column} >= ? AND {column} < ?)"] * len(below)
    bounds = [bound for folder in below for bound in (folder, folder[:-1] + "0")]
    where = f" AND ({column} IN (SELECT value FROM json_each(?)){''.join(ranges)})"
    return where, (json.dumps(sorted(names)), *bounds)


def _check_no_overlap(path: str, others: Sequence[tuple[str, str]]) -> None:
    """SOURCE_OVERLAP when `path` lies inside one of the (name, folder) sources, or holds one."""
    new = Path(path)
    for name, folder in others:
        existing = Path(folder)
        if new == existing:
            raise SourceOverlap(f"{path} is already the base's source {name}")
        if new.is_relative_to(existing):
            raise SourceOverlap(
                f"{path} lies inside the base's source {name} ({folder}), which indexes its "
                "files already: search it with --prefix, or remove that source first"
            )
        if existing.is_relative_to(new):
            raise SourceOverlap(
                f"{path} holds the base's source {name} ({folder}), whose files would be "
                f"indexed twice: remove that source first (metis-lite sources BASE --remove {name})"
            )
