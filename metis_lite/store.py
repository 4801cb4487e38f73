"""The base file: connection policy, schema, and every write; one Store owns one connection.

A base is one SQLite file in WAL mode (searches are answered while another connection
indexes), with a busy timeout and foreign keys on, and the FTS5 tokenizer registered on every
connection. The DDL lives in schema.sql; the queries are beside the functions that run them.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

import apsw
import numpy as np

from metis_lite import tokenizer
from metis_lite.errors import (
    BaseBusy,
    BaseReadOnly,
    DiskFull,
    NotABase,
    SchemaTooNew,
    StoreError,
)
from metis_lite.records import Chunk, Filters, contextualize

SCHEMA_VERSION = 2
"""2: the words index is declared with its word rules (`tokenize='metis 2'`). A base of version
1 is read as it is, and `index` rebuilds its words index (rebuild_words) and records 2: code
that knows only version 1 then refuses the base, rather than write words by its old rules."""
BUSY_TIMEOUT_MS = 5_000
"""How long a statement waits for another connection's write to end before failing."""

SQLITE_MAGIC = b"SQLite format 3\x00"

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


def vector_blob(vector: np.ndarray) -> bytes:
    """float32 little-endian, the layout sqlite-vec's functions read."""
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def connect(path: str | os.PathLike[str], *, readonly: bool = False) -> apsw.Connection:
    """Open a connection with the base's policy (apsw bestpractice: WAL, busy timeout, FKs).

    The schema is read first, so a damaged file says so. Only a base or a new file is put in
    WAL mode, never another program's database. A base where nothing can be written (a
    read-only file system, file or folder) is opened read-only, and immutable when no -wal
    lies beside it (SQLite could not create the -shm it needs otherwise): it is still searched,
    and writing to it fails as BASE_READ_ONLY.
    """
    unwritable = not readonly and _unwritable(Path(path))
    readonly = readonly or unwritable
    name, flags = str(path), apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    if readonly:
        flags = apsw.SQLITE_OPEN_READONLY
        if unwritable and not Path(f"{path}-wal").exists():
            name = f"file:{quote(str(Path(path).resolve()))}?immutable=1"
            flags |= apsw.SQLITE_OPEN_URI
    try:
        connection = apsw.Connection(name, flags=flags)
        connection.set_busy_timeout(BUSY_TIMEOUT_MS)
        objects, is_base = connection.execute(
            "SELECT count(*), count(*) FILTER (WHERE name = 'meta') FROM sqlite_schema"
        ).fetchone()
        tokenizer.register(connection)
        connection.execute("PRAGMA foreign_keys = ON")
        if not readonly and (is_base or not objects):
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = NORMAL")
    except apsw.NotADBError as exc:
        raise NotABase(f"{path} is not a metis-lite base (not an SQLite file)") from exc
    except apsw.CorruptError as exc:
        raise NotABase(f"{path} is damaged ({exc}): it cannot be read as a base") from exc
    except apsw.ReadOnlyError as exc:
        raise BaseReadOnly(f"{path} is read-only: {exc}") from exc
    except apsw.CantOpenError as exc:
        if unwritable:
            raise BaseReadOnly(
                f"{path} is read-only and its -wal holds commits not yet in the file: open it "
                "once where it can be written (or copy it with metis-lite copy)"
            ) from exc
        raise StoreError(f"cannot open {path}: {exc}") from exc
    return connection


def _unwritable(path: Path) -> bool:
    """True for an existing base SQLite could not write: the file, or the folder that must
    hold its -wal and -shm, is read-only (a read-only mount says so even to root)."""
    return path.is_file() and not (
        os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
    )


