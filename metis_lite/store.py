"""The base file: its schema, and every write; one Store owns one connection.

A base is one SQLite file in WAL mode (searches are answered while another connection
indexes); each connection follows connection.py's policy. The DDL lives in schema.sql; the
queries are beside the functions that run them. Every write is a transaction that takes the
write lock before it reads (Store.writing), so writers in several processes take turns.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from metis_lite import connection as policy
from metis_lite import tokenizer
from metis_lite.connection import IndexerLock as IndexerLock
from metis_lite.connection import check_is_sqlite, write_failure
from metis_lite.connection import connect as connect
from metis_lite.errors import (
    BaseBusy,
    BaseNotFound,
    BaseReadOnly,
    DiskFull,
    InvalidRequest,
    NotABase,
    SchemaTooNew,
    SourceNotFound,
    SourceOverlap,
    StoreError,
)
from metis_lite.records import Chunk, Filters, SourceInfo, contextualize

SCHEMA_VERSION = 2
"""2: the words index is declared with its word rules (`tokenize='metis 2'`). A base of version
1 is read as it is, and `index` rebuilds its words index (rebuild_words) and records 2: code
that knows only version 1 then refuses the base, rather than write words by its old rules."""
BUSY_RETRY_S = (0.005, 0.05)
"""A write refused at once (a stale snapshot, a WAL being recovered: SQLite calls no busy
handler then) is tried again after a random pause in this range, until the busy timeout
(connection.BUSY_TIMEOUT_MS)."""

_SCHEMA_OBJECT = re.compile(r"CREATE (?:VIRTUAL TABLE|TABLE|INDEX|TRIGGER) IF NOT EXISTS (\w+)")


def _statement(name: str) -> str:
    """schema.sql's CREATE statement for one table."""
    match = re.search(rf"CREATE [^;]*? IF NOT EXISTS {name}\b[^;]*;", schema_sql())
    if match is None:
        raise StoreError(f"schema.sql has no table {name}")
    return match.group()


def schema_sql() -> str:
    """schema.sql, from the installed package or, in a source checkout, the repository root."""
    packaged = resources.files("metis_lite").joinpath("schema.sql")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parent.parent / "schema.sql").read_text(encoding="utf-8")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _one(cursor: apsw.Cursor) -> Any:
    """The row a query always returns (an aggregate's, a PRAGMA's); StoreError if none came."""
    row = cursor.fetchone()
    if row is None:
        raise StoreError("a query that always returns a row returned none")
    return row


def vector_blob(vector: np.ndarray) -> bytes:
    """float32 little-endian, the layout sqlite-vec's functions read."""
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


@dataclass(frozen=True)
class StoredDocument:
    id: int
    path: str
    content_hash: str
    size: int
    mtime: float | None


@dataclass(frozen=True)
class ChunkRow:
    id: int
    text: str
    title: str
    headings: tuple[str, ...]
    page: int | None
    line: int | None
    document: str
    kind: str
    source: str