def _write_failure(exc: apsw.Error, path: Path) -> StoreError | None:
    """The StoreError a failed write means, or None. SQLite rolls a transaction back itself
    on SQLITE_FULL, and apsw's own rollback then fails: the cause is in the chain."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, apsw.FullError):
            return DiskFull(
                f"{path}: the disk is full (or the base reached its size limit): the unfinished "
                "write was not kept and what was written before is whole; free some space and "
                "run again"
            )
        if isinstance(cause, apsw.ReadOnlyError):
            return BaseReadOnly(f"{path} is read-only: it can be searched, not written")
        cause = cause.__context__
    return None


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

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        self.path = Path(path)
        if not self.path.exists() and not create:
            raise StoreError(f"no base at {self.path} (index a folder into it to create it)")
        if self.path.exists():
            _check_is_sqlite(self.path)
        self.db = connect(self.path)
        self._ensure_schema(create)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """`with self.db:` (one transaction), a full disk or a read-only base said as such."""
        try:
            with self.db:
                yield
        except apsw.Error as exc:
            failure = _write_failure(exc, self.path)
            if failure is None:
                raise
            raise failure from exc

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
        other = self.db.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
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
        cookie = self.db.execute("PRAGMA schema_version").fetchone()[0]
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
            return int(self.db.execute("SELECT count(*) FROM chunks").fetchone()[0])

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

    def add_source(self, name: str, path: str | None) -> int:
        with self._transaction():
            row = self.db.execute("SELECT id, path FROM sources WHERE name = ?", (name,)).fetchone()
            if row:
                if path is not None and row[1] != path:
                    self.db.execute("UPDATE sources SET path = ? WHERE id = ?", (path, row[0]))
                return int(row[0])
            self.db.execute(
                "INSERT INTO sources (name, path, added_at) VALUES (?, ?, ?)",
                (name, path, now_iso()),
            )
            return int(self.db.last_insert_rowid())

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
        rows = self.db.execute(
            "SELECT seq, chunk_id, embedding FROM vectors WHERE seq > ? AND model = ? ORDER BY seq",
            (seq, model),
        ).fetchall()
        if not rows:
            last = self.db.execute("SELECT coalesce(max(seq), 0) FROM vectors").fetchone()[0]
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint8), max(int(last), seq)
        ids = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        blob = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.uint8)
        return ids, blob, int(rows[-1][0])

    def removals_since(self, seq: int) -> tuple[list[int], int]:
        rows = self.db.execute(
            "SELECT seq, chunk_id FROM vector_removals WHERE seq > ? ORDER BY seq", (seq,)
        ).fetchall()
        if not rows:
            return [], seq
        return [r[1] for r in rows], int(rows[-1][0])

    def last_removal_seq(self) -> int:
        return int(
            self.db.execute("SELECT coalesce(max(seq), 0) FROM vector_removals").fetchone()[0]
        )

    def document_frequencies(self, words: Sequence[str]) -> tuple[int, dict[str, int]]:
        """(chunks in the base, chunks holding each word), from FTS5's own vocabulary; cached
        until this or another connection writes."""
        key = (self.data_version(), self.db.total_changes())
        if getattr(self, "_df_key", None) != key:
            self._df_key, self._df_cache = key, {}
            self._df_total = int(self.db.execute("SELECT count(*) FROM chunks").fetchone()[0])
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
        return int(self.db.execute("PRAGMA data_version").fetchone()[0])

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
            self._generation = self.db.execute(
                "SELECT (SELECT count(*) FROM chunks),"
                " coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'chunks'), 0)"
            ).fetchone()
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
        one = lambda sql: int(self.db.execute(sql).fetchone()[0])  # noqa: E731
        return {
            "sources": one("SELECT count(*) FROM sources"),
            "documents": one("SELECT count(*) FROM documents"),
            "chunks": one("SELECT count(*) FROM chunks"),
            "vectors": one("SELECT count(*) FROM vectors"),
        }

    def chunks_with_vector(self, model: str) -> int:
        return int(
            self.db.execute("SELECT count(*) FROM vectors WHERE model = ?", (model,)).fetchone()[0]
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
        except (apsw.BusyError, BaseReadOnly, DiskFull):
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


def _check_is_sqlite(path: Path) -> None:
    if path.is_dir():
        raise NotABase(f"{path} is a folder, not a base file")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror}") from exc
    if head and head != SQLITE_MAGIC:
        raise NotABase(f"{path} is not a metis-lite base (not an SQLite file)")


class IndexerLock:
    """One indexer at a time per base: an advisory lock on BASE.lock, released by the OS even
    when the indexer is killed. (Not on the base file itself: closing any descriptor of a
    database file drops SQLite's POSIX locks held by the process.)"""

    def __init__(self, base_path: Path) -> None:
        self.path = Path(str(base_path) + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            base = self.path.with_suffix("")
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise BaseReadOnly(f"{base} is read-only: it can be searched, not indexed") from exc
            raise StoreError(f"cannot lock {base} for indexing: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BaseBusy(
                f"{self.path.with_suffix('')} is being indexed by another process; "
                "searches still work, try indexing again when it ends"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def held_elsewhere(self) -> bool:
        """True while another process indexes this base (the service's Indexing state)."""
        if not self.path.exists():
            return False
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def __enter__(self) -> IndexerLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