class Store:
    """One connection to one base file, and the operations on it."""

    _df_cache: dict[str, int]  # document_frequencies: chunks holding each word

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = Path(path)
        self._depth = 0  # write transactions open on this connection (writing())
        if not self.path.exists() and not create:
            raise BaseNotFound(
                f"no base at {self.path}: create it with `metis-lite index {self.path} FOLDER`"
                f" (a memory base needs no folder: `metis-lite index {self.path} --kind memory`)"
            )
        if self.path.exists():
            check_is_sqlite(self.path)
        self.db = connect(self.path)
        self._ensure_schema(create)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """One write transaction that takes the write lock before it reads anything (BEGIN
        IMMEDIATE), so no other writer's commit can make what it read stale; waits for another
        writer up to the busy timeout (then BASE_BUSY). Inside an open transaction it is a
        savepoint of it. A full disk or a read-only base is said as such."""
        try:
            if self._depth or self.db.in_transaction:
                self._depth += 1
                try:
                    with self.db:
                        yield
                finally:
                    self._depth -= 1
                return
            self._begin()
            self._depth = 1
            try:
                yield
            except BaseException:
                self._rollback()
                raise
            finally:
                self._depth = 0
            try:
                self.db.execute("COMMIT")
            except apsw.Error:
                self._rollback()
                raise
        except apsw.Error as exc:
            failure = write_failure(exc, self.path)
            if failure is None:
                raise
            raise failure from exc

    _transaction = writing

    def _begin(self) -> None:
        deadline = time.monotonic() + policy.BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self.db.execute("BEGIN IMMEDIATE")  # the busy timeout applies here
                return
            except apsw.BusyError as exc:
                if time.monotonic() >= deadline:
                    raise BaseBusy(
                        f"{self.path}: another process kept the base locked for writing for "
                        f"{policy.BUSY_TIMEOUT_MS / 1000:g} s; nothing was written, try again"
                    ) from exc
                time.sleep(random.uniform(*BUSY_RETRY_S))

    def _rollback(self) -> None:
        """Roll back what is open; SQLite may have rolled back already (SQLITE_FULL)."""
        if self.db.in_transaction:
            try:
                self.db.execute("ROLLBACK")
            except apsw.Error:
                pass

    # -- schema -----------------------------------------------------------------------------

    def _ensure_schema(self, create: bool) -> None:
        has_meta = self.db.execute(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'meta'"
        ).fetchone()
        if has_meta:
            row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                raise NotABase(f"{self.path} is not a metis-lite base (no schema version)")
            version = int(row[0])
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"{self.path} has schema version {version}; this metis-lite reads up to "
                    f"{SCHEMA_VERSION}: upgrade metis-lite to open it"
                )
            if self._missing_objects():
                try:  # tables added since the base was made (every statement is IF NOT EXISTS)
                    with self.db:
                        self.db.execute(schema_sql())
                except (apsw.ReadOnlyError, apsw.BusyError):
                    pass
            return
        other = _one(self.db.execute("SELECT count(*) FROM sqlite_schema"))[0]
        if other or not create:
            raise NotABase(f"{self.path} is an SQLite file but not a metis-lite base")
        with self._transaction():
            self.db.execute(schema_sql())
            self.db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?), ('created_at', ?)",
                (str(SCHEMA_VERSION), now_iso()),
            )

    # -- words index ------------------------------------------------------------------------

    @property
    def words_version(self) -> int:
        """The word rules the base's words index was built with (tokenizer.VERSIONS), as its
        declaration names them; read again only when the schema changes (rebuild_words here or
        in another process)."""
        cookie = _one(self.db.execute("PRAGMA schema_version"))[0]
        if getattr(self, "_words_cookie", None) != cookie:
            row = self.db.execute(
                "SELECT sql FROM sqlite_schema WHERE name = 'chunks_fts'"
            ).fetchone()
            self._words_cookie = cookie
            self._words_version = tokenizer.declared_version(row[0]) if row else tokenizer.VERSION
        return self._words_version

    @property
    def words_outdated(self) -> bool:
        """True when the words index was built by older word rules than this metis-lite's
        (before CJK bigrams): searches still read it by its own rules; `index` rebuilds it."""
        return self.words_version < tokenizer.VERSION

    def rebuild_words(self) -> int:
        """Build the words index again by today's word rules, from the chunks as stored (text,
        and title and headings as context, as replace_document writes them); returns the
        chunks indexed. One transaction: a crash leaves the old index whole or the new one,
        never a mix. Nothing is embedded again."""
        with self._transaction():
            self.db.execute("UPDATE meta SET value = value WHERE 0")  # the write lock first
            self.db.execute("DROP TABLE IF EXISTS chunks_fts")
            self.db.execute(_statement("chunks_fts"))
            rows = self.db.execute("SELECT id, text, title, headings FROM chunks ORDER BY id")
            self.db.cursor().executemany(
                "INSERT INTO chunks_fts (rowid, text, context) VALUES (?, ?, ?)",
                (
                    (chunk_id, text, " ".join((title, *json.loads(headings))))
                    for chunk_id, text, title, headings in rows
                ),
            )
            self.db.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )
            return int(_one(self.db.execute("SELECT count(*) FROM chunks"))[0])

    def _missing_objects(self) -> set[str]:
        wanted = set(_SCHEMA_OBJECT.findall(schema_sql()))
        present = {row[0] for row in self.db.execute("SELECT name FROM sqlite_schema")}
        return wanted - present

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

    # -- sources ----------------------------------------------------------------------------

    def sources(self) -> list[tuple[int, str, str | None]]:
        return list(self.db.execute("SELECT id, name, path FROM sources ORDER BY id"))

    def source_infos(self) -> tuple[SourceInfo, ...]:
        """Each source with its documents and chunks, in the order they were added."""
        rows = self.db.execute(
            "SELECT s.name, s.path, s.added_at, count(DISTINCT d.id), count(c.id) FROM sources s"
            " LEFT JOIN documents d ON d.source_id = s.id"
            " LEFT JOIN chunks c ON c.document_id = d.id GROUP BY s.id ORDER BY s.id"
        )
        return tuple(SourceInfo(n, p, docs, chunks, added) for n, p, added, docs, chunks in rows)

    def add_source(self, name: str, path: str | None) -> int:
        """Add a source (a folder, or None for the base's notes), or give one of that name its
        new folder; SOURCE_OVERLAP when the folder lies inside another source or holds one (its
        files would be indexed twice). Paths are compared as given: resolve them first."""
        with self._transaction():
            rows: list[Any] = self.db.execute("SELECT id, name, path FROM sources").fetchall()
            if path is not None:
                _check_no_overlap(path, [(n, p) for _, n, p in rows if n != name and p])
            row = next((r for r in rows if r[1] == name), None)
            if row:
                if path is not None and row[2] != path:
                    self.db.execute("UPDATE sources SET path = ? WHERE id = ?", (path, row[0]))
                return int(row[0])
            self.db.execute(
                "INSERT INTO sources (name, path, added_at) VALUES (?, ?, ?)",
                (name, path, now_iso()),
            )
            return int(self.db.last_insert_rowid())

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
        """Remove every document of a source (one transaction); returns how many."""
        with self._transaction():
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

    def documents_of(self, source_id: int) -> dict[str, StoredDocument]:
        rows = self.db.execute(
            "SELECT id, path, content_hash, size, mtime FROM documents WHERE source_id = ?",
            (source_id,),
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
        earlier version: a crash leaves either the old document whole or the new one whole."""
        with self._transaction():
            # Take the write lock before reading: a transaction that reads first holds a snapshot
            # that another connection's commit (a search count) makes stale, and SQLite then
            # refuses its first write at once (SQLITE_BUSY_SNAPSHOT), busy timeout or not.
            self.db.execute("UPDATE meta SET value = value WHERE 0")
            old = self.db.execute(
                "SELECT id FROM documents WHERE source_id = ? AND path = ?", (source_id, path)
            ).fetchone()
            if old:
                self._delete_document(old[0])
            self.db.execute(
                "INSERT INTO documents (source_id, path, kind, title, content_hash, size, mtime, indexed_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (source_id, path, kind, title, content_hash, size, mtime, now_iso()),
            )
            document_id = self.db.last_insert_rowid()
            for ordinal, chunk in enumerate(chunks):
                self.db.execute(
                    "INSERT INTO chunks (document_id, ordinal, text, title, headings, page, line)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        document_id,
                        ordinal,
                        chunk.text,
                        chunk.title,
                        json.dumps(list(chunk.headings)),
                        chunk.page,
                        chunk.line,
                    ),
                )
                self.db.execute(
                    "INSERT INTO chunks_fts (rowid, text, context) VALUES (?, ?, ?)",
                    (
                        self.db.last_insert_rowid(),
                        chunk.text,
                        " ".join((chunk.title, *chunk.headings)),
                    ),
                )
            return int(document_id)

    def remove_document(self, document_id: int) -> None:
        with self._transaction():
            self._delete_document(document_id)

    def _delete_document(self, document_id: int) -> None:
        self.db.execute(
            "DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE document_id = ?)",
            (document_id,),
        )
        # Chunks and their vectors go by ON DELETE CASCADE; the trigger logs vector removals.
        self.db.execute("DELETE FROM documents WHERE id = ?", (document_id,))

    # -- facts (memory.py decides; these write, inside its writing()) ------------------------

    def missing_facts(self, fact_ids: Iterable[int]) -> list[int]:
        return [
            i
            for i in fact_ids
            if self.db.execute("SELECT 1 FROM facts WHERE id = ?", (i,)).fetchone() is None
        ]

    def fact_rows(self, where: str, params: Sequence[Any] = (), *, columns: str) -> list[tuple]:
        return self.db.execute(f"SELECT {columns} FROM facts WHERE {where}", params).fetchall()

    def next_fact_id(self) -> int:
        return int(_one(self.db.execute("SELECT coalesce(max(id), 0) + 1 FROM facts"))[0])

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
    ) -> None:
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
                    stated_at if replaced_by else None,
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

    def ensure_schema_objects(self) -> None:
        """Make the tables added since the base was made (every statement is IF NOT EXISTS)."""
        if self._missing_objects():
            with self._transaction():
                self.db.execute(schema_sql())

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

    # -- vectors ----------------------------------------------------------------------------

    def chunks_lacking_vectors(
        self, model: str, limit: int, *, after: int = 0
    ) -> list[tuple[int, str]]:
        """(chunk id, text to embed) for chunks past `after` with no vector of `model`, by id."""
        rows = self.db.execute(
            "SELECT c.id, c.title, c.headings, c.text FROM chunks c"
            " LEFT JOIN vectors v ON v.chunk_id = c.id AND v.model = ?"
            " WHERE c.id > ? AND v.chunk_id IS NULL ORDER BY c.id LIMIT ?",
            (model, after, limit),
        )
        return [(r[0], contextualize(r[1], json.loads(r[2]), r[3])) for r in rows]

    def put_vectors(self, model: str, items: Iterable[tuple[int, np.ndarray]]) -> int:
        """Store vectors for chunks, replacing any earlier one; chunks removed meanwhile are skipped."""
        written = 0
        with self._transaction():
            for chunk_id, vector in items:
                self.db.execute("DELETE FROM vectors WHERE chunk_id = ?", (chunk_id,))
                self.db.execute(
                    "INSERT INTO vectors (chunk_id, model, embedding)"
                    " SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?)",
                    (chunk_id, model, vector_blob(vector), chunk_id),
                )
                written += self.db.changes()
        return written

    def drop_vectors(self, *, except_model: str | None = None) -> int:
        with self._transaction():
            if except_model is None:
                self.db.execute("DELETE FROM vectors")
            else:
                self.db.execute("DELETE FROM vectors WHERE model != ?", (except_model,))
            return self.db.changes()

    def vectors_since(self, seq: int, model: str) -> tuple[np.ndarray, np.ndarray, int]:
        """(chunk ids, float32 blob bytes joined, last seq) of `model`'s vectors written after `seq`.

        One `b"".join` and one `np.frombuffer` by the caller: no per-row arrays (MEASURED.md).
        """
        rows: list[Any] = self.db.execute(
            "SELECT seq, chunk_id, embedding FROM vectors WHERE seq > ? AND model = ? ORDER BY seq",
            (seq, model),
        ).fetchall()
        if not rows:
            last = _one(self.db.execute("SELECT coalesce(max(seq), 0) FROM vectors"))[0]
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint8), max(int(last), seq)
        ids = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        blob = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.uint8)
        return ids, blob, int(rows[-1][0])

    def removals_since(self, seq: int) -> tuple[list[int], int]:
        rows: list[Any] = self.db.execute(
            "SELECT seq, chunk_id FROM vector_removals WHERE seq > ? ORDER BY seq", (seq,)
        ).fetchall()
        if not rows:
            return [], seq
        return [r[1] for r in rows], int(rows[-1][0])

    def last_removal_seq(self) -> int:
        return int(_one(self.db.execute("SELECT coalesce(max(seq), 0) FROM vector_removals"))[0])

    def document_frequencies(self, words: Sequence[str]) -> tuple[int, dict[str, int]]:
        """(chunks in the base, chunks holding each word), from FTS5's own vocabulary; cached
        until this or another connection writes."""
        key = (self.data_version(), self.db.total_changes())
        if getattr(self, "_df_key", None) != key:
            self._df_key, self._df_cache = key, {}
            self._df_total = int(_one(self.db.execute("SELECT count(*) FROM chunks"))[0])
            self.db.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_vocab"
                " USING fts5vocab(main, chunks_fts, row)"
            )
        missing = [w for w in words if w not in self._df_cache]
        if missing:
            found = dict(
                self.db.execute(
                    f"SELECT term, doc FROM temp.chunks_vocab WHERE term IN ({','.join('?' * len(missing))})",
                    tuple(missing),
                )
            )
            self._df_cache.update({w: int(found.get(w, 0)) for w in missing})
        return self._df_total, {w: self._df_cache[w] for w in words}

    def data_version(self) -> int:
        """Changes when another connection commits (PRAGMA data_version)."""
        return int(_one(self.db.execute("PRAGMA data_version"))[0])

    # -- reading ----------------------------------------------------------------------------

    def chunk_rows(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self.db.execute(
            "SELECT c.id, c.text, c.title, c.headings, c.page, c.line, d.path, d.kind, s.name"
            " FROM chunks c JOIN documents d ON d.id = c.document_id"
            f" JOIN sources s ON s.id = d.source_id WHERE c.id IN ({marks})",
            tuple(ids),
        )
        return {
            r[0]: ChunkRow(r[0], r[1], r[2], tuple(json.loads(r[3])), r[4], r[5], r[6], r[7], r[8])
            for r in rows
        }

    def chunks_generation(self) -> tuple[int, int]:
        """(chunks, last chunk id ever given): changes whenever a chunk is added or removed
        (ids are never reused); cached until this or another connection writes."""
        key = (self.data_version(), self.db.total_changes())
        if getattr(self, "_generation_key", None) != key:
            self._generation_key = key
            self._generation = _one(
                self.db.execute(
                    "SELECT (SELECT count(*) FROM chunks),"
                    " coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'chunks'), 0)"
                )
            )
        return self._generation

    def chunk_sample(self, n: int, chars: int) -> list[str]:
        """The first `chars` characters of up to n chunks spread evenly over the ids (one
        index seek each, however large the base)."""
        return [
            row[0]
            for row in self.db.execute(
                "WITH RECURSIVE"
                " bounds(lo, hi) AS (SELECT min(id), max(id) FROM chunks),"
                " k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i + 1 < ?),"
                " picked(id) AS (SELECT DISTINCT (SELECT c.id FROM chunks c"
                "   WHERE c.id >= lo + i * (hi - lo + 1) / ? ORDER BY c.id LIMIT 1)"
                "   FROM k, bounds WHERE lo IS NOT NULL)"
                " SELECT substr(c.text, 1, ?) FROM picked JOIN chunks c ON c.id = picked.id",
                (n, n, chars),
            )
        ]

    def filtered_chunk_ids(self, filters: Filters) -> np.ndarray:
        """Ids of the chunks the filters keep (sorted)."""
        where, params = filter_clause(filters)
        rows = self.db.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
            f" JOIN sources s ON s.id = d.source_id WHERE {where} ORDER BY c.id",
            params,
        )
        return np.fromiter((r[0] for r in rows), dtype=np.int64)

    def counts(self) -> dict[str, int]:
        one = lambda sql: int(_one(self.db.execute(sql))[0])  # noqa: E731
        return {
            "sources": one("SELECT count(*) FROM sources"),
            "documents": one("SELECT count(*) FROM documents"),
            "chunks": one("SELECT count(*) FROM chunks"),
            "vectors": one("SELECT count(*) FROM vectors"),
        }

    def chunks_with_vector(self, model: str) -> int:
        return int(
            _one(self.db.execute("SELECT count(*) FROM vectors WHERE model = ?", (model,)))[0]
        )

    def kinds(self) -> dict[str, int]:
        return dict(
            self.db.execute("SELECT kind, count(*) FROM documents GROUP BY kind ORDER BY kind")
        )

    # -- runs and counts --------------------------------------------------------------------

    def start_run(self) -> int:
        with self._transaction():
            self.db.execute(
                "INSERT INTO runs (started_at, state) VALUES (?, 'running')", (now_iso(),)
            )
            return int(self.db.last_insert_rowid())

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

    def count_searches(self, searches: int) -> None:
        """Add to today's count of searches (never what was asked)."""
        day = datetime.now(UTC).strftime("%Y-%m-%d")
        try:
            with self._transaction():
                self.db.execute(
                    "INSERT INTO search_counts (day, searches) VALUES (?, ?)"
                    " ON CONFLICT (day) DO UPDATE SET searches = searches + excluded.searches",
                    (day, searches),
                )
        except (apsw.BusyError, BaseBusy, BaseReadOnly, DiskFull):
            pass  # a count is not worth failing or delaying a search for

    def search_counts(self, days: int = 30) -> dict[str, int]:
        rows = self.db.execute(
            "SELECT day, searches FROM search_counts ORDER BY day DESC LIMIT ?", (days,)
        )
        return dict(rows)


def filter_clause(filters: Filters) -> tuple[str, tuple[Any, ...]]:
    """SQL over aliases d (documents) and s (sources) keeping what the filters keep."""
    parts: list[str] = []
    params: list[Any] = []
    if filters.path_prefix:
        # As results show it ("source/path/") or inside the source ("path/"): issue 15.
        parts.append("(substr(d.path, 1, ?) = ? OR substr(s.name || '/' || d.path, 1, ?) = ?)")
        params += [len(filters.path_prefix), filters.path_prefix] * 2
    if filters.kinds:
        parts.append(f"d.kind IN ({','.join('?' * len(filters.kinds))})")
        params += list(filters.kinds)
    if filters.sources:
        parts.append(f"s.name IN ({','.join('?' * len(filters.sources))})")
        params += list(filters.sources)
    return (" AND ".join(parts) or "1"), tuple(params)


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
